"""The incident (`postmortem.analysis.incident`) as plain data: what `analyze CORE...` writes
for several dumps (`postmortem.incident/1`, `incident.schema.json`), and the incident block
of a scan's index."""

from __future__ import annotations

from collections import Counter

from postmortem._version import __version__
from postmortem.analysis.incident import Incident, IncidentRow, Role
from postmortem.demangle import demangle
from postmortem.model import describe_exception
from postmortem.report.oncall import oncall_json
from postmortem.report.values import Json, utc_text

SCHEMA = "postmortem.incident/1"


def build_incident_report(incident: Incident) -> Json:
    """The incident report of `analyze CORE...` (its JSON output is exactly this)."""
    return {
        "schema": SCHEMA,
        "tool": {"name": "postmortem", "version": __version__},
        **incident_json(incident),
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
        "notes": list(incident.notes),
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
