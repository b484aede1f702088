#!/bin/sh
# Make .venv with postmortem and what its tests need. Idempotent; safe to rerun.
#   sh dev/setup.sh            the package, the NVIDIA tool wheels (demo)
#   sh dev/setup.sh test       also the test tools, the fixture compilers and cuda-gdb
# PYTHON picks the interpreter (python3), POSTMORTEM_VENV the venv (.venv): .ci/run makes a
# second one with the oldest Python the project supports, with the extras POSTMORTEM_EXTRAS
# names.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${POSTMORTEM_VENV:-.venv}
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }
apt_updated=""
apt_install() {
    [ -n "$apt_updated" ] || { as_root apt-get update -qq && apt_updated=1; }
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "error: postmortem needs Python 3.10 or newer ($PYTHON)" >&2; exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    # Debian's python3 leaves venv/ensurepip to the python3-venv package.
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        rm -rf "$VENV"
        echo "setup: installing python3-venv (Debian)" >&2
        apt_install python3-venv
        "$PYTHON" -m venv "$VENV"
    fi
fi
LOG="$VENV/setup.log"
MODE=${1:-}
if [ "$MODE" = test ]; then
    # dask, ray and sentry: the optional extras, tested like the rest. POSTMORTEM_EXTRAS
    # names fewer for a venv that runs only some tiers (.ci/run's second Python).
    EXTRAS=${POSTMORTEM_EXTRAS:-tools,dev,fixtures,dask,ray,sentry}
    # pip compiles every module it installs, one file at a time. The test venv's packages
    # are mostly never imported by the tests, and dev/test.sh keeps the bytecode of those
    # that are.
    COMPILE=--no-compile
else
    EXTRAS=tools
    COMPILE=""
fi
pip_install() {
    # pip's build chatter goes to a log, shown only when something fails.
    if ! "$VENV/bin/python" -m pip install -q $COMPILE "$@" >"$LOG" 2>&1; then
        tail -n 30 "$LOG" >&2
        echo "error: pip install $* failed (full log: $LOG)" >&2
        exit 1
    fi
}
# What was installed, and from which pyproject.toml: a rerun with the same installs nothing
# (pip would take seconds to find that out).
STAMP="$VENV/setup.done"
wanted="$EXTRAS $COMPILE $(cksum <pyproject.toml)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$wanted" ]; then
    rm -f "$STAMP"
    pip_install --upgrade pip
    # The distribution is cuda-postmortem; a venv made before the rename holds it as
    # "postmortem".
    "$VENV/bin/python" -m pip uninstall -y -q postmortem >/dev/null 2>&1 || true
    pip_install -e ".[$EXTRAS]"
    echo "$wanted" >"$STAMP"
fi
if [ "$MODE" = test ]; then
    if ! command -v cuda-gdb >/dev/null 2>&1; then
        # Debian ships cuda-gdb 11.8 as nvidia-cuda-gdb in non-free.
        for f in /etc/apt/sources.list.d/debian.sources; do
            [ -f "$f" ] && as_root sed -i -E '/^Components:/{/non-free( |$)/!s/$/ contrib non-free/}' "$f"
        done
        if [ -f /etc/apt/sources.list ]; then
            as_root sed -i -E '/^deb .*debian/{/non-free( |$)/!s/$/ contrib non-free/}' /etc/apt/sources.list
        fi
        echo "setup: installing cuda-gdb (Debian nvidia-cuda-gdb)" >&2
        apt_install nvidia-cuda-gdb || echo "setup: could not install cuda-gdb; its tests will skip (or fail under CI=true)" >&2
    fi
    if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
        # The HTML report is checked in a real headless browser.
        echo "setup: installing chromium and chromium-driver (Debian)" >&2
        apt_install chromium chromium-driver || echo "setup: could not install chromium; the HTML browser tests will skip (or fail under CI=true)" >&2
    fi
    XSD="$VENV/share/junit-10.xsd"
    if [ ! -s "$XSD" ]; then
        # The JUnit XML schema Jenkins' xunit plugin defines, as pytest's source distribution
        # ships it (testing/example_scripts/junit-10.xsd): what the scan's JUnit report is
        # validated against.
        echo "setup: fetching junit-10.xsd (pytest 8.4.2 sdist)" >&2
        sdist=$(mktemp -d)
        if "$VENV/bin/python" -m pip download -q --no-deps --no-binary :all: pytest==8.4.2 -d "$sdist" >"$LOG" 2>&1; then
            mkdir -p "$VENV/share"
            "$VENV/bin/python" -c 'import sys, tarfile; t = tarfile.open(sys.argv[1]); sys.stdout.buffer.write(t.extractfile("pytest-8.4.2/testing/example_scripts/junit-10.xsd").read())' "$sdist"/pytest-8.4.2.tar.gz >"$XSD"
        else
            echo "setup: could not fetch junit-10.xsd; the JUnit schema test will skip (or fail under CI=true)" >&2
        fi
        rm -rf "$sdist"
    fi
    if ! ls /usr/lib/x86_64-linux-gnu/libLLVM-14.so* >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q "libLLVM-14.so"; then
        # LLVM 14's demangler: the reference the production-kernel names are checked against.
        echo "setup: installing libllvm14 (Debian)" >&2
        apt_install libllvm14 || echo "setup: could not install libllvm14; the demangling corpus test will skip (or fail under CI=true)" >&2
    fi
fi
