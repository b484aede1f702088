"""`postmortem scan DIR --incident`: the scanned dumps taken as one incident, the dumps of one
job (`postmortem.analysis.fleet.incident`), as a block of the scan's index."""

from __future__ import annotations

from typing import Any

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


def incident_of(result: ScanResult) -> Incident:
    """The incident of every dump the scan found, error rows included."""
    return build_incident([incident_dump(row) for row in result.rows])


def incident_view(result: ScanResult) -> dict[str, Any]:
    """The incident as one object of the index (and one JSON line, of type "incident")."""
    return {"type": "incident", **incident_json(incident_of(result))}


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
