#!/bin/sh
# Format check, lint and strict typing: what CI enforces.
set -eu
cd "$(dirname "$0")/.."
[ -x .venv/bin/ruff ] || sh dev/setup.sh test
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy
