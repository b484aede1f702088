"""Benchmark: analyze (with forensics) a fault of one lane against a grid-wide fault.

Builds (once, in bench/out/) two dumps of 100,000 lanes: one where lane 0 of one warp
faults, one where every lane of 1,000 warps (32,000 lanes) faults at the same STG, and
runs `analyze` (nvdisasm, no cuda-gdb) on each in a fresh process, printing wall time,
peak RSS, the lanes whose address was computed, and the ratios. What grows with the
faulting lanes is the per-lane register reads; the rest is the same work.

    python bench/bench_forensics.py [--lanes N] [--faulting-warps W] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
BUILDER = ROOT / "fixtures" / "builder"

_CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
analysis = analyze_dump(sys.argv[1], AnalyzeOptions(cuda_gdb=False))
elapsed = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
lanes = sum(len(s.forensics.lanes) for s in analysis.sites if s.forensics)
print(json.dumps({"seconds": elapsed, "rss": rss, "addressed": lanes,
                  "faults": sum(len(s.faults) for s in analysis.sites)}))
"""


def build(path: Path, lanes: int, faulting_warps: int) -> None:
    if path.exists():
        return
    OUT.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(BUILDER))
    from large import write_large_dump

    write_large_dump(path, lanes=lanes, global_bytes=1 << 20, faulting_warps=faulting_warps)


def measure(path: Path, repeat: int) -> dict[str, float]:
    runs = []
    for _ in range(repeat):
        result = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)],
            check=True, capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        runs.append(json.loads(result.stdout))
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "rss": max(r["rss"] for r in runs),
        "addressed": runs[0]["addressed"],
        "faults": runs[0]["faults"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=100_000)
    parser.add_argument("--faulting-warps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    one = OUT / f"forensics_{args.lanes}_1.nvcudmp"
    many = OUT / f"forensics_{args.lanes}_{args.faulting_warps}.nvcudmp"
    build(one, args.lanes, 1)
    build(many, args.lanes, args.faulting_warps)
    small, large = measure(one, args.repeat), measure(many, args.repeat)
    for name, m in (("one faulting lane", small), ("grid-wide fault", large)):
        print(
            f"{name:>18}: {m['faults']:>6} fault records, {m['addressed']:>6} lane addresses, "
            f"{m['seconds'] * 1000:8.0f} ms, {m['rss'] / 2**20:6.0f} MiB peak RSS"
        )
    extra = large["seconds"] - small["seconds"]
    per_lane = extra / max(1, large["addressed"] - small["addressed"]) * 1e6
    print(
        f"ratio: {large['seconds'] / small['seconds']:.2f}x time, "
        f"{large['rss'] / small['rss']:.2f}x RSS; {per_lane:.1f} us per extra faulting lane"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
