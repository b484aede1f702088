"""Benchmark: open and summarize a huge dump against a small one.

Builds (once, in bench/out/) a dump with >= 100,000 lanes and 4 GiB of sparse global
memory, and a 1 MiB one, then opens and summarizes each in a fresh process, several
times, and prints wall time, peak RSS and the ratios. The target (design.md): the large
dump within 2x of the small one and under 200 MB RSS.

    python bench/bench_open.py [--lanes N] [--global-gib G] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
BUILDER = ROOT / "fixtures" / "builder"

# Run in a child so that peak RSS is the reader's alone, not this script's.
_CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from postmortem import open_coredump
from postmortem.summary import summarize
with open_coredump(sys.argv[1]) as core:
    s = summarize(core)
elapsed = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": elapsed, "rss": rss, "lanes": s.census.lanes,
                  "faults": len(s.faults), "sections": s.section_count}))
"""


def build(path: Path, lanes: int, global_bytes: int) -> None:
    """Write the dump in a child: Linux keeps a parent's peak RSS in its children's
    ru_maxrss, so building here would inflate every measurement that follows."""
    code = (
        f"import sys; sys.path.insert(0, {str(BUILDER)!r}); from large import write_large_dump; "
        f"write_large_dump({str(path)!r}, lanes={lanes}, global_bytes={global_bytes})"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def measure(path: Path, repeat: int) -> dict[str, float]:
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout))
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "rss": max(r["rss"] for r in runs),
        "lanes": runs[0]["lanes"],
        "faults": runs[0]["faults"],
        "sections": runs[0]["sections"],
    }


def baseline_rss() -> int:
    code = (
        "import resource, postmortem.summary; "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"
    )
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True).stdout)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=100_000)
    parser.add_argument("--global-gib", type=float, default=4.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    large = OUT / f"large_{args.lanes}_{args.global_gib:g}g.nvcudmp"
    small = OUT / "small_1m.nvcudmp"
    for path, lanes, global_bytes in (
        (large, args.lanes, int(args.global_gib * (1 << 30))),
        (small, 256, 1 << 20),
    ):
        if not path.exists():
            start = time.perf_counter()
            build(path, lanes, global_bytes)
            print(f"built {path.name} in {time.perf_counter() - start:.1f} s")
    big, little = measure(large, args.repeat), measure(small, args.repeat)
    base = baseline_rss()
    for name, path, m in (("large", large, big), ("small", small, little)):
        size = path.stat().st_size
        print(
            f"{name}: {size / (1 << 30):.2f} GiB apparent, {m['sections']} sections, "
            f"{m['lanes']} lanes, {m['faults']} faults: "
            f"open+summarize {m['seconds'] * 1000:.0f} ms, "
            f"peak RSS {m['rss'] / (1 << 20):.0f} MiB"
        )
    print(f"interpreter + imports alone: peak RSS {base / (1 << 20):.0f} MiB")
    print(f"ratio large/small: time {big['seconds'] / little['seconds']:.2f}x, "
          f"RSS {big['rss'] / little['rss']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
