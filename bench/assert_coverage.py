"""Coverage: how many of a cubin's `__assertfail` calls the code alone names in full.

For every call of every function of each cubin given (nvdisasm's listing), the callee is read
from the code (`find_callee`); for each call of `__assertfail`, the message, file, line and
function are read as a dump's assert is (`CallReader.from_code`), and each part is counted as
read or not, with the first reasons a part was not. Production cubins come from
`make corpus` (torch's libtorch_cuda.so holds hundreds of asserting ones) or from
`cuobjdump -xelf all` of any wheel.

    python bench/assert_coverage.py CUBIN... [--reasons N]
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from postmortem.analysis.fault.assertion import ASSERTFAIL, ASSERTFAIL_PARAMETERS  # noqa: E402
from postmortem.analysis.fault.callargs import CallReader, find_callee  # noqa: E402
from postmortem.cubin.cfg import ControlFlowGraph  # noqa: E402
from postmortem.cubin.elfimage import ElfImage  # noqa: E402
from postmortem.cubin.globaldata import ModuleData  # noqa: E402
from postmortem.cubin.sass import parse_sass  # noqa: E402
from postmortem.tools import find_tool  # noqa: E402

_HEADER = "//--------------------- .text."


class _NoMemory:
    """A cubin from a wheel has no dump: there is no global memory to read."""

    def read_memory(self, address: int, size: int) -> None:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cubins", nargs="+", type=Path)
    parser.add_argument("--reasons", type=int, default=5, help="reasons to print per part")
    args = parser.parse_args()
    nvdisasm = str(find_tool("nvdisasm"))
    counts: collections.Counter[str] = collections.Counter()
    reasons: dict[str, list[str]] = collections.defaultdict(list)
    start = time.perf_counter()
    for path in args.cubins:
        data = ModuleData(ElfImage(path.read_bytes()))
        text = subprocess.run(
            [nvdisasm, "-c", "-ndf", str(path)], capture_output=True, text=True, check=True
        ).stdout
        for part in text.split(_HEADER)[1:]:
            listing = parse_sass(_HEADER + part)
            graph = ControlFlowGraph(listing)
            for call in (i for i in listing.instructions if i.base_opcode == "CALL"):
                counts["calls"] += 1
                if find_callee(graph, call, data) != ASSERTFAIL:
                    continue
                counts["assert calls"] += 1
                reader = CallReader(_NoMemory(), data, graph, call)  # type: ignore[arg-type]
                for parameter in ASSERTFAIL_PARAMETERS:
                    found = reader.from_code(parameter)
                    counts[f"{parameter.name} {'read' if found.known else 'unknown'}"] += 1
                    if not found.known and len(reasons[parameter.name]) < args.reasons:
                        reasons[parameter.name].append(
                            f"{path.name} /*{call.offset:04x}*/: {found.source}"
                        )
    seconds = time.perf_counter() - start
    print(f"{len(args.cubins)} cubins, {counts['calls']:,} calls, {counts['assert calls']:,} of "
          f"them {ASSERTFAIL}, {seconds:.1f} s")  # fmt: skip
    for parameter in ASSERTFAIL_PARAMETERS:
        read, unknown = counts[f"{parameter.name} read"], counts[f"{parameter.name} unknown"]
        share = read / (read + unknown) if read + unknown else 0.0
        print(f"  {parameter.name:9} read {read:,}, unknown {unknown:,} ({share:.1%} read)")
        for reason in reasons[parameter.name]:
            print(f"    {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
