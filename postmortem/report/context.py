"""The report's data: an `Analysis` turned into plain values every format renders from.

Text, Markdown and HTML templates and the JSON output all read this one structure, so
they cannot disagree. It holds only JSON types; addresses are kept both as integers and
as the hex strings people read. Nothing that varies between runs (durations, the clock,
temporary paths) goes in, so reports of the same dump are identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from postmortem import __version__
from postmortem.analysis.analyze import Analysis
from postmortem.analysis.crosscheck import CrossCheck
from postmortem.analysis.fault import FaultSite
from postmortem.analysis.hang import HangAnalysis
from postmortem.analysis.state import KernelState
from postmortem.cubin.nvdisasm import Disassembly
from postmortem.demangle import demangle, without_parameters
from postmortem.findings import Finding, FindingCode
from postmortem.model import Fault, FaultSource
from postmortem.report.forensics import builds_json, census_json, forensics_json
from postmortem.report.values import (
    Json,
    dim_or_none,
    exception_json,
    hex_or_none,
    kernel_json,
    version_or_none,
)
from postmortem.summary import DumpSummary

SCHEMA = "postmortem.report/1"


def build_report(analysis: Analysis) -> Json:
    """The report of one analysis as plain data (the JSON output is exactly this)."""
    summary = analysis.summary
    sites = [_site(site) for site in analysis.sites]
    _name_innermost_frame(sites, analysis.crosscheck)
    return {
        "schema": SCHEMA,
        "tool": {"name": "postmortem", "version": __version__},
        "dump": _dump(analysis.path, summary),
        "verdict": _verdict(analysis, sites),
        "sites": sites,
        "launches": [_launch(x, analysis.sites) for x in summary.launches],
        "devices": [_device(d) for d in summary.devices],
        "state": [_state(k) for k in analysis.state],
        "modules": [_module(m) for m in summary.modules],
        "metadata": _metadata(summary),
        "hang": _hang(analysis.hang),
        "census": census_json(analysis.census),
        "builds": builds_json(analysis.builds),
        "crosscheck": _crosscheck(analysis.crosscheck, analysis.gdb_note),
        "provenance": _provenance(analysis),
    }


def _name_innermost_frame(sites: list[Json], check: CrossCheck | None) -> None:
    """Give the first site's innermost frame the function cuda-gdb names there, if it does.

    nvdisasm's -gi prints no function names; cuda-gdb's `bt` says `at F:L in X inlined
    from …` for the innermost inlined function X.
    """
    for site in sites:
        for frame in site["chain"]:
            frame["function"], frame["function_source"] = None, None
    if check is None or not check.backtrace or not sites or not sites[0]["chain"]:
        return
    top, frame = check.backtrace[0], sites[0]["chain"][0]
    same_place = top.line == frame["line"] and (
        PurePosixPath(top.file or "").name == PurePosixPath(frame["file"]).name
    )
    if same_place and top.inline_function:
        frame["function"], frame["function_source"] = demangle(top.inline_function), "cuda-gdb"


def _hang(hang: HangAnalysis | None) -> Json | None:
    if hang is None:
        return None
    return {
        "groups": [
            {
                "device": g.device_index,
                "grid_id": g.grid_id,
                "kernel": kernel_json(g.kernel),
                "offset_hex": f"0x{g.offset:04x}",
                "warps": g.warps,
                "lanes": g.lanes,
                "blocks": g.blocks,
                "instruction": g.instruction.text if g.instruction else None,
                "barrier": g.barrier,
                "in_polling_loop": g.in_polling_loop,
                "chain": [
                    {"depth": d, "file": q.frame.file, "line": q.frame.line, "source": q.text,
                     "missing": q.reason}
                    for d, q in enumerate(g.quoted)
                ],
            }
            for g in hang.groups
        ],
        "findings": [
            {"code": f.code.value, "message": f.message, "evidence": list(f.evidence),
             "caveat": f.caveat}
            for f in hang.findings
        ],
        "notes": [n.message for n in hang.notes],
    }  # fmt: skip


def _dump(path: Path, summary: DumpSummary) -> Json:
    return {
        "path": str(path),
        "file_size": summary.file_size,
        "compressed": summary.compressed,
        "codec": summary.codec,
        "findings": [_diagnosis(d) for d in summary.findings],
        "elf_abi_version": summary.abi_version,
        "layout_generation": summary.layout_generation,
        "sections": summary.section_count,
        "extended_numbering": summary.extended_numbering,
        "row_sizes": {layout.table: layout.row_size for layout in summary.layouts},
        "optional_sections": summary.optional_sections,
    }


def _verdict(analysis: Analysis, sites: Sequence[Json]) -> Json:
    if not sites and analysis.hang is not None:
        findings = analysis.hang.findings
        warps = sum(k.warps for k in analysis.state)
        headline = (
            f"hang: {findings[0].message}" if findings
            else f"no exception recorded: {warps} live warps, and no deadlock pattern found "
            "(a user-triggered dump of a kernel still running, or a hang these rules miss)"
        )  # fmt: skip
        return {"kind": "hang", "headline": headline, "findings": len(findings)}
    if not sites:
        return {
            "kind": "no-exception",
            "headline": "no exception recorded: every warp was live (a hang or a "
            "user-triggered dump)",
        }
    first = sites[0]
    kernel = first["function"]["demangled"] if first["function"] else "an unknown function"
    exception = (
        first["exception"]["name"] if first["exception"]
        else "stopped at a trap" if first["trap"] else "an unnamed exception"
    )  # fmt: skip
    where = ""
    if first["location"]:
        where = f" at {first['location']}"
    return {
        "kind": "fault",
        "headline": f"{exception} in {kernel}{where}",
        "sites": len(sites),
    }


def _coords(fault: Fault) -> Json:
    return {
        "source": fault.source.value,
        "device": fault.device_index,
        "sm": fault.sm_id,
        "grid_id": fault.grid_id,
        "block": dim_or_none(fault.block_idx),
        "warp": fault.warp_id,
        "lane": fault.lane,
        "thread": dim_or_none(fault.thread_idx),
    }


def _site(site: FaultSite) -> Json:
    lanes = [f for f in site.faults if f.lane is not None]
    function = site.function
    location = None
    if function is not None and site.offset is not None:
        location = f"{without_parameters(function.demangled)}+0x{site.offset:x}"
    return {
        "exception": exception_json(site.exception),
        "trap": all(f.source is FaultSource.TRAP for f in site.faults),
        "error_pc": site.error_pc,
        "error_pc_hex": hex_or_none(site.error_pc),
        "module_handle": hex_or_none(site.module_handle),
        "function": kernel_json(function.name) if function else None,
        "offset": site.offset,
        "offset_hex": hex_or_none(site.offset),
        "location": location,
        "driver_says": next((f.detail for f in site.faults if f.detail), None),
        "census": {
            "records": len(site.faults),
            "lanes": len(lanes),
            "warps": len({(f.device_index, f.sm_id, f.warp_id) for f in lanes}),
            "ctas": len({(f.device_index, f.grid_id, f.block_idx) for f in lanes}),
            "sms": len({(f.device_index, f.sm_id) for f in site.faults}),
            "devices": len({f.device_index for f in site.faults}),
        },
        "faults": [_coords(f) for f in site.faults],
        "instruction": _instruction(site),
        "window": [
            {"offset_hex": f"0x{i.offset:04x}", "text": i.text, "is_fault": i.offset == site.offset}
            for i in site.window
        ],
        "has_line_info": site.has_line_info,
        "chain": [
            {
                "depth": depth,
                "file": q.frame.file,
                "line": q.frame.line,
                "source": q.text,
                "found_at": None if q.path is None else str(q.path),
                "missing": q.reason,
            }
            for depth, q in enumerate(site.quoted)
        ],
        "forensics": forensics_json(site.forensics),
        "diagnoses": [_diagnosis(d) for d in site.diagnoses],
    }


def _diagnosis(d: Finding) -> Json:
    return {
        "code": d.code.value,
        "severity": d.severity.value,
        "message": d.message,
        "remedy": d.remedy,
    }


def _instruction(site: FaultSite) -> Json | None:
    i = site.instruction
    if i is None:
        return None
    return {
        "offset_hex": f"0x{i.offset:04x}",
        "text": i.text,
        "opcode": i.opcode,
        "predicate": i.predicate,
        "operands": list(i.operands),
    }


def _launch(launch: Any, sites: Sequence[FaultSite]) -> Json:
    grid = launch.grid
    faulted = any(
        f.device_index == grid.device_index
        and (
            f.grid_id == grid.grid_id
            # an SM-level fault names no grid: its code location names the kernel
            or (
                f.grid_id is None
                and site.function is not None
                and site.function.name == launch.kernel
            )
        )
        for site in sites
        for f in site.faults
    )
    return {
        "grid_id": grid.grid_id,
        "device": grid.device_index,
        "kernel": kernel_json(launch.kernel),
        "grid_dim": dim_or_none(grid.grid_dim),
        "block_dim": dim_or_none(grid.block_dim),
        "cluster_dim": dim_or_none(grid.cluster_dim),
        "registers_per_thread": grid.num_regs,
        "context_id": hex_or_none(grid.context_id),
        "module_handle": hex_or_none(grid.module_handle),
        "origin": {0: "CPU", 1: "GPU"}.get(grid.origin) if grid.origin is not None else None,
        "faulted": faulted,
    }


def _device(device: Any) -> Json:
    return {
        "index": device.index,
        "name": device.name,
        "type": device.type,
        "sm_type": device.sm_type,
        "sms": device.num_sms,
        "warps_per_sm": device.num_warps_per_sm,
        "lanes_per_warp": device.num_lanes_per_warp,
        "pci": None
        if device.pci_bus_id is None or device.pci_dev_id is None
        else f"{device.pci_bus_id:02x}:{device.pci_dev_id:02x}",
    }


def _state(kernel: KernelState) -> Json:
    return {
        "device": kernel.device_index,
        "grid_id": kernel.grid_id,
        "kernel": kernel_json(kernel.kernel),
        "warps": kernel.warps,
        "lanes": kernel.lanes,
        "divergent_warps": kernel.divergent_warps,
        "pcs": [
            {
                "offset_hex": f"0x{g.offset:04x}",
                "warps": g.warps,
                "lanes": g.lanes,
                "faulting_lanes": g.faulting_lanes,
            }
            for g in kernel.pcs
        ],  # fmt: skip
    }


def _module(module: Any) -> Json:
    image = module.module.relocated_image
    return {
        "module_handle": hex_or_none(module.module.module_handle),
        "context_id": hex_or_none(module.module.context_id),
        "device": module.module.device_index,
        "elf_abi_version": module.abi_version,
        "image_bytes": image.size_bytes if image else None,
        "functions": [demangle(f) for f in module.functions],
    }


def _metadata(summary: DumpSummary) -> Json | None:
    meta = summary.metadata
    if meta is None:
        return None
    return {
        "generator": meta.generator_name,
        "driver_version": version_or_none(meta.driver_version),
        "cuda_version": version_or_none(meta.cuda_driver_version),
        "flags": None if meta.flags is None else list(meta.flag_names),
        "timestamp": meta.timestamp,
        "written_utc": None
        if meta.timestamp is None
        else datetime.fromtimestamp(meta.timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _crosscheck(check: CrossCheck | None, note: str | None) -> Json:
    if check is None:
        return {"ran": False, "note": note}
    return {
        "ran": True,
        "version": check.version,
        "opened": check.opened,
        "longer_rows": list(check.longer_rows),
        "checks": [
            {"fact": c.fact, "native": c.native, "cuda_gdb": c.cuda_gdb, "agrees": c.agrees}
            for c in check.checks
        ],
        "disagreements": len(check.disagreements),
        "notes": [n.message for n in check.notes],
        "backtrace": [_frame_text(frame) for frame in check.backtrace],
    }


def _frame_text(frame: Any) -> str:
    text = f"#{frame.level} {frame.function}"
    if frame.file:
        text += f" at {frame.file}:{frame.line}"
    if frame.inline_function:
        text += f" in {demangle(frame.inline_function)}"
        if frame.inlined_from_file:
            text += f" inlined from {frame.inlined_from_file}:{frame.inlined_from_line}"
    return text


def _disassembly(analysis: Analysis) -> Disassembly | None:
    """The first listing the report shows (a fault site's, else a stuck kernel's): its tool
    version and which copy of the image nvdisasm read go in the provenance."""
    found = next((s.disassembly for s in analysis.sites if s.disassembly), None)
    if found is None and analysis.hang is not None and analysis.hang.disassemblies:
        found = analysis.hang.disassemblies[0]
    return found


def _provenance(analysis: Analysis) -> list[Json]:
    disassembly = _disassembly(analysis)
    disasm_note = None if disassembly else _missing(analysis.sites)
    check = analysis.crosscheck
    return [
        {
            "source": "native reader",
            "version": __version__,
            "facts": "exception, error PC, threads, kernel+offset, launches, devices, "
            "modules, metadata, GPU state",
            "status": "used",
            "note": None,
            "image": None,
        },
        {
            "source": "nvdisasm",
            "version": disassembly.tool_version if disassembly else None,
            "facts": "SASS instructions, inline chains (-gi)",
            "status": "used" if disassembly else "unavailable",
            "note": disasm_note,
            "image": disassembly.image if disassembly else None,
        },
        {
            "source": "cuda-gdb",
            "version": check.version if check else None,
            "facts": "second opinion on the native facts; backtrace with inline function names",
            "status": "used" if check and check.opened else "unavailable",
            "note": analysis.gdb_note if check is None else (
                None if check.opened
                else "; ".join(n.message for n in check.notes) or "could not read the dump"
            ),
            "image": None,
        },
    ]  # fmt: skip


def _missing(sites: Sequence[FaultSite]) -> str | None:
    for site in sites:
        for note in site.diagnoses:
            if note.code in (FindingCode.NVDISASM_MISSING, FindingCode.NVDISASM_FAILED):
                return note.message
    return "not run" if sites else "no fault to disassemble"
