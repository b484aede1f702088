#!/bin/sh
# Install everything the tests need (packages, NVIDIA tool wheels, cuda-gdb) and run them.
set -eu
cd "$(dirname "$0")/.."
# PYTHON and POSTMORTEM_VENV, when set, pick the interpreter and the venv (see dev/setup.sh).
# The tests run in one process per core and one more, as a part of the suite waits on the
# programs and timers it starts; arguments after it win (-n 0: one process; -m slow: the slow
# tier, which the default run leaves out).
sh dev/setup.sh test
# The suite starts postmortem and its tools' wrappers hundreds of times: each process finds
# the bytecode of what an earlier one compiled (in __pycache__ folders, which git ignores).
unset PYTHONDONTWRITEBYTECODE
workers=$(($(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) + 1))
exec "${POSTMORTEM_VENV:-.venv}/bin/python" -m pytest -n "$workers" --dist worksteal "$@"
