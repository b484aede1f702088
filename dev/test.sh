#!/bin/sh
# Install everything the tests need (packages, NVIDIA tool wheels, cuda-gdb) and run them.
set -eu
cd "$(dirname "$0")/.."
# PYTHON and POSTMORTEM_VENV, when set, pick the interpreter and the venv (see dev/setup.sh).
sh dev/setup.sh test
exec "${POSTMORTEM_VENV:-.venv}/bin/python" -m pytest "$@"
