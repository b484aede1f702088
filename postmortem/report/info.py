"""Render a `DumpSummary` for `postmortem info`: plain text, or JSON for scripts."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from enum import Enum
from typing import Any

from postmortem.analysis.counts import count_faults
from postmortem.model import Fault, describe_exception
from postmortem.report.textsafe import escape_controls
from postmortem.report.values import dim3_text, version_or_none
from postmortem.summary import DumpSummary, kernel_label

_MAX_FAULT_GROUPS = 20


def render_info_text(summary: DumpSummary) -> str:
    """The summary as plain text, verdict (faults) first.

    Each line is built whole and then has its control characters escaped, so a name from
    the dump (kernel, device, driver message, path) stays inside its line, visible.
    """
    lines = [f"{summary.path}: CUDA coredump, {_size(summary.file_size)}" + (
        f" ({summary.codec}-compressed)" if summary.codec else ""
    )]  # fmt: skip
    lines += _fault_lines(summary)
    lines += [f"{note.severity.value}: {note.message}" for note in summary.findings]
    lines.append("")
    lines += _device_lines(summary)
    lines += _launch_lines(summary)
    lines += _module_lines(summary)
    lines += _format_lines(summary)
    return "\n".join(escape_controls(line) for line in lines) + "\n"


def _size(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return str(size)


def _fault_lines(summary: DumpSummary) -> list[str]:
    if not summary.faults:
        return ["no exception recorded: every warp was live (a hang or a user-triggered dump)"]
    groups: dict[tuple[int | None, int | None], list[Fault]] = defaultdict(list)
    for fault in summary.faults:
        groups[(fault.exception, fault.error_pc)].append(fault)
    counts = count_faults(summary.faults)
    lanes, warps = counts.lanes, counts.warps
    others = counts.records - lanes
    parts = [f"{_count(lanes, 'lane')} in {_count(warps, 'warp')}"] if lanes else []
    if others:
        parts.append(f"{_count(others, 'warp or SM record')} with no faulting lane")
    pcs = len({(f.device_index, f.error_pc) for f in summary.faults})
    codes = len({f.exception for f in summary.faults})
    kinds = f", {_count(codes, 'exception code')}" if codes > 1 else ""
    lines = [f"faults at {_count(pcs, 'PC')}{kinds}: " + "; ".join(parts)]
    for (code, pc), faults in list(groups.items())[:_MAX_FAULT_GROUPS]:
        first = faults[0]
        name = first.exception_name
        number = "" if code is None else f" ({code})"
        where = "pc unknown" if pc is None else f"pc 0x{pc:x}"
        location = first.location
        if location is not None:
            where += f" = {kernel_label(location.function)}+0x{location.offset:x}"
        elif pc is not None:
            where += " (outside every module in the dump)"
        lines.append(f"  {name}{number} at {where}")
        lines.append(f"    {_count(len(faults), first.source.value)}; first: {_coords(first)}")
        if first.detail:
            lines.append(f"    driver says: {first.detail}")
    if len(groups) > _MAX_FAULT_GROUPS:
        lines.append(f"  ... and {len(groups) - _MAX_FAULT_GROUPS} more sites")
    return lines


def _hex(value: int | None, spec: str = "x", prefix: str = "0x") -> str:
    return "?" if value is None else f"{prefix}{value:{spec}}"


def _known(value: object) -> str:
    # A fact past the end of a short row is unknown, never "None".
    return "?" if value is None else str(value)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _coords(fault: Fault) -> str:
    parts = [f"device {fault.device_index}", f"sm {_known(fault.sm_id)}"]
    if fault.block_idx is not None:
        parts.insert(0, "block ({},{},{})".format(*fault.block_idx))
    if fault.thread_idx is not None:
        parts.insert(1, "thread ({},{},{})".format(*fault.thread_idx))
    if fault.warp_id is not None:
        parts.append(f"warp {fault.warp_id}")
    if fault.lane is not None:
        parts.append(f"lane {fault.lane}")
    if fault.grid_id is not None:
        parts.append(f"grid {fault.grid_id}")
    return ", ".join(parts)


def _device_lines(summary: DumpSummary) -> list[str]:
    lines = [f"devices: {len(summary.devices)}"]
    lines += [
        f"  {d.index}: {_known(d.name)} ({_known(d.type)}, {_known(d.sm_type)}), "
        f"{_known(d.num_sms)} SMs x {_known(d.num_warps_per_sm)} warps x "
        f"{_known(d.num_lanes_per_warp)} lanes, "
        f"pci {_hex(d.pci_bus_id, '02x', '')}:{_hex(d.pci_dev_id, '02x', '')}"
        for d in summary.devices
    ]
    c = summary.census
    lines.append(f"  captured: {c.sms} SMs, {c.ctas} CTAs, {c.warps} warps, {c.lanes} lanes")
    return lines


def _launch_lines(summary: DumpSummary) -> list[str]:
    lines = [f"grids: {len(summary.launches)}"]
    for launch in summary.launches:
        g = launch.grid
        dims = f"<<<{dim3_text(g.grid_dim)},{dim3_text(g.block_dim)}>>>"
        cluster = "" if not g.cluster_dim or g.cluster_dim == (0, 0, 0) else (
            " cluster ({},{},{})".format(*g.cluster_dim)
        )  # fmt: skip
        lines.append(
            f"  grid {_known(g.grid_id)} on device {g.device_index}: "
            f"{kernel_label(launch.kernel)}{dims}{cluster}, {_known(g.num_regs)} registers"
        )
    return lines


def _module_lines(summary: DumpSummary) -> list[str]:
    lines = [f"modules: {len(summary.modules)}"]
    for m in summary.modules:
        image = m.module.relocated_image
        size = _size(image.size_bytes) if image else "no image"
        names = ", ".join(kernel_label(f) for f in m.functions) or "no functions"
        module = m.module
        where = (
            "root-level image (no module row, so device, context and handle unknown; "
            if module.module_handle is None
            else f"0x{module.module_handle:x} (context {_hex(module.context_id)}, "
        )
        lines.append(f"  {where}ELF ABI v{m.abi_version}, {size}): {names}")
    return lines


def _format_lines(summary: DumpSummary) -> list[str]:
    lines = [
        f"format: ELF ABI v{summary.abi_version}, {summary.section_count} sections"
        + (" (extended numbering)" if summary.extended_numbering else "")
        + f", rows in the {summary.layout_generation} layout"
    ]
    meta = summary.metadata
    if meta is not None:
        flags = ", ".join(meta.flag_names) or "none"
        driver = version_or_none(meta.driver_version) or "?"
        cuda = version_or_none(meta.cuda_driver_version) or "?"
        flags = "?" if meta.flags is None else flags
        lines.append(
            f"  written by {_known(meta.generator_name)}, driver {driver}"
            f" (CUDA {cuda}), "
            f"flags: {flags}, at {_known(meta.timestamp)} (Unix time)"
        )
    present = [f"{name} {n}" for name, n in summary.optional_sections.items() if n]
    absent = [name for name, n in summary.optional_sections.items() if not n]
    lines.append("  optional sections present: " + (", ".join(present) or "none"))
    lines.append("  absent: " + (", ".join(absent) or "none"))
    return lines


def render_info_json(summary: DumpSummary) -> str:
    """The summary as JSON (stable key order; addresses as integers)."""
    return json.dumps(_plain(summary), indent=2, sort_keys=True) + "\n"


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name != "ref"
        } | _extra(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _extra(value: Any) -> dict[str, Any]:
    if isinstance(value, Fault):
        return {"exception_name": value.exception_name}
    if isinstance(getattr(value, "exception", None), int):  # noqa: B009
        return {"exception_name": describe_exception(value.exception)}
    return {}
