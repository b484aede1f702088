"""Benchmark: whole commands, as a user runs them, side by side with cuda-gdb on the same dump.

Every figure is a whole process, from start to exit: Python's start-up, imports, reading,
rendering; for cuda-gdb, opening the dump (`target cudacore`) and answering `info cuda
kernels` and `bt` in batch mode. Median wall time and peak memory (the process's own, from
wait4) over --repeat runs, on a small fixture dump, on a middling one (7,000 lanes: 14,497
sections, near the most that are read without numpy, `elf.SMALL_TABLE`) and on a
full-H100-shaped one (132 SMs x 64 warps x 32 lanes = 270,336 lanes), the last two with
r400 rows so that cuda-gdb 11.8 reads them, written by fixtures/builder/large.py into a
temporary folder. On that one, cuda-gdb and `analyze` (seconds each) run half as often.
Last, the same H100-shaped dump with r615 rows, which cuda-gdb 11.8 cannot read: `analyze`
then skips it, and should cost what `analyze --no-gdb` costs.

The package's bytecode is compiled first (into its __pycache__ folders, whatever
PYTHONDONTWRITEBYTECODE says), as `pip install` does: otherwise every run would pay for
compiling the modules it imports, which no installed copy does.

    python bench/bench_commands.py [--repeat R] [--lanes N] [--middling-lanes N]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = Path("fixtures") / "dumps" / "oob_store.nvcudmp"


def _command() -> list[str]:
    # The `postmortem` script pip installs next to the interpreter is what users run; it
    # starts faster than `python -m postmortem` (no runpy).
    script = Path(sys.executable).parent / "postmortem"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "postmortem"]


POSTMORTEM = _command()


def run(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak resident KiB of one process."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - started, int(usage.ru_maxrss)


def measure(argv: list[str], repeat: int) -> tuple[float, int]:
    runs = [run(argv) for _ in range(repeat)]
    return statistics.median(t for t, _ in runs), max(m for _, m in runs)


def cuda_gdb(dump: Path) -> list[str] | None:
    exe = shutil.which("cuda-gdb")
    if exe is None:
        return None
    return [exe, "-batch", "-nx", "-iex", "set auto-load off", "-ex",
            f"target cudacore {dump}", "-ex", "info cuda kernels", "-ex", "bt"]  # fmt: skip


def table(title: str, dump: Path, repeat: int, slow_repeat: int) -> None:
    """Commands of a second or less run `repeat` times; cuda-gdb and analyze, which take
    seconds on a large dump, `slow_repeat` times."""
    info = dump.stat()  # the large dumps are sparse: their size, and the disk they take
    print(
        f"\n{title}: {dump} ({info.st_size / 2**20:.1f} MiB, "
        f"{info.st_blocks * 512 / 2**20:.1f} MiB on disk)"
    )
    reference = cuda_gdb(dump)
    gdb = measure(reference, slow_repeat) if reference else None
    rows = [
        ("postmortem --help", [*POSTMORTEM, "--help"], repeat),
        ("postmortem info", [*POSTMORTEM, "info", str(dump)], repeat),
        (
            "postmortem analyze --no-gdb",
            [*POSTMORTEM, "analyze", str(dump), "--no-gdb"],
            slow_repeat,
        ),
        ("postmortem analyze (with cuda-gdb)", [*POSTMORTEM, "analyze", str(dump)], slow_repeat),
    ]
    if gdb:
        print(f"  {'cuda-gdb: kernels + bt':38s} {gdb[0]:7.3f} s  {gdb[1] / 1024:7.0f} MiB")
    for label, argv, runs in rows:
        seconds, kib = measure(argv, runs)
        ratio = f"  {gdb[0] / seconds:5.1f}x cuda-gdb's speed" if gdb else ""
        print(f"  {label:38s} {seconds:7.3f} s  {kib / 1024:7.0f} MiB{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lanes", type=int, default=270_336)
    parser.add_argument("--middling-lanes", type=int, default=7_000)
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "postmortem", quiet=1)
    # The first analyze with cuda-gdb may learn that it needs an empty data directory.
    run([*POSTMORTEM, "analyze", str(SMALL)])
    table("small dump", ROOT / SMALL, args.repeat, args.repeat)
    with tempfile.TemporaryDirectory(prefix="postmortem-bench-") as scratch:
        middling = _build(Path(scratch) / "middling.nvcudmp", args.middling_lanes)
        table(f"middling dump, {args.middling_lanes:,} lanes", middling, args.repeat, args.repeat)
        middling.unlink()
        large = _build(Path(scratch) / "h100.nvcudmp", args.lanes)
        slow = max(1, args.repeat // 2)
        table(f"H100-shaped dump, {args.lanes:,} lanes", large, args.repeat, slow)
        large.unlink()
        newer = _build(Path(scratch) / "h100_r615.nvcudmp", args.lanes, "r615")
        unreadable_to_gdb(newer, slow)


def _build(path: Path, lanes: int, layout: str = "r400") -> Path:
    builder = ROOT / "fixtures" / "builder" / "large.py"
    subprocess.run(
        [sys.executable, str(builder), str(path), "--layout", layout, "--lanes", str(lanes)],
        check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return path


def unreadable_to_gdb(dump: Path, repeat: int) -> None:
    """`analyze` on a dump the installed cuda-gdb cannot read, against `analyze --no-gdb`."""
    print(f"\nH100-shaped dump with r615 rows (cuda-gdb 11.8 cannot read them): {dump}")
    without, _ = measure([*POSTMORTEM, "analyze", str(dump), "--no-gdb"], repeat)
    with_gdb, _ = measure([*POSTMORTEM, "analyze", str(dump)], repeat)
    print(f"  {'postmortem analyze --no-gdb':38s} {without:7.3f} s")
    print(f"  {'postmortem analyze (cuda-gdb skipped)':38s} {with_gdb:7.3f} s  "
          f"{with_gdb - without:+.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
