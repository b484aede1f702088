"""The census of faults: identical fault sites (same kernel, same offset) merged into one row
with how many lanes, warps, CTAs, SMs and devices reported them, and their coordinates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from postmortem.analysis.fault.counts import FaultCounts, count_faults
from postmortem.analysis.fault.fault import FaultSite
from postmortem.model import Dim3, Fault


@dataclass(frozen=True, slots=True)
class CoordinateRange:
    """The smallest box holding a set of 3-D coordinates."""

    low: Dim3
    high: Dim3


@dataclass(frozen=True, slots=True)
class CensusRow:
    """One fault site, possibly on several devices."""

    kernel: str | None
    """The mangled name of the function holding the PC; None when no image holds it."""
    offset: int | None
    """The PC's offset in its code section."""
    exceptions: tuple[int, ...]
    faults: tuple[Fault, ...]
    counts: FaultCounts
    blocks: CoordinateRange | None
    threads: CoordinateRange | None
    sms_seen: tuple[tuple[int, int], ...]
    """(device, SM) of every SM that reported the fault."""


def fault_census(sites: Sequence[FaultSite]) -> tuple[CensusRow, ...]:
    """One row per (kernel, offset), most lanes first."""
    groups: dict[tuple[str | None, int | None], list[FaultSite]] = {}
    for site in sites:
        key = (site.function.name if site.function else None, site.offset)
        if key == (None, None):
            key = (None, site.error_pc)  # unlocated PCs stay apart
        groups.setdefault(key, []).append(site)
    rows = [_row(kernel, offset, members) for (kernel, offset), members in groups.items()]
    return tuple(sorted(rows, key=lambda row: (-row.counts.lanes, -len(row.faults))))


def _row(kernel: str | None, offset: int | None, sites: list[FaultSite]) -> CensusRow:
    # A row of one site (the usual case) takes the site's own count.
    faults = [f for site in sites for f in site.faults]
    return CensusRow(
        kernel, offset,
        tuple(sorted({f.exception for f in faults if f.exception is not None})),
        tuple(faults),
        sites[0].counts if len(sites) == 1 else count_faults(faults),
        _range([f.block_idx for f in faults if f.block_idx is not None]),
        _range([f.thread_idx for f in faults if f.thread_idx is not None]),
        tuple(sorted({(f.device_index, f.sm_id) for f in faults if f.sm_id is not None})),
    )  # fmt: skip


def _range(points: list[Dim3]) -> CoordinateRange | None:
    if not points:
        return None
    low = (min(p[0] for p in points), min(p[1] for p in points), min(p[2] for p in points))
    high = (max(p[0] for p in points), max(p[1] for p in points), max(p[2] for p in points))
    return CoordinateRange(low, high)
