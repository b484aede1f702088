"""Benchmark: each figure of issue 42 beside its yardstick, in one run.

1. `postmortem info` and `postmortem analyze --no-gdb` of a small fixture dump and of a
   full-H100-shaped one (132 SMs x 64 warps x 32 lanes = 270,336 lanes, 4 GiB of sparse
   global memory, r400 rows so that cuda-gdb 11.8 reads them; written by
   fixtures/builder/large.py), against cuda-gdb opening the same dump and listing its
   kernels (`cuda-gdb -batch -ex "target cudacore DUMP" -ex "info cuda kernels"`). A
   cuda-gdb that cannot open a dump is said so, and ours is shown alone. Then the same
   H100 shape with a grid-wide fault (every lane of the second half of its warps faulting,
   135,168 lanes: a wrong base pointer in every thread), run once each.
2. `postmortem scan DIR -j 2 --no-cache` of N distinct dumps (copies of 13 fixture dumps and
   of one 28 MB dump of 86,016 lanes, each copy made distinct by trailing bytes), in dumps/s
   and CPU ms per dump, with nvdisasm (the instruction at each faulting PC) and without it
   (`--no-disasm`: the signatures alone), against reading the same bytes with `cat` (from the
   page cache, warmed first): the physical floor.

Every figure is a whole process, start to exit: the median wall time of --repeat runs and
its CPU time (user + system, the process's and its children's: the scan's workers,
nvdisasm), with the package's bytecode compiled first, as `pip install` does. `analyze` is
timed as a build's first (`--no-cache`: nvdisasm runs) and as the next ones (the listing
kept by the first), in a cache folder of the benchmark's own.

    python bench/bench_yardsticks.py [--repeat R] [--count N] [--lanes L]
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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "fixtures" / "dumps" / "oob_store.nvcudmp"
SCAN_SOURCES = (
    "oob_store", "cutlass_like", "device_assert", "misaligned_load", "hostile_names", "calls",
    "shared_overflow", "hang_barrier", "hang_spin", "hang_all_reduce", "hang_fa3_busy",
    "midflight", "oob_store_r580",
)  # fmt: skip
"""Fixture dumps the scan's corpus copies (the 14th source is a large.py dump)."""


def _command() -> list[str]:
    script = Path(sys.executable).parent / "postmortem"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "postmortem"]


POSTMORTEM = _command()


@dataclass(frozen=True, slots=True)
class Figure:
    """One command's median wall seconds and CPU seconds over its runs, and whether every
    run did what it should."""

    wall: float
    cpu: float
    ok: bool


def run(argv: list[str], check: str | None = None) -> tuple[float, float, bool]:
    """Wall and CPU seconds (user + system, with reaped children) of one process; whether
    it exited 0 (or, with `check`, printed it)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE if check else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if check else subprocess.DEVNULL,
    )  # fmt: skip
    output = process.stdout.read() if process.stdout else b""
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if process.stdout:
        process.stdout.close()
    ok = os.waitstatus_to_exitcode(status) == 0 if check is None else check.encode() in output
    return wall, usage.ru_utime + usage.ru_stime, ok


def measure(argv: list[str], repeat: int, check: str | None = None) -> Figure:
    runs = [run(argv, check) for _ in range(repeat)]
    return Figure(
        statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs),
        all(r[2] for r in runs),
    )


def _line(label: str, figure: Figure, yardstick: Figure | None = None) -> str:
    text = f"  {label:34s} {figure.wall:7.3f} s wall {figure.cpu:7.3f} s CPU"
    if yardstick is not None and yardstick.ok:
        text += f"   {yardstick.wall / figure.wall:5.2f}x cuda-gdb's speed"
    return text + ("" if figure.ok else "   (FAILED)")


def commands(title: str, dump: Path, repeat: int) -> None:
    """info and analyze --no-gdb of `dump` against cuda-gdb opening it."""
    print(f"\n{title}: {dump.name} ({dump.stat().st_size / 2**20:.1f} MiB)")
    gdb = shutil.which("cuda-gdb")
    yardstick = None
    if gdb is None:
        print("  cuda-gdb not found: ours alone")
    else:
        argv = [gdb, "-batch", "-ex", f"target cudacore {dump}", "-ex", "info cuda kernels"]
        yardstick = measure(argv, repeat, check="Invocation")
        if yardstick.ok:
            print(f"  {'cuda-gdb: open + info cuda kernels':34s} {yardstick.wall:7.3f} s wall "
                  f"{yardstick.cpu:7.3f} s CPU")  # fmt: skip
        else:
            print("  cuda-gdb cannot open this dump (no kernel table printed): ours alone")
    analyze = [*POSTMORTEM, "analyze", str(dump), "--no-gdb"]
    for label, argv in (
        ("postmortem info", [*POSTMORTEM, "info", str(dump)]),
        # The first analyze of a build runs nvdisasm; the next ones read its kept listing.
        ("postmortem analyze --no-gdb --no-cache", [*analyze, "--no-cache"]),
        ("postmortem analyze --no-gdb (kept)", analyze),
    ):
        print(_line(label, measure(argv, repeat), yardstick))


def build_large(path: Path, lanes: int, global_bytes: int, faulting_warps: int = 1) -> Path:
    """A large.py dump; `faulting_warps` > 1: every lane of that many warps faults, from the
    middle warp on (a wrong base pointer in every thread)."""
    builder = ROOT / "fixtures" / "builder" / "large.py"
    subprocess.run(
        [sys.executable, str(builder), str(path), "--layout", "r400", "--lanes", str(lanes),
         "--global-bytes", str(global_bytes), "--faulting-warps", str(faulting_warps)],
        check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return path


def scan_corpus(target: Path, count: int, large: Path) -> list[Path]:
    """`count` distinct dumps: copies of the sources, each with its own trailing bytes."""
    sources = [ROOT / "fixtures" / "dumps" / f"{name}.nvcudmp" for name in SCAN_SOURCES]
    sources.append(large)
    paths = []
    for number in range(count):
        source = sources[number % len(sources)]
        path = target / f"host{number % 8}" / f"{source.stem}-{number:05d}.nvcudmp"
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, path)
        with path.open("ab") as file:
            file.write(number.to_bytes(4, "little"))
        paths.append(path)
    return paths


def scan(root: Path, paths: list[Path], repeat: int, jobs: int) -> None:
    size = sum(p.stat().st_size for p in paths)
    print(f"\nscan of {len(paths)} distinct dumps ({size / 2**20:.1f} MiB), -j {jobs}, --no-cache, "
          f"signatures only")  # fmt: skip
    cat = ["cat", *map(str, paths)]
    run(cat)  # into the page cache
    floor = measure(cat, repeat)
    index = root.parent / "index.json"
    argv = [*POSTMORTEM, "scan", str(root), "-j", str(jobs), "--no-cache", "-o", str(index),
            "--format", "json"]  # fmt: skip
    count = len(paths)
    print(f"  {'cat (page cache): the floor':34s} {floor.wall:7.3f} s wall {floor.cpu:7.3f} s CPU"
          f"   {count / floor.wall:8.0f} dumps/s")  # fmt: skip
    # With nvdisasm, each distinct faulting function costs one run (about half a second of
    # CPU whatever its size) for the instruction at the PC; the signature needs none.
    for label, extra in (("postmortem scan", []), ("postmortem scan --no-disasm", ["--no-disasm"])):
        # Exit status 0, or 4 when some dumps are error rows: both finished the scan.
        figures = [run([*argv, *extra]) for _ in range(repeat)]
        wall = statistics.median(f[0] for f in figures)
        cpu = statistics.median(f[1] for f in figures)
        print(f"  {label:34s} {wall:7.3f} s wall {cpu:7.3f} s CPU"
              f"   {count / wall:8.1f} dumps/s  {1000 * cpu / count:6.1f} ms CPU/dump"
              f"   {wall / floor.wall:5.1f}x the floor's time")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--count", type=int, default=280, help="dumps scanned")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--lanes", type=int, default=270_336)
    parser.add_argument("--scan-lanes", type=int, default=86_016, help="the scan's large dump")
    parser.add_argument(
        "--skip", choices=("small", "h100", "grid", "scan"), action="append", default=[]
    )
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "postmortem", quiet=1)
    print(f"{os.cpu_count()} CPUs; median of {args.repeat} runs each (H100: {slow(args)})")
    with tempfile.TemporaryDirectory(prefix="postmortem-yardsticks-") as scratch:
        work = Path(scratch)
        os.environ["XDG_CACHE_HOME"] = str(work / "cache")  # the user's cache left alone
        if "small" not in args.skip:
            commands("small dump", SMALL, args.repeat)
        if "h100" not in args.skip:
            h100 = build_large(work / "h100.nvcudmp", args.lanes, 4 << 30)
            commands(f"H100-shaped dump, {args.lanes:,} lanes", h100, slow(args))
            h100.unlink()
        if "grid" not in args.skip:
            warps = args.lanes // 32 // 2  # the middle warp to the last
            grid = build_large(work / "grid_wide.nvcudmp", args.lanes, 4 << 30, warps)
            title = f"H100-shaped dump, every lane of {warps:,} warps faulting"
            commands(title, grid, 1)
            grid.unlink()
        if "scan" not in args.skip:
            large = build_large(work / "many_warps.nvcudmp", args.scan_lanes, 0)
            paths = scan_corpus(work / "dumps", args.count, large)
            scan(work / "dumps", paths, args.repeat, args.jobs)


def slow(args: argparse.Namespace) -> int:
    return max(3, int(args.repeat) // 2)


if __name__ == "__main__":
    main()
