"""Record what the installed nvdisasm prints for the fixture cubins, as transcripts.

Usage: ``python tests/integration/record_nvdisasm.py [NAME ...]``

For every cubin of fixtures/cubins/index.json (or the NAMEs given, e.g. ``oob_store.sm_90.v8``)
it disassembles the kernel that matters (the faulting one, else the stalled one, else the first)
with the adapter's own argv (``-ndf -c -gi -fun <symbol index>``) and writes
``fixtures/transcripts/nvdisasm/<version>/<name>.txt`` with the ``# source:``/
``# tool-version:``/``# note:`` header. The cubin is named by its path relative to the
repository, so no path of this machine lands in the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from postmortem.cubin.nvdisasm import build_nvdisasm_argv  # noqa: E402
from postmortem.toolrun import run_tool  # noqa: E402
from postmortem.tools import find_tool, tool_version  # noqa: E402

INDEX = REPO / "fixtures" / "cubins" / "index.json"
OUT = REPO / "fixtures" / "transcripts" / "nvdisasm"


def kernel_of(entry: dict[str, Any]) -> tuple[str, int]:
    """Returns the kernel worth recording in a cubin entry, and its symbol index."""
    if entry.get("fault"):
        name = entry["fault"]["kernel"]
    elif entry.get("stalls"):
        name = next(iter(entry["stalls"].values()))["kernel"]
    else:
        name = entry["kernels"][0]["name"]
    index = next(k["symbol_index"] for k in entry["kernels"] if k["name"] == name)
    return name, int(index)


def record(name: str, entry: dict[str, Any], nvdisasm: Path, full: str) -> Path:
    """Runs nvdisasm on one fixture cubin and writes its transcript."""
    kernel, index = kernel_of(entry)
    cubin = Path("fixtures") / entry["path"]
    argv = build_nvdisasm_argv(Path("nvdisasm"), cubin, index)
    run = run_tool([str(nvdisasm), *argv[1:]], timeout=120.0, cwd=REPO)
    if run.returncode != 0:
        raise SystemExit(f"{name}: nvdisasm exited with {run.returncode}: {run.stderr.strip()}")
    stderr = " ".join(run.stderr.split()) or "(empty)"
    header = [
        f"# source: {' '.join(argv)} (recorded by tests/integration/record_nvdisasm.py)",
        f"# tool-version: {full}",
        f"# note: kernel {kernel} (symbol {index}); stdout only; stderr was: {stderr}",
    ]
    text = run.stdout.replace(str(REPO), ".")
    version = ".".join(full.split(".")[:2])
    target = OUT / version / f"{name}.txt"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(header) + "\n" + text, encoding="utf-8")
    return target


def main() -> None:
    """Records the transcripts named on the command line, or all of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="cubin names from index.json")
    args = parser.parse_args()
    cubins = json.loads(INDEX.read_text(encoding="utf-8"))["cubins"]
    nvdisasm = find_tool("nvdisasm")
    full = tool_version(nvdisasm) or "unknown"
    for name in args.names or sorted(cubins):
        print(record(name, cubins[name], nvdisasm, full).relative_to(REPO))


if __name__ == "__main__":
    main()
