"""Record what the installed cuda-gdb prints on the fixture dumps, as transcripts.

Usage: ``python tests/integration/record_transcripts.py [--dumps DIR] [NAME ...]``

Writes ``fixtures/transcripts/cuda-gdb/<version>/<dump>__<command>.txt``, one file per
command of `postmortem.gdb.DEFAULT_COMMANDS` plus ``<dump>__banner.txt`` (what ``target
cudacore`` printed) and ``<dump>__outside.txt`` (what fell outside the command markers:
start-up warnings, an internal error), each with the ``# source:``/``# tool-version:``/
``# note:`` header.
Paths of the machine are scrubbed: the dump's folder becomes ``fixtures/dumps``, cuda-gdb's
scratch folder ``/tmp/cuda-dbg/PID/sessionN``. The dumps are built byte-identically by
fixtures/builder/build_dumps.py, so ``--dumps`` may point at a private build of them.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from postmortem.gdb import DEFAULT_COMMANDS, run_cuda_gdb  # noqa: E402

# Dumps worth a transcript: each exception kind, no line info, two devices and modules, a
# hang, a templated kernel, and two that 11.8 cannot read right (ABI v8, r565 rows).
DEFAULT_DUMPS = (
    "oob_store",
    "oob_store_nolineinfo",
    "device_assert",
    "misaligned_load",
    "two_devices",
    "two_modules",
    "hang_barrier.twin_r400",
    "cutlass_like.twin_r400",
    "oob_store_v8",
    "oob_store_r565",
)
_SLUGS = {
    "p/x $errorpc": "p-x",
    "info symbol $errorpc": "info-symbol",
    "info line *$errorpc": "info-line",
}


def slug(command: str) -> str:
    """Returns the file-name part for a command: ``info cuda kernels`` → ``info-cuda-kernels``."""
    if command in _SLUGS:
        return _SLUGS[command]
    if command.startswith("x/"):
        return "x-i"
    return re.sub(r"[^a-z0-9]+", "-", command.lower()).strip("-")


def scrub(text: str, dumps: Path) -> str:
    """Replaces this machine's paths by stable ones."""
    text = text.replace(str(dumps.resolve()), "fixtures/dumps").replace(
        str(dumps), "fixtures/dumps"
    )
    text = text.replace(str(REPO), ".")
    text = re.sub(r"/tmp/cuda-dbg/\d+/session\d+/", "/tmp/cuda-dbg/PID/sessionN/", text)
    return re.sub(r"/tmp/postmortem-gdb-data-\w+", "/tmp/postmortem-gdb-data-XXXX", text)


def record(name: str, dumps: Path) -> list[Path]:
    """Runs cuda-gdb on one dump and writes its transcripts; returns the files written."""
    session = run_cuda_gdb(dumps / f"{name}.nvcudmp", DEFAULT_COMMANDS, timeout=120)
    version = session.version or "unknown"
    folder = REPO / "fixtures" / "transcripts" / "cuda-gdb" / version
    folder.mkdir(parents=True, exist_ok=True)
    retry = " after the empty -data-directory retry" if session.retried else ""
    written = []
    steps = [("target cudacore", "banner", session.banner)]
    steps += [(o.command, slug(o.command), o.text) for o in session.outputs]
    if session.outside.strip():
        steps.append(("(outside the markers)", "outside", session.outside))
    for command, part, text in steps:
        path = folder / f"{name}__{part}.txt"
        header = (
            f"# source: live run of cuda-gdb on fixtures/dumps/{name}.nvcudmp, recorded by "
            "tests/integration/record_transcripts.py\n"
            f"# tool-version: {version} (Debian nvidia-cuda-gdb)\n"
            f"# note: output of {command!r}{retry}; machine paths scrubbed "
            "(dump folder -> fixtures/dumps, /tmp/cuda-dbg/PID/sessionN)\n"
        )
        path.write_text(header + scrub(text, dumps) + "\n", encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Records the transcripts of the named (or default) dumps."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dumps", type=Path, default=REPO / "fixtures" / "dumps")
    parser.add_argument("names", nargs="*", default=list(DEFAULT_DUMPS))
    args = parser.parse_args(argv)
    for name in args.names:
        for path in record(name, args.dumps):
            print(path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
