"""Benchmark: the hang analysis of a whole H100 of stuck warps.

Builds (once, in bench/out/) three hang dumps of 132 blocks x 32 warps x 32 lanes (135,168
lanes, one block per SM) with the test suite's tiny-dump writer: every lane spinning on a
flag in `divergent_barrier_kernel`, every lane polling its peer's flag in the all-reduce
kernel (`cross_device_reduce_1stage`, a collective: each polling lane's address is computed
from its registers), and every block of the split-K lock kernel (`lock_spin.cu`) waiting in
the wait model's several ways (lane 0 of warp 0 polling the lock, its other lanes at the
convergence point, 31 warps at `__syncthreads()`). Each is analyzed (nvdisasm, no cuda-gdb)
in a fresh process; the script prints wall time, peak RSS and the findings, and each case's
cost over the spin's (the wait model's bar: the mixed waits within 2x of one PC).

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
    if kernel == "lock_spin":
        blocks = [BlockSpec(9, _lock_block(kernel), block_idx=(0, sm, 0), sm=sm)
                  for sm in range(132)]  # fmt: skip
    else:
        blocks = [
            BlockSpec(9, [WarpSpec([LaneSpec(spin, lane=n) for n in range(32)], warp_id=w)
                          for w in range(32)], block_idx=(sm, 0, 0), sm=sm)
            for sm in range(132)
        ]  # fmt: skip
    dims = (1, 132, 1) if kernel == "lock_spin" else (132, 1, 1)
    grid = GridSpec(9, module, grid_dim=dims, block_dim=(1024, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_tiny_dump(path, DumpSpec([DeviceSpec([module], [grid], blocks)], layout="r580"))


def _lock_block(kernel: str) -> list:  # type: ignore[type-arg]
    """Warp 0: lane 0 in the lock's poll loop, lanes 1-31 at the convergence point after it;
    warps 1-31 held at __syncthreads()."""
    from postmortem.analysis.hang.waits import WaitKind, kernel_code_of
    from postmortem.cubin.sass import parse_sass
    from postmortem.tools import find_tool
    from tests.tinydump import LaneSpec, WarpSpec, cubin

    fixture = cubin(kernel)
    path = OUT / f"{kernel}.cubin"
    path.write_bytes(fixture.data)
    text = subprocess.run([str(find_tool("nvdisasm")), "-c", "-ndf", str(path)],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    code = kernel_code_of(parse_sass(text))
    offsets = [i.offset for i in code.listing.instructions]
    poll = next(o for o in offsets if code.wait_at(o).kind is WaitKind.POLL)
    rest = next(o for o in offsets
                if o > poll and code.wait_at(o).kind is WaitKind.CONVERGENCE)  # fmt: skip
    barrier = fixture.stalls["barrier"]
    # A warp that issued a deferred-blocking barrier is held at the next instruction.
    held = barrier["offset"] + (16 if "DEFER_BLOCKING" in barrier["sass"] else 0)
    first = WarpSpec([LaneSpec(poll, lane=0)] + [LaneSpec(rest, lane=n) for n in range(1, 32)])
    return [first] + [
        WarpSpec([LaneSpec(held, lane=n) for n in range(32)], warp_id=w) for w in range(1, 32)
    ]


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
    cases = (("spin", "divergent_barrier"), ("collective", "all_reduce"), ("waits", "lock_spin"))
    for name, kernel in cases:
        path = OUT / f"hang_{name}_h100.nvcudmp"
        build(path, kernel)
        results[name] = measure(path, args.repeat)
        r = results[name]
        print(f"{name:10} {r['seconds']:6.2f} s  {r['rss'] / 2**20:6.0f} MiB  {r['findings']}")
    spin = results["spin"]["seconds"]
    ratio = results["collective"]["seconds"] / spin  # type: ignore[operator]
    print(f"collective / spin: {ratio:.1f}x (the per-lane address reads of the polling lanes)")
    ratio = results["waits"]["seconds"] / spin  # type: ignore[operator]
    print(f"waits / spin: {ratio:.1f}x (every block waiting in several ways, against one PC)")


if __name__ == "__main__":
    main()
