"""The incident (`postmortem.analysis.fleet.incident`) as plain data: what `analyze CORE...` writes
for several dumps (`postmortem.incident/1`, `incident.schema.json`), and the incident block
of a scan's index."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from postmortem._version import __version__
from postmortem.analysis.fleet.incident import Incident, IncidentRow, Role
from postmortem.analysis.hang.motion import (
    DumpComparison,
    GridMotion,
    IncidentMotion,
    Motion,
    PcMotion,
    WarpMotion,
)
from postmortem.analysis.hang.pairing import seconds_text
from postmortem.demangle import demangle
from postmortem.exceptions import describe_exception
from postmortem.report.oncall import oncall_json
from postmortem.report.values import Json, utc_text

SCHEMA = "postmortem.incident/1"


def build_incident_report(incident: Incident) -> Json:
    """The incident report of `analyze CORE...` (its JSON output is exactly this)."""
    return {
        "schema": SCHEMA,
        "tool": {"name": "postmortem", "version": __version__},
        **incident_json(incident),
        "motion": None if incident.motion is None else motion_json(incident.motion),
    }


def incident_json(incident: Incident) -> Json:
    """The incident's verdict, its dumps with their roles and times, and its notes."""
    verdict = incident.verdict
    counts = Counter(row.role for row in incident.rows)
    return {
        "verdict": {
            "kind": verdict.kind,
            "headline": verdict.headline,
            "lead": verdict.lead,
            "agree": verdict.agree,
            "of": verdict.of,
        },
        "counts": {role.value: counts.get(role, 0) for role in Role},
        "dumps": [_row(row) for row in incident.rows],
        "notes": [n.message for n in incident.notes],
        "oncall": None if incident.oncall is None else oncall_json(incident.oncall),
    }


def _row(row: IncidentRow) -> Json:
    dump = row.dump
    return {
        "path": dump.path,
        "role": row.role.value,
        "why": row.why,
        "time": dump.time,
        "time_utc": None if dump.time is None else utc_text(dump.time),
        "time_source": dump.time_source,
        "error": dump.error,
        "exception": dump.exception,
        "exception_name": None if dump.exception is None else describe_exception(dump.exception),
        "headline": dump.headline,
        "signature": dump.signature,
        "kernels": [demangle(k) if k else None for k in dump.kernels],
    }


WARPS_SHOWN = 256
"""Warps listed per comparison, at most (those that did not move first)."""
BLOCKS_SHOWN = 32
"""Blocks listed per grid or PC, at most."""


def motion_json(motion: IncidentMotion) -> Json:
    """The comparisons of dumps of one process, and the dumps that were not compared."""
    return {
        "compared": [_comparison(c) for c in motion.compared],
        "not_compared": [{"dumps": list(n.dumps), "why": n.why} for n in motion.not_compared],
    }


def _counts(counts: Mapping[Motion, int]) -> Json:
    return {m.value: counts.get(m, 0) for m in Motion}


def _blocks(blocks: Sequence[tuple[int, int, int]]) -> list[list[int]]:
    return [list(b) for b in blocks[:BLOCKS_SHOWN]]


def _comparison(c: DumpComparison) -> Json:
    process = c.process
    return {
        "earlier": c.earlier,
        "later": c.later,
        "seconds": c.seconds,
        "seconds_text": seconds_text(c.seconds),
        "time_source": c.time_source,
        "process": {
            "host": process.host,
            "pid": process.pid,
            "evidence": list(process.evidence),
            "why": process.why,
        },
        "counts": _counts(Counter(w.motion for w in c.warps)),
        "registers_compared": c.registers_compared,
        "grids": [_grid(g) for g in c.grids],
        "groups": [_group(g) for g in c.groups],
        "warps": [_warp(w) for w in c.warps[:WARPS_SHOWN]],
        "warps_total": len(c.warps),
        "notes": [n.message for n in c.notes],
    }


def _grid(g: GridMotion) -> Json:
    return {
        "device": g.device_index,
        "grid_id": g.grid_id,
        "kernel": demangle(g.kernel) if g.kernel else None,
        "counts": _counts(g.counts),
        "stuck_blocks": _blocks(g.stuck_blocks),
        "stuck_blocks_total": len(g.stuck_blocks),
        "moved_blocks": _blocks(g.moved_blocks),
        "moved_blocks_total": len(g.moved_blocks),
    }


def _group(g: PcMotion) -> Json:
    found = g.group
    frame = found.chain[0] if found is not None and found.chain else None
    return {
        "device": g.device_index,
        "grid_id": g.grid_id,
        "offset": g.offset,
        "counts": _counts(g.counts),
        "blocks": _blocks(g.blocks),
        "blocks_total": len(g.blocks),
        "instruction": found.instruction.text if found and found.instruction else None,
        "source": None if frame is None else f"{frame.file}:{frame.line}",
        "barrier": found.barrier if found else None,
        "in_polling_loop": bool(found and found.in_polling_loop),
    }


def _warp(w: WarpMotion) -> Json:
    return {
        "device": w.device_index,
        "sm": w.sm_id,
        "warp": w.warp_id,
        "grid_id": w.grid_id,
        "block_idx": None if w.block_idx is None else list(w.block_idx),
        "motion": w.motion.value,
        "offsets": [[offset, lanes] for offset, lanes in w.offsets],
        "changed": list(w.changed),
        "registers_compared": w.registers_compared,
    }
