"""The scan index's view model: the report (text, md, html) and the JSON lines come from it
(rendered by `postmortem.report.render`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from postmortem._version import __version__
from postmortem.analysis.signature import SIGNATURE_VERSION, Signature
from postmortem.model import describe_exception
from postmortem.report.values import utc_text
from postmortem.scan.group import CoarseGroup, Group
from postmortem.scan.row import DumpRow, dump_id
from postmortem.scan.run import ScanResult


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
        "dumps": [
            {"path": path, "report": _link(report, base)}
            for path, report in zip(group.dumps, group.reports, strict=True)
        ],
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
    }  # fmt: skip


def build_index(result: ScanResult, base: Path | None = None) -> dict[str, Any]:
    """The index's view model; report links are made relative to `base` when given."""
    earliest = {group.earliest for group in result.groups}
    return {
        "summary": summary_view(result),
        "groups": [group_view(g, i + 1, base) for i, g in enumerate(result.groups)],
        "coarse": [_coarse_view(c) for c in result.coarse],
        "dumps": [dump_view(row, row.path in earliest, base) for row in result.rows],
        "errors": [dump_view(row, False, base) for row in result.errors],
    }
