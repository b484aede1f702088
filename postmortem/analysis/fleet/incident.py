"""One incident from many dumps: the dumps of one job (several ranks, one window of time),
which faulted first, which are collateral, and one verdict for them all.

Dumps are put in the order they were written by the timestamp of their metadata section
(r565 and later); a dump without one falls back to its file's modification time, which is
when the writing ended. A name is never used: a `%t` in `CUDA_COREDUMP_FILE` is when the
context was created, not when the kernel faulted. The timestamp counts whole seconds, so
ranks that fault in the same second are told apart by their files' modification times,
and the incident says so.

A dump with no exception is collateral when every warp in it waits in a collective kernel
(`postmortem.analysis.hang.collective`), when it holds no live warp, or when it holds no GPU
state at all (no kernel was running, or its contexts were torn down). One whose warps are
elsewhere is "stuck": a hang of its own, the suspect when no dump faulted. A file that
cannot be read is a row with its one-line error; it never stops the incident.

`analyze.py` analyzes the dumps and makes the incident; `stuck.py` compares its hang dumps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from postmortem.analysis.analyze import Analysis
from postmortem.analysis.hang.collective import is_collective
from postmortem.analysis.hang.motion import (
    IncidentMotion,
)
from postmortem.analysis.oncall.summary import OnCallSummary
from postmortem.demangle import base_name
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import TimeSource


class Role(Enum):
    """What part a dump played in the incident."""

    FIRST_FAULT = "first-fault"
    """The earliest dump that records an exception: its verdict is the incident's."""
    FAULT = "fault"
    """A later dump that records an exception."""
    COLLATERAL = "collateral"
    """No exception: its warps wait in a collective, or it holds none (contexts torn down)."""
    STUCK = "stuck"
    """No exception, and warps outside any collective kernel: a hang of its own."""
    UNREADABLE = "unreadable"
    """Not a readable CUDA coredump (its error says why)."""


@dataclass(frozen=True, slots=True)
class IncidentDump:
    """What the incident needs of one dump, from its analysis or from a scan's row."""

    path: str
    time: float | None
    """When it was written, Unix seconds (see `time_source`); None when unknown."""
    time_source: TimeSource | None
    """`TimeSource.METADATA` or `TimeSource.MTIME`; None when the file could not even be
    looked at."""
    mtime: float | None
    """The file's modification time: the tie-break between equal timestamps."""
    error: str | None = None
    """Why the dump could not be read (without the path); None when it was."""
    no_gpu_state: bool = False
    """Read, but it holds no warp and no exception (`NoGpuState`)."""
    exception: int | None = None
    """The exception of its first fault site; None without one."""
    faulted: bool = False
    headline: str | None = None
    """Its own verdict."""
    signature: str | None = None
    """Its crash signature's id (`postmortem.analysis.fleet.signature`)."""
    kernels: tuple[str, ...] = ()
    """The faulting kernel; for a dump without a fault, the kernels its live warps are in."""

    @property
    def unreadable(self) -> bool:
        """Its analysis stopped on an error other than holding no GPU state."""
        return self.error is not None and not self.no_gpu_state


@dataclass(frozen=True, slots=True)
class IncidentRow:
    """One dump of the incident and its role."""

    dump: IncidentDump
    role: Role
    why: str
    """The role's reason in a phrase ("parked in ncclDevKernel_AllReduce_Sum_f32_RING_LL")."""


@dataclass(frozen=True, slots=True)
class IncidentVerdict:
    """The incident in one line, and how much of it agrees."""

    kind: str
    """"fault" (a dump faulted), "hang" (none did; some are stuck, or two dumps of one process
    were compared: the headline says whether their warps moved), "collateral" (every readable
    dump is collateral) or "unreadable" (no dump could be read)."""
    headline: str
    lead: str | None
    """The dump whose verdict is the incident's (the first fault); None without one."""
    agree: int = 0
    """Dumps of the lead's role whose crash signature is the lead's (the lead included)."""
    of: int = 0
    """Dumps of the lead's role (faulting dumps for a fault, stuck ones for a hang)."""


@dataclass(frozen=True, slots=True)
class Incident:
    """The dumps of one incident in the order they were written, and its verdict."""

    rows: tuple[IncidentRow, ...]
    """Readable dumps by time (undated ones after), then the unreadable ones."""
    verdict: IncidentVerdict
    notes: tuple[Finding, ...] = ()
    """What limits the order (undated dumps, equal timestamps)."""
    oncall: OnCallSummary | None = None
    """The lead dump's on-call summary, when its analysis was at hand."""
    motion: IncidentMotion | None = None
    """Dumps of one process without an exception, compared; None with fewer than two such
    dumps analyzed."""


def incident_dump(analysis: Analysis, mtime: float | None, signature: str | None) -> IncidentDump:
    """What the incident needs of an analyzed dump."""
    meta = analysis.summary.metadata
    stamp = meta.timestamp if meta is not None else None
    time, source = (float(stamp), TimeSource.METADATA) if stamp else (mtime, TimeSource.MTIME)
    site = analysis.sites[0] if analysis.sites else None
    if site is not None:
        kernels: tuple[str, ...] = (site.function.name,) if site.function else ()
    else:
        kernels = tuple(dict.fromkeys(k.kernel or "" for k in analysis.state if k.warps))
    return IncidentDump(
        str(analysis.path), time, source, mtime, exception=site.exception if site else None,
        faulted=site is not None, headline=analysis.verdict.headline, signature=signature,
        kernels=kernels,
    )  # fmt: skip


def failed_dump(
    path: str, error: str, mtime: float | None, no_gpu_state: bool = False
) -> IncidentDump:
    """A dump whose analysis stopped on `error`: unreadable, or holding no GPU state."""
    source = None if mtime is None else TimeSource.MTIME
    return IncidentDump(path, mtime, source, mtime, error, no_gpu_state)


def build_incident(dumps: Sequence[IncidentDump]) -> Incident:
    """The roles, order and verdict of `dumps` (the dumps of one job)."""
    # sorted() is stable: dumps written at the same moment keep the order given.
    ordered = sorted(
        (d for d in dumps if not d.unreadable),
        key=lambda d: (d.time is None, d.time or 0.0, d.mtime is None, d.mtime or 0.0),
    )
    faults = [d for d in ordered if d.faulted]
    stuck = [d for d in ordered if not d.faulted and _role_without_fault(d)[0] is Role.STUCK]
    lead = faults[0] if faults else (stuck[0] if stuck else None)
    rows = [_row(d, lead) for d in ordered]
    rows += [IncidentRow(d, Role.UNREADABLE, d.error or "") for d in dumps if d.unreadable]
    return Incident(tuple(rows), _verdict(lead, faults, stuck, rows), _notes(ordered, faults))


def _row(dump: IncidentDump, lead: IncidentDump | None) -> IncidentRow:
    if dump.faulted:
        if dump is lead:
            return IncidentRow(
                dump, Role.FIRST_FAULT, "the earliest dump that records an exception"
            )
        same = lead is not None and dump.signature is not None and dump.signature == lead.signature
        why = "the same crash signature as the first fault" if same else "another crash signature"
        return IncidentRow(dump, Role.FAULT, why)
    role, why = _role_without_fault(dump)
    return IncidentRow(dump, role, why)


def _role_without_fault(dump: IncidentDump) -> tuple[Role, str]:
    if dump.no_gpu_state:
        return Role.COLLATERAL, (
            "no warp and no exception: no kernel was running, or its contexts were torn down"
        )
    if not dump.kernels:
        return Role.COLLATERAL, "no exception and no live warp"
    names = ", ".join(base_name(k) if k else "an unknown kernel" for k in dump.kernels)
    if all(is_collective(k) for k in dump.kernels):
        return Role.COLLATERAL, f"no exception; its warps wait in {names}"
    return Role.STUCK, f"no exception; its warps are in {names}"


def _verdict(
    lead: IncidentDump | None,
    faults: Sequence[IncidentDump],
    stuck: Sequence[IncidentDump],
    rows: Sequence[IncidentRow],
) -> IncidentVerdict:
    if lead is not None:
        peers = faults if lead.faulted else stuck
        agree = 1 + sum(
            1 for d in peers
            if d is not lead and d.signature is not None and d.signature == lead.signature
        )  # fmt: skip
        kind = "fault" if lead.faulted else "hang"
        return IncidentVerdict(kind, lead.headline or "", lead.path, agree, len(peers))
    if any(r.role is Role.COLLATERAL for r in rows):
        return IncidentVerdict(
            "collateral",
            "no dump here records an exception: every readable one waits in a collective or "
            "holds no GPU state, so the GPU that failed left no dump among these",
            None,
        )
    return IncidentVerdict("unreadable", "no dump could be read", None)


def _notes(ordered: Sequence[IncidentDump], faults: Sequence[IncidentDump]) -> tuple[Finding, ...]:
    notes = []
    # A dump with no GPU state was never read as far as its timestamp: the driver is not why.
    undated = sum(1 for d in ordered if d.time_source != TimeSource.METADATA and not d.no_gpu_state)
    if undated:
        notes.append(
            f"{undated} dump{'s carry' if undated != 1 else ' carries'} no metadata timestamp "
            "(drivers before r565): ordered by file modification time, when the writing ended"
        )
    first = faults[0] if faults else None
    if first is not None and first.time_source == TimeSource.METADATA:
        tied = [d for d in faults if d.time_source == TimeSource.METADATA and d.time == first.time]
        if len(tied) > 1:
            notes.append(
                f"{len(tied)} faulting dumps share the first fault's timestamp (whole seconds): "
                "among them the first is the one whose file was written first"
            )
    return tuple(Finding(FindingCode.INCIDENT_ORDER_LIMITED, Severity.INFO, n) for n in notes)
