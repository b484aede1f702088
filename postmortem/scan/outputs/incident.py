"""`postmortem scan DIR --incident`: the scanned dumps taken as one incident, the dumps of one
job (`postmortem.analysis.fleet.incident`), as a block of the scan's index."""

from __future__ import annotations

from typing import Any

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fleet.analyze import analyze_incident
from postmortem.analysis.fleet.incident import (
    Incident,
    IncidentDump,
    build_incident,
    failed_dump,
)
from postmortem.model import TimeSource
from postmortem.report.incident import incident_json
from postmortem.scan.row import DumpRow, RowStatus
from postmortem.scan.run import ScanResult
from postmortem.urls import as_dump_path

MAX_ANALYZED = 64
"""The most dumps an incident analyzes whole: one job's dumps are a few, one per rank. Past
it (a fleet scanned with --incident), the incident is made from the scan's rows alone, without
the comparison of two hang dumps of one process."""


def incident_of(result: ScanResult, options: AnalyzeOptions | None = None) -> Incident:
    """The incident of every dump the scan found, error rows included: the same analysis as
    `postmortem analyze A B...` (`analyze_incident`) when `options` are given and the dumps
    are few, so that two hang dumps of one process are compared here as there."""
    readable = [row for row in result.rows if not row.failed]
    if options is None or len(readable) > MAX_ANALYZED:
        return build_incident([incident_dump(row) for row in result.rows])
    failed = [incident_dump(row) for row in result.rows if row.failed]
    return analyze_incident([as_dump_path(row.path) for row in readable], options, failed)


def incident_view(result: ScanResult, options: AnalyzeOptions | None = None) -> dict[str, Any]:
    """The incident as one object of the index (and one JSON line, of type "incident")."""
    return {"type": "incident", **incident_json(incident_of(result, options))}


def incident_dump(row: DumpRow) -> IncidentDump:
    """What the incident needs of a scan's row.

    A scan dates a dump by its metadata, else by the `%t` of its name, else by its mtime; an
    incident never by the name (`%t` is when the context was created, not the fault).
    """
    mtime = row.mtime or None  # 0.0: the file could not be looked at
    if row.failed:
        error = row.error if row.status == RowStatus.ERROR else f"{row.status}: {row.error}"
        return failed_dump(row.path, error or row.status, mtime, row.no_gpu_state)
    time, source = (
        (row.time, TimeSource.METADATA)
        if row.time_source == TimeSource.METADATA
        else (mtime, TimeSource.MTIME)
    )
    faulted = row.fault_sites > 0
    kernels = ((row.kernel,) if row.kernel else ()) if faulted else row.live_kernels
    return IncidentDump(
        row.path, time, source, mtime, exception=row.exception, faulted=faulted,
        headline=row.headline, signature=row.signature.id if row.signature else None,
        kernels=kernels,
    )  # fmt: skip
