#!/bin/sh
# Install everything the tests need (packages, NVIDIA tool wheels, cuda-gdb) and run them.
set -eu
cd "$(dirname "$0")/.."
sh dev/setup.sh test
exec .venv/bin/python -m pytest "$@"
