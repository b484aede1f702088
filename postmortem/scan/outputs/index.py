"""The scan index's view model: the report (text, md, html) and the JSON lines come from it
(rendered by `postmortem.report.render`)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from postmortem._version import __version__
from postmortem.analysis.fleet.signature import SIGNATURE_VERSION, Signature
from postmortem.exceptions import describe_exception
from postmortem.pci import format_pci
from postmortem.report.values import utc_text
from postmortem.scan.fleet.group import Blame, CoarseGroup, Group, History
from postmortem.scan.fleet.hardware import (
    CODE,
    HARDWARE,
    TOO_FEW,
    UNCLEAR,
    Gpu,
    gpu_id,
)
from postmortem.scan.fleet.known.model import Lifecycle
from postmortem.scan.fleet.owners import Ownership
from postmortem.scan.outputs.ci.policy import mark_counts, mark_of
from postmortem.scan.row import DumpRow, dump_id
from postmortem.scan.run import ScanResult
from postmortem.scan.store.history import QUIET_DAYS


def _link(report: str | None, base: Path | None) -> str | None:
    if report is None or base is None:
        return report
    return Path(os.path.relpath(report, base)).as_posix()


def signature_view(signature: Signature) -> dict[str, Any]:
    """A signature as plain data (also what `postmortem signature --json` prints)."""
    quality = signature.quality
    return {
        "version": signature.version, "rules": signature.rules, "id": signature.id,
        "key": signature.key, "coarse_id": signature.coarse_id,
        "coarse_key": signature.coarse_key, "exception": signature.exception,
        "kernel": signature.kernel, "function": signature.function,
        "offset": signature.offset,
        "offset_hex": None if signature.offset is None else f"0x{signature.offset:x}",
        "frames": list(signature.frames),
        "all_frames": [
            {"file": f.file, "line": f.line, "library": f.library} for f in signature.all_frames
        ],
        "skipped": signature.skipped, "components": list(signature.components),
        "quality": {
            "score": quality.score, "function_resolved": quality.function_resolved,
            "line_info": quality.line_info, "in_app_frame": quality.in_app_frame,
            "advice": quality.advice,
        },
    }  # fmt: skip


def dump_view(row: DumpRow, earliest: bool, base: Path | None) -> dict[str, Any]:
    """One dump as plain data: a JSON line, a row of the index."""
    return {
        "type": "dump", "id": dump_id(row), "fingerprint": row.fingerprint,
        "path": row.path, "status": row.status, "error": row.error,
        "size_bytes": row.size_bytes, "mtime": row.mtime, "time": row.time,
        "time_iso": utc_text(row.time), "time_source": row.time_source, "host": row.host,
        "pid": row.pid, "driver_version": row.driver_version, "devices": list(row.devices),
        "exception": row.exception,
        "exception_name": None if row.exception is None else describe_exception(row.exception),
        "kernel": row.kernel, "fault_sites": row.fault_sites,
        "report": _link(row.report, base), "cached": row.cached, "seconds": row.seconds,
        "earliest_in_group": earliest,
        "signature": None if row.signature is None else signature_view(row.signature),
        "instruction": row.instruction, "instruction_note": row.instruction_note,
        "gpu": gpu_id(row), "gpu_name": row.gpu_name,
        "pci_address": None if row.pci_bus_id is None else format_pci(
            row.pci_bus_id, row.pci_dev_id
        ),
        "sm": row.sm, "build_key": row.build_key,
        "beside": list(row.beside), "beside_more": row.beside_more,
        "engine_trigger": row.engine_trigger,
    }  # fmt: skip


def group_view(group: Group, rank: int, base: Path | None) -> dict[str, Any]:
    """One group as plain data."""
    sig = signature_view(group.signature)
    return {
        "type": "group", "rank": rank, "id": group.signature.id, "count": group.count,
        "signature": sig, "kernel": group.kernel, "first_seen": group.first_seen,
        "last_seen": group.last_seen,
        "first_seen_iso": utc_text(group.first_seen), "last_seen_iso": utc_text(group.last_seen),
        "hosts": [{"host": host, "count": count} for host, count in group.hosts],
        "pids": list(group.pids), "driver_versions": list(group.driver_versions),
        "devices": list(group.devices), "earliest": group.earliest,
        "earliest_source": group.earliest_source, "instruction": group.instruction,
        "builds": group.builds, "first_build": group.first_build,
        "fleet_verdict": None if group.blame is None else blame_view(group.blame),
        "owners": None if group.ownership is None else ownership_view(group.ownership),
        "history": None if group.history is None else history_view(group.history),
        "mark": str(mark_of(group)), "lifecycle": lifecycle_view(group.lifecycle),
        "runs": list(group.runs),
        "dumps": [
            {"path": path, "report": _link(report, base)}
            for path, report in zip(group.dumps, group.reports, strict=True)
        ],
    }  # fmt: skip


def blame_view(blame: Blame) -> dict[str, Any]:
    """Hardware or code, with the counts behind it."""
    return {
        "kind": blame.kind, "reason": blame.reason, "dumps": blame.dumps, "gpus": blame.gpus,
        "hosts": blame.hosts, "signatures": blame.signatures, "sm": blame.sm,
    }  # fmt: skip


def history_view(history: History) -> dict[str, Any]:
    """A signature across the scans of the same roots."""
    return {
        "first_seen": history.first_seen, "last_seen": history.last_seen,
        "first_seen_iso": utc_text(history.first_seen),
        "last_seen_iso": utc_text(history.last_seen), "total": history.total,
        "days": [{"day": day, "count": count} for day, count in history.days],
        "new": history.new, "regressed": history.regressed, "quiet_days": history.quiet_days,
    }  # fmt: skip


def lifecycle_view(lifecycle: Lifecycle | None) -> dict[str, Any] | None:
    """A group against the known-crashes file; None when the scan had none."""
    if lifecycle is None:
        return None
    return {
        "mark": str(lifecycle.mark),
        "state": None if lifecycle.state is None else str(lifecycle.state),
        "detail": lifecycle.detail, "line": lifecycle.line, "after_fix": lifecycle.after_fix,
        "expired": lifecycle.expired, "acted_on": lifecycle.acted_on,
    }  # fmt: skip


def known_view(result: ScanResult) -> dict[str, Any] | None:
    """The known-crashes file a scan was marked against: its crashes, and the marks given."""
    known = result.known
    if known is None:
        return None
    seen = {g.signature.id for g in result.groups}
    return {
        "path": str(known.path), "crashes": len(known.crashes),
        "unseen": sum(1 for crash in known.crashes if crash.id not in seen),
        "marks": mark_counts(result.groups),
        "acted_on": sum(1 for g in result.groups if g.lifecycle and g.lifecycle.acted_on),
    }  # fmt: skip


def ownership_view(ownership: Ownership) -> dict[str, Any]:
    """Who owns a group, and the frame and rule that say so."""
    return {
        "owners": list(ownership.owners), "path": ownership.path,
        "pattern": ownership.pattern, "line": ownership.line,
    }  # fmt: skip


def gpu_view(gpu: Gpu) -> dict[str, Any]:
    """One GPU of the fleet: its faults by signature and SM, and its verdict."""
    return {
        "id": gpu.id, "host": gpu.host, "pci_address": format_pci(gpu.pci_bus_id, gpu.pci_dev_id),
        "name": gpu.name, "dumps": gpu.blame.dumps,
        "signatures": [{"id": sid, "count": count} for sid, count in gpu.signatures],
        "sms": [{"sm": sm, "count": count} for sm, count in gpu.sms],
        "fleet_verdict": blame_view(gpu.blame),
        "xids": [{"xid": xid, "count": count} for xid, count in gpu.xids],
    }  # fmt: skip


def _coarse_view(coarse: CoarseGroup) -> dict[str, Any]:
    return {
        "coarse_id": coarse.coarse_id, "exception": coarse.exception, "kernel": coarse.kernel,
        "count": coarse.count, "signatures": list(coarse.signatures),
    }  # fmt: skip


def summary_view(result: ScanResult) -> dict[str, Any]:
    """The scan as a whole: counts, time, interruption."""
    errors = len(result.errors)
    return {
        "type": "scan", "tool": {"name": "postmortem", "version": __version__},
        "signature_version": SIGNATURE_VERSION, "dumps": len(result.rows),
        "ok": len(result.rows) - errors, "errors": errors, "groups": len(result.groups),
        "found": result.found, "left_out": result.left_out, "interrupted": result.interrupted,
        "cache_hits": result.cache_hits, "seconds": round(result.seconds, 3),
        "gpus": [gpu_view(gpu) for gpu in result.gpus],
        "known": known_view(result),
        "host_xids": None if result.host_xids is None else {
            "lines": result.host_xids[0], "unjoined": result.host_xids[1],
        },
    }  # fmt: skip


_KINDS = (HARDWARE, CODE, UNCLEAR, TOO_FEW)


def _notable(gpus: tuple[Gpu, ...]) -> list[Gpu]:
    acted_on = [gpu for kind in (HARDWARE, UNCLEAR) for gpu in gpus if gpu.blame.kind == kind]
    return acted_on + [gpu for gpu in gpus if gpu.xids and gpu not in acted_on]


def build_index(result: ScanResult, base: Path | None = None) -> dict[str, Any]:
    """The index's view model; report links are made relative to `base` when given."""
    earliest = {group.earliest for group in result.groups}
    kinds = Counter(gpu.blame.kind for gpu in result.gpus)
    return {
        "summary": summary_view(result),
        # for the text, Markdown and HTML indexes only: a re-scan's JSON lines stay the same
        "history": None
        if result.history is None
        else {
            "scan": result.history.number,
            "quiet_days": QUIET_DAYS,
            "previous_scan_iso": None
            if result.history.previous_ns is None
            else utc_text(result.history.previous_ns / 1e9),
        },
        "fleet": {
            "gpus": len(result.gpus),
            "kinds": [{"kind": kind, "count": kinds[kind]} for kind in _KINDS if kinds[kind]],
            # the GPUs a reader acts on: judged hardware, then the ones left unclear, then
            # the others that the host logs' Xid lines name
            "notable": [gpu_view(gpu) for gpu in _notable(result.gpus)],
        },
        "groups": [group_view(g, i + 1, base) for i, g in enumerate(result.groups)],
        "coarse": [_coarse_view(c) for c in result.coarse],
        "dumps": [dump_view(row, row.path in earliest, base) for row in result.rows],
        "errors": [dump_view(row, False, base) for row in result.errors],
    }
