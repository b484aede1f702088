#!/bin/sh
# Install postmortem into .venv and run it on the bundled sample dump.
set -eu
cd "$(dirname "$0")/.."
sh dev/setup.sh
exec .venv/bin/postmortem analyze fixtures/dumps/oob_store.nvcudmp --source-dir fixtures/cu
