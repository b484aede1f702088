"""The report's data: an `Analysis` turned into plain values every format renders from.

Text, Markdown and HTML templates and the JSON output all read this one structure, so
they cannot disagree. It holds only JSON types; addresses are kept both as integers and
as the hex strings people read. Nothing that varies between runs (durations, the clock,
temporary paths) goes in, so reports of the same dump are identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postmortem._version import __version__
from postmortem.analysis.analyze import Analysis
from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.hang.hang import HangAnalysis
from postmortem.analysis.oncall.summary import oncall_summary
from postmortem.analysis.provenance import ToolUse
from postmortem.analysis.state import KernelState
from postmortem.analysis.verdict import Verdict, VerdictKind
from postmortem.demangle import brief_name, demangle, heading_name
from postmortem.findings import Finding
from postmortem.host.redact import hide_home_folders
from postmortem.model import Fault, FaultSource
from postmortem.report.calls import calls_json
from postmortem.report.deliberate import assert_json, trap_json
from postmortem.report.forensics import builds_json, census_json, counts_json, forensics_json
from postmortem.report.oncall import oncall_json
from postmortem.report.values import (
    Json,
    dim_or_none,
    exception_json,
    hex_or_none,
    kernel_json,
    utc_text,
    version_or_none,
)
from postmortem.summary import DumpSummary, KernelLaunch

if TYPE_CHECKING:
    from postmortem.analysis.crosscheck import CrossCheck

SCHEMA = "postmortem.report/1"


def build_report(analysis: Analysis, *, lanes: int | None = None) -> Json:
    """The report of one analysis as plain data (the JSON output is exactly this).

    `lanes` keeps at most that many entries of each per-lane list (a site's `faults`, its
    forensics' `lanes`) for a format that shows only the first few: a grid-wide fault of a
    full GPU holds 270,000 of each. Their counts (`fault_count`, `lane_count`) stay whole.
    None keeps every entry, as the JSON does.
    """
    summary = analysis.summary
    sites = [_site(site, lanes) for site in analysis.sites]
    report = {
        "schema": SCHEMA,
        "tool": {"name": "postmortem", "version": __version__},
        "dump": _dump(analysis.path, summary),
        "oncall": oncall_json(oncall_summary(analysis)),
        "verdict": _verdict(analysis.verdict),
        "sites": sites,
        "launches": [_launch(x) for x in summary.launches],
        "devices": [_device(d) for d in summary.devices],
        "state": [_state(k) for k in analysis.state],
        "modules": [_module(m) for m in summary.modules],
        "metadata": _metadata(summary),
        "hang": _hang(analysis.hang),
        "census": census_json(analysis.census),
        "builds": builds_json(analysis.builds, _ran(analysis)),
        "crosscheck": _crosscheck(analysis.crosscheck, analysis.gdb_note),
        "provenance": _provenance(analysis.provenance),
        "host": _host(analysis),
    }
    # A report goes to a ticket: the user's home folder is not part of what it says.
    return _home_folders_hidden(report) if analysis.redact else report


def _home_folders_hidden(report: Json) -> Json:
    """`hide_home_folders` of the report, but for its per-lane lists: they hold numbers, hex
    strings and register names, never a path, and a grid-wide fault's hold 5 million values."""
    lanes = [(site.pop("faults"), _pop_lanes(site["forensics"])) for site in report["sites"]]
    hidden: Json = hide_home_folders(report)
    for site, (faults, addresses) in zip(hidden["sites"], lanes, strict=True):
        site["faults"] = faults
        if site["forensics"] is not None:
            site["forensics"]["lanes"] = addresses
    return hidden


def _pop_lanes(forensics: Json | None) -> list[Json]:
    return [] if forensics is None else forensics.pop("lanes")


def _host(analysis: Analysis) -> Json | None:
    # What the host logs add; their readers are loaded only for a report that has some.
    if analysis.host is None:
        return None
    from postmortem.report.host import host_json

    return host_json(analysis.host)


def _dim(value: tuple[int, int, int] | None) -> list[int] | None:
    return None if value is None else list(value)


def _blocked_lanes(states: tuple[tuple[str, int], ...]) -> str | None:
    """The lanes blocked on a convergence barrier, in words (`31 Blocked on B0, 1 Ready`), when
    any is: the state worth a line; Ready alone is the usual picture."""
    if not any(state.startswith("Blocked") for state, _ in states):
        return None
    return ", ".join(f"{lanes} {state}" for state, lanes in states)


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
                "barrier_id": g.barrier_id,
                "barrier_threads": g.barrier_threads,
                "role": g.role,
                "driver_barrier": g.driver_barrier,
                "calls": calls_json(g.calls),
                "in_polling_loop": g.in_polling_loop,
                "waits_at_hex": f"0x{g.waits_at:04x}" if g.waits_at is not None else None,
                "wait": (
                    {"kind": str(g.wait.kind), "why": g.wait.why,
                     "lane_states": [{"state": s, "lanes": n} for s, n in g.lane_states],
                     "blocked_lanes": _blocked_lanes(g.lane_states)}
                    if g.wait else None
                ),  # fmt: skip
                "chain": [
                    {"depth": d, "file": q.frame.file, "line": q.frame.line, "source": q.text,
                     "missing": q.reason, "function": name.demangled if name else None,
                     "function_brief": heading_name(name.demangled) if name else None,
                     "function_mangled": name.function if name else None,
                     "function_source": name.source if name else None}
                    for d, (q, name) in enumerate(
                        zip(g.quoted, g.frame_names or (None,) * len(g.quoted), strict=True)
                    )
                ],
            }
            for g in hang.groups
        ],
        "findings": [
            {"code": f.code.value, "severity": f.severity.value, "message": f.message,
             "evidence": list(f.evidence), "caveat": f.caveat}
            for f in hang.findings
        ],
        "wait_for": [
            {"grid_id": e.grid_id, "waiter": {"block": _dim(e.waiter_block), "warp": e.waiter_warp,
             "pc_hex": f"0x{e.waiter_pc:04x}"}, "on": {"block": _dim(e.on_block),
             "warp": e.on_warp, "pc_hex": f"0x{e.on_pc:04x}"}, "can": e.can, "why": e.why}
            for e in hang.wait_for
        ],
        "wait_for_total": hang.wait_for_total,
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


def _verdict(verdict: Verdict) -> Json:
    shown: Json = {"kind": verdict.kind.value, "headline": verdict.headline}
    if verdict.kind is VerdictKind.FAULT:
        shown["sites"] = verdict.sites
    elif verdict.kind is VerdictKind.HANG:
        shown["findings"] = verdict.findings
    return shown


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


def _site(site: FaultSite, lanes: int | None) -> Json:
    function = site.function
    names = site.frame_names or (None,) * len(site.quoted)
    return {
        "exception": exception_json(site.exception),
        "trap": all(f.source is FaultSource.TRAP for f in site.faults),
        "error_pc": site.error_pc,
        "error_pc_hex": hex_or_none(site.error_pc),
        "module_handle": hex_or_none(site.module_handle),
        "function": kernel_json(function.name) if function else None,
        "offset": site.offset,
        "offset_hex": hex_or_none(site.offset),
        "location": site.location,
        "location_brief": _location_brief(site),
        "calls": calls_json(site.calls),
        "driver_says": next((f.detail for f in site.faults if f.detail), None),
        "census": counts_json(site.counts),
        "faults": [_coords(f) for f in site.faults[:lanes]],
        "fault_count": len(site.faults),
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
                "function": name.demangled if name else None,
                "function_brief": heading_name(name.demangled) if name else None,
                "function_mangled": name.function if name else None,
                "function_source": name.source if name else None,
            }
            for depth, (q, name) in enumerate(zip(site.quoted, names, strict=True))
        ],
        "forensics": forensics_json(site.forensics, lanes),
        "assert": assert_json(site.assertion),
        "trap_stop": trap_json(site.trap),
        "diagnoses": [_diagnosis(d) for d in site.diagnoses],
    }


def _ran(analysis: Analysis) -> set[str]:
    """The kernels the dump shows running: launched, or holding a fault."""
    ran = {x.kernel for x in analysis.summary.launches if x.kernel}
    return ran | {s.function.name for s in analysis.sites if s.function}


def _location_brief(site: FaultSite) -> str | None:
    """`location` with the bounded heading name: a CUTLASS kernel's is thousands long."""
    if site.innermost is None:
        return None
    function, offset = site.innermost
    return f"{brief_name(function.demangled)}+0x{offset:x}"


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


def _launch(launch: KernelLaunch) -> Json:
    grid = launch.grid
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
        "faulted": launch.faulted,
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
        "written_utc": None if meta.timestamp is None else utc_text(meta.timestamp),
    }


def _crosscheck(check: CrossCheck | None, note: str | None) -> Json:
    if check is None:
        return {"ran": False, "note": note}
    compared = sum(1 for c in check.checks if c.agrees is not None)
    return {
        "ran": True,
        "version": check.version,
        "opened": check.opened,
        "longer_rows": list(check.longer_rows),
        "checks": [
            {"fact": c.fact, "native": c.native, "cuda_gdb": c.cuda_gdb, "agrees": c.agrees}
            for c in check.checks
        ],
        "compared": compared,
        "why_nothing_compared": None if compared else _why_nothing_compared(check),
        "disagreements": len(check.disagreements),
        "notes": [n.message for n in check.notes],
        "backtrace": [_frame_text(frame) for frame in check.backtrace],
    }


def _why_nothing_compared(check: CrossCheck) -> str:
    # The notes (known cuda-gdb failures) are shown beside it, so they are not repeated here.
    if not check.opened:
        return "cuda-gdb could not read this dump"
    if not check.checks:
        return "there was no fact to compare"
    count = len(check.checks)
    return f"cuda-gdb stated none of the {count} fact{'s' if count != 1 else ''} it was asked"


def _frame_text(frame: Any) -> str:
    text = f"#{frame.level} {frame.function}"
    if frame.file:
        text += f" at {frame.file}:{frame.line}"
    if frame.inline_function:
        text += f" in {demangle(frame.inline_function)}"
        if frame.inlined_from_file:
            text += f" inlined from {frame.inlined_from_file}:{frame.inlined_from_line}"
    return text


def _provenance(uses: Sequence[ToolUse]) -> list[Json]:
    return [
        {
            "source": use.source,
            "version": use.version,
            "facts": use.facts,
            "status": "used" if use.used else "unavailable",
            "note": use.note,
            "image": use.image,
            "seconds": None if use.seconds is None else round(use.seconds, 2),
            "peak_memory_mib": (
                None if use.peak_rss_kib is None else round(use.peak_rss_kib / 1024, 1)
            ),
            "path": use.path,
            "chosen_by": use.chosen_by,
        }
        for use in uses
    ]
