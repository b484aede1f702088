"""Benchmark: the hang analysis of a whole H100 of stuck warps.

Builds (once, in bench/out/) two hang dumps of 132 blocks x 32 warps x 32 lanes (135,168
lanes, one block per SM) with the test suite's tiny-dump writer: every lane spinning on a
flag in `divergent_barrier_kernel`, and every lane polling its peer's flag in the all-reduce
kernel (`cross_device_reduce_1stage`, a collective: each polling lane's address is computed
from its registers). Each is analyzed (nvdisasm, no cuda-gdb) in a fresh process; the
script prints wall time, peak RSS and the finding, and the collective's cost over the spin's.

    python bench/bench_hang.py [--repeat R]
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

_CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
analysis = analyze_dump(sys.argv[1], AnalyzeOptions(cuda_gdb=False))
elapsed = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": elapsed, "rss": rss,
                  "findings": [f.code.value for f in analysis.hang.findings]}))
"""


def build(path: Path, kernel: str) -> None:
    if path.exists():
        return
    sys.path.insert(0, str(ROOT))
    from tests.tinydump import (
        BlockSpec,
        DeviceSpec,
        DumpSpec,
        GridSpec,
        LaneSpec,
        ModuleSpec,
        WarpSpec,
        cubin,
        write_tiny_dump,
    )  # fmt: skip

    spin = cubin(kernel).stalls["spin"]["offset"]
    module = ModuleSpec(kernel)
    blocks = [
        BlockSpec(9, [WarpSpec([LaneSpec(spin, lane=n) for n in range(32)], warp_id=w)
                      for w in range(32)], block_idx=(sm, 0, 0), sm=sm)
        for sm in range(132)
    ]  # fmt: skip
    grid = GridSpec(9, module, grid_dim=(132, 1, 1), block_dim=(1024, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_tiny_dump(path, DumpSpec([DeviceSpec([module], [grid], blocks)], layout="r580"))


def measure(path: Path, repeat: int) -> dict[str, object]:
    runs = []
    for _ in range(repeat):
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True,
            check=True, cwd=ROOT,
        )  # fmt: skip
        runs.append(json.loads(done.stdout))
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "rss": max(r["rss"] for r in runs),
        "findings": runs[0]["findings"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results = {}
    for name, kernel in (("spin", "divergent_barrier"), ("collective", "all_reduce")):
        path = OUT / f"hang_{name}_h100.nvcudmp"
        build(path, kernel)
        results[name] = measure(path, args.repeat)
        r = results[name]
        print(f"{name:10} {r['seconds']:6.2f} s  {r['rss'] / 2**20:6.0f} MiB  {r['findings']}")
    ratio = results["collective"]["seconds"] / results["spin"]["seconds"]  # type: ignore[operator]
    print(f"collective / spin: {ratio:.1f}x (the per-lane address reads of the polling lanes)")


if __name__ == "__main__":
    main()
