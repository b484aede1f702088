"""`postmortem extract`: the cubins of a dump written out, for those who continue by hand.

Each file is named so a person can tell them apart (device, context, module handle, first
kernel, relocated or not); `index.json` and `index.txt` say which kernels each holds and
which one faulted. Existing files are never overwritten unless asked.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from postmortem.codemap import CodeMap, find_faults
from postmortem.coredump import Coredump
from postmortem.cubin.inspect import CubinSummary, summarize_cubin
from postmortem.errors import OutputExists
from postmortem.model import Image, Module
from postmortem.report.render import render

_MAX_STEM = 48


@dataclass(frozen=True, slots=True)
class ExtractedKernel:
    """A function of an extracted cubin."""

    name: str
    demangled: str
    symbol_index: int
    address: int
    size_bytes: int
    is_kernel: bool
    faulted: bool
    """True when a fault in the dump lies inside this function."""


@dataclass(frozen=True, slots=True)
class ExtractedCubin:
    """One file written by `extract`."""

    file: str
    device_index: int | None
    """None (with the context and handle) for a root-level image, which no module row names."""
    context_id: int | None
    module_handle: int | None
    relocated: bool
    size_bytes: int
    abi_version: int | None
    sm_arch: int | None
    functions: tuple[ExtractedKernel, ...]


def extract_cubins(
    core: Coredump, out_dir: Path, *, force: bool = False
) -> tuple[ExtractedCubin, ...]:
    """Write every cubin of `core` (relocated and non-relocated) and an index into `out_dir`.

    Raises:
        OutputExists: a file to be written exists already and `force` is False.
    """
    code_map = CodeMap(core)
    faulted = _faulted_ranges(core, code_map)
    plan = []
    for module in core.all_modules():
        for image in (module.relocated_image, module.unrelocated_image):
            if image is not None:
                data = core.image_bytes(image)
                # Locating the faults has read the relocated images already.
                known = code_map.summary(module) if image.relocated else None
                plan.append((module, image, data, known or _summary(data)))
    written = tuple(_describe(m, i, d, s, faulted) for m, i, d, s in plan)
    targets = [out_dir / e.file for e in written] + [out_dir / "index.json", out_dir / "index.txt"]
    existing = [p for p in targets if p.exists()]
    if existing and not force:
        raise OutputExists(existing[0], len(existing))
    out_dir.mkdir(parents=True, exist_ok=True)
    for entry, (_, _, data, _) in zip(written, plan, strict=True):
        (out_dir / entry.file).write_bytes(data)
    entries = index_entries(written)
    (out_dir / "index.json").write_text(render("extract", entries, "json"))
    (out_dir / "index.txt").write_text(render("extract", entries, "text"))
    return written


def index_entries(written: tuple[ExtractedCubin, ...]) -> list[dict[str, Any]]:
    """The extract index's view model (index.json is exactly this)."""
    return [asdict(e) for e in written]


def _summary(data: bytes) -> CubinSummary | None:
    try:
        return summarize_cubin(data)
    except Exception:  # a corrupt image is still written out; its index entry says unknown
        return None


def _faulted_ranges(core: Coredump, code_map: CodeMap) -> set[tuple[int | None, int]]:
    """(module handle, section address) of every code section holding a fault PC."""
    found = set()
    for fault in find_faults(core, code_map):
        if fault.location is not None:
            found.add((fault.location.module_handle, fault.location.section_address))
    return found


def _part(prefix: str, value: int | None, spec: str) -> str:
    # A root-level image has no module row: its device, context and handle are unknown.
    return f"{prefix}{format(value, spec)}" if value is not None else f"{prefix}-unknown"


def _describe(
    module: Module,
    image: Image,
    data: bytes,
    summary: CubinSummary | None,
    faulted: set[tuple[int | None, int]],
) -> ExtractedCubin:
    functions = () if summary is None else tuple(
        ExtractedKernel(
            f.name, f.demangled, f.symbol_index, f.address, f.size_bytes, f.is_kernel,
            image.relocated and (module.module_handle, f.address) in faulted,
        )
        for f in summary.functions
    )  # fmt: skip
    first = next((f.demangled for f in functions if f.is_kernel), None) or "no-kernels"
    kind = "relocated" if image.relocated else "unrelocated"
    name = (
        f"{_part('dev', module.device_index, 'd')}.{_part('ctx', module.context_id, 'x')}."
        f"{_part('mod', module.module_handle, 'x')}.{_file_stem(first)}.{kind}.cubin"
    )
    return ExtractedCubin(
        name, module.device_index, module.context_id, module.module_handle, image.relocated,
        len(data), summary.abi_version if summary else None, summary.sm_arch if summary else None,
        functions,
    )  # fmt: skip


def _file_stem(demangled: str) -> str:
    """`void ns::gemm<float, 4>(Params)` → `gemm`: short, and safe in a file name."""
    base = demangled.split("(", 1)[0].split("<", 1)[0].split("::")[-1].split(" ")[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base)[:_MAX_STEM] or "kernel"
