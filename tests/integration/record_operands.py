"""Record nvdisasm's listing of fixtures/cu/forensics/operands.cu for sm_80, sm_90 and sm_100.

Usage: ``python tests/integration/record_operands.py [sm_80 ...]``

Each architecture is compiled with ``nvcc -cubin -arch=<arch> -O3`` (the nvidia-cuda-nvcc 13.x
wheel of the running interpreter, or ``$PM_NVCC``) into a temporary folder, disassembled with
``nvdisasm -ndf -c`` (all kernels, no line info), and written to
``fixtures/transcripts/nvdisasm/<version>/forensics/operands.<arch>.txt`` with the ``# source:``/
``# tool-version:``/``# note:`` header that tests/unit/test_operands.py reads. nvcc runs in the
source's folder on a relative name, so no path of this machine lands in the file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "fixtures" / "builder"))

import sites  # noqa: E402

from postmortem.toolrun import run_tool  # noqa: E402
from postmortem.tools import find_tool, tool_version  # noqa: E402

SOURCE = REPO / "fixtures" / "cu" / "forensics" / "operands.cu"
OUT = REPO / "fixtures" / "transcripts" / "nvdisasm"
ARCHES = ("sm_80", "sm_90", "sm_100")


def compile_cubin(nvcc: Path, arch: str, folder: Path) -> Path:
    """Compiles the source for one architecture; returns the cubin."""
    cubin = folder / f"operands.{arch}.cubin"
    argv = [str(nvcc), "-cubin", f"-arch={arch}", "-O3", "-o", str(cubin), SOURCE.name]
    run = run_tool(argv, timeout=300.0, cwd=SOURCE.parent)
    if run.returncode != 0:
        raise SystemExit(f"{arch}: nvcc exited with {run.returncode}: {run.stderr.strip()}")
    return cubin


def record(arch: str, nvcc: Path, nvdisasm: Path, version: str, folder: Path) -> Path:
    """Compiles, disassembles and writes one architecture's transcript."""
    cubin = compile_cubin(nvcc, arch, folder)
    run = run_tool([str(nvdisasm), "-ndf", "-c", str(cubin)], timeout=120.0, cwd=folder)
    if run.returncode != 0:
        raise SystemExit(f"{arch}: nvdisasm exited with {run.returncode}: {run.stderr.strip()}")
    banner = run_tool([str(nvcc), "--version"], timeout=60.0).stdout.splitlines()
    nvcc_version = next((line for line in banner if "release" in line), "unknown").strip()
    stderr = " ".join(run.stderr.split()) or "(empty)"
    header = [
        f"# source: nvcc -cubin -arch={arch} -O3 fixtures/cu/forensics/operands.cu; "
        f"nvdisasm -ndf -c operands.{arch}.cubin "
        "(recorded by tests/integration/record_operands.py)",
        f"# tool-version: nvdisasm {version}; nvcc {nvcc_version}",
        f"# note: all kernels of the cubin; stdout only; stderr was: {stderr}",
    ]
    text = run.stdout.replace(str(folder), ".").replace(str(REPO), ".")
    # A subfolder: tests/unit/test_sass_parse.py takes every <version>/*.txt for a transcript
    # of a fixture cubin listed in fixtures/cubins/index.json.
    target = OUT / ".".join(version.split(".")[:2]) / "forensics" / f"operands.{arch}.txt"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(header) + "\n" + text, encoding="utf-8")
    return target


def main() -> None:
    """Records the architectures named on the command line, or all three."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arches", nargs="*", help="sm_80, sm_90 or sm_100 (default: all)")
    args = parser.parse_args()
    unknown = sorted(set(args.arches) - set(ARCHES))
    if unknown:
        parser.error(f"unknown architecture(s): {', '.join(unknown)}")
    nvcc = sites.find_wheel_tool("nvcc", "cu13", "PM_NVCC")
    nvdisasm = find_tool("nvdisasm")
    version = tool_version(nvdisasm) or "unknown"
    with tempfile.TemporaryDirectory(prefix="pm-operands-") as temporary:
        for arch in args.arches or ARCHES:
            print(record(arch, nvcc, nvdisasm, version, Path(temporary)).relative_to(REPO))


if __name__ == "__main__":
    main()
