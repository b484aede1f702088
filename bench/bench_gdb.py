"""Benchmark: cuda-gdb answering the command set vs the native reader, on each fixture dump.

For every dump cuda-gdb 11.8 can read, prints the median time for cuda-gdb to open it
and answer postmortem's default commands (its retry with an empty data directory
included, as the product runs it), the median time for the native reader to open the
same dump, find the faults and locate them in their kernels, and the ratio.

    python bench/bench_gdb.py [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from postmortem import open_coredump  # noqa: E402
from postmortem.analysis.fault.fault import LocalizeOptions, localize  # noqa: E402
from postmortem.gdb import run_cuda_gdb  # noqa: E402
from postmortem.summary import summarize  # noqa: E402

DUMPS = ROOT / "fixtures" / "dumps"


def native(path: Path) -> None:
    with open_coredump(path) as core:
        summarize(core)
        localize(core, LocalizeOptions(nvdisasm=False))


def timed(action, repeat: int) -> float:  # type: ignore[no-untyped-def]
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    totals = [0.0, 0.0]
    for truth_file in sorted(DUMPS.glob("*.truth.json")):
        truth = json.loads(truth_file.read_text())
        if not truth["cuda_gdb_checkable"]["value"]:
            continue
        path = DUMPS / truth["file"]
        gdb = timed(lambda: run_cuda_gdb(path, timeout=120), args.repeat)  # noqa: B023
        ours = timed(lambda: native(path), args.repeat * 2)  # noqa: B023
        totals[0] += gdb
        totals[1] += ours
        print(f"{path.name:40s} cuda-gdb {gdb * 1000:7.0f} ms   native {ours * 1000:6.1f} ms"
              f"   ratio {gdb / ours:6.1f}x")  # fmt: skip
    print(f"{'all':40s} cuda-gdb {totals[0] * 1000:7.0f} ms   native {totals[1] * 1000:6.1f} ms"
          f"   ratio {totals[0] / totals[1]:6.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
