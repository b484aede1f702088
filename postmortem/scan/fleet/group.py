"""Dumps grouped by crash signature, with the facets of each group (hosts, pids, drivers, times).

Host, process, GPU and time are facets, never part of a key. The earliest dump of a group,
by metadata timestamp when the dumps have one (else by the name's %t, else mtime), is
marked: in a multi-GPU job it is usually the rank that faulted first.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from postmortem.analysis.fleet.signature import Signature
from postmortem.model import TimeSource
from postmortem.scan.build import builds_of
from postmortem.scan.fleet.known.model import Lifecycle
from postmortem.scan.fleet.owners import Ownership
from postmortem.scan.row import DumpRow

_SOURCE_RANK = {TimeSource.METADATA: 0, TimeSource.NAME: 1, TimeSource.MTIME: 2}


@dataclass(frozen=True, slots=True)
class Blame:
    """Hardware or code, and the counts that say so."""

    kind: str
    """`CODE`, `HARDWARE`, `TOO_FEW` or `UNCLEAR`."""
    reason: str
    """One line: the verdict in words, with its counts."""
    dumps: int
    """The faulting dumps it rests on."""
    gpus: int
    """The distinct GPUs among them."""
    hosts: int
    """The distinct hosts among them (a dump whose name gives none counts as one host)."""
    signatures: int
    """The distinct signatures among them."""
    sm: int | None = None
    """For a GPU judged by one SM: that SM."""


@dataclass(frozen=True, slots=True)
class History:
    """One signature across the scans of the same roots."""

    first_seen: float
    """Unix seconds: its earliest dump ever found under these roots."""
    last_seen: float
    total: int
    """Its dumps over every day recorded."""
    days: tuple[tuple[str, int], ...]
    """UTC days (``2026-11-20``) and the dumps of each, oldest first."""
    new: bool
    regressed: bool
    quiet_days: int | None
    """For a regressed signature: the days without a dump before it came back."""


@dataclass(frozen=True, slots=True)
class Group:
    """The dumps that share one signature."""

    signature: Signature
    """The signature (of the group's earliest dump; every member's key is the same)."""
    kernel: str | None
    """The kernel's full demangled name, from the earliest dump."""
    count: int
    first_seen: float
    """Unix seconds: the earliest member's time."""
    last_seen: float
    hosts: tuple[tuple[str, int], ...]
    """Host names from the file names and how many dumps each, most first."""
    pids: tuple[int, ...]
    driver_versions: tuple[str, ...]
    devices: tuple[str, ...]
    dumps: tuple[str, ...]
    """Member paths, earliest first."""
    reports: tuple[str | None, ...]
    """Each member's per-dump report, in the order of `dumps`."""
    earliest: str
    """The path of the earliest dump (first in `dumps`)."""
    earliest_source: str
    """What its time came from: "metadata", "name" or "mtime"."""
    instruction: str | None = None
    """The SASS instruction at the faulting PC, from the earliest dump that has one."""
    blame: Blame | None = None
    """Hardware or code (`postmortem.scan.fleet.hardware.judge_fleet`); None until judged."""
    ownership: Ownership | None = None
    """Who owns it (`scan --owners`); None without an owners file or a matching rule."""
    history: History | None = None
    """Its history across the scans of the same roots (`postmortem.scan.store.history`); None
    without a cache."""
    builds: int = 0
    """The distinct builds of the faulting module among its dumps (`postmortem.scan.build`)."""
    first_build: str | None = None
    """The build that crashed first: that of the earliest dump with a build key."""
    lifecycle: Lifecycle | None = None
    """Known, new or regressed against the repository's known-crashes file (`scan --known`);
    None without one."""
    runs: tuple[str, ...] = ()
    """The CI runs (and attempts) its dumps came from, when their folders say
    (`postmortem.scan.fleet.runs`)."""


@dataclass(frozen=True, slots=True)
class CoarseGroup:
    """Dumps sharing exception and kernel only: near-duplicates across exact signatures."""

    coarse_id: str
    exception: str
    kernel: str
    count: int
    signatures: tuple[str, ...]
    """The exact signature ids it spans, most populous first."""


def rows_by_signature(rows: Sequence[DumpRow]) -> dict[str, list[DumpRow]]:
    """The analyzed rows (error rows left out) by signature id, in the order given."""
    members: dict[str, list[DumpRow]] = defaultdict(list)
    for row in rows:
        if row.signature is not None and not row.failed:
            members[row.signature.id].append(row)
    return members


def group_rows(rows: Sequence[DumpRow]) -> tuple[Group, ...]:
    """The analyzed rows grouped by signature id, most populous first (ties: first seen)."""
    groups = [_group(sorted(found, key=_order)) for found in rows_by_signature(rows).values()]
    return tuple(sorted(groups, key=lambda g: (-g.count, g.first_seen, g.signature.id)))


def _order(row: DumpRow) -> tuple[int, float, str]:
    # metadata timestamps are the driver's own clock: they rank before names and mtimes
    return (_SOURCE_RANK.get(row.time_source, 3), row.time, row.path)


def _group(rows: list[DumpRow]) -> Group:
    first = rows[0]
    assert first.signature is not None
    times = [row.time for row in rows]
    by_time = sorted(rows, key=lambda row: (row.time, row.path))
    ordered = [first] + [row for row in by_time if row is not first]
    hosts = Counter(row.host for row in rows if row.host)
    builds, first_build = builds_of(rows)  # `rows` are earliest first (`_order`)
    return Group(
        signature=first.signature,
        kernel=first.kernel,
        count=len(rows),
        first_seen=min(times),
        last_seen=max(times),
        hosts=tuple(sorted(hosts.items(), key=lambda item: (-item[1], item[0]))),
        pids=tuple(sorted({row.pid for row in rows if row.pid is not None})),
        driver_versions=tuple(sorted({row.driver_version for row in rows if row.driver_version})),
        devices=tuple(sorted({name for row in rows for name in row.devices})),
        dumps=tuple(row.path for row in ordered),
        reports=tuple(row.report for row in ordered),
        earliest=first.path,
        earliest_source=first.time_source,
        instruction=next((row.instruction for row in ordered if row.instruction), None),
        builds=builds,
        first_build=first_build,
    )


def coarse_groups(groups: Sequence[Group]) -> tuple[CoarseGroup, ...]:
    """Groups merged by exception and kernel, only where that merges several signatures."""
    merged: dict[str, list[Group]] = defaultdict(list)
    for group in groups:
        merged[group.signature.coarse_id].append(group)
    result = [
        CoarseGroup(
            coarse_id=cid,
            exception=found[0].signature.exception,
            kernel=found[0].signature.kernel,
            count=sum(g.count for g in found),
            signatures=tuple(g.signature.id for g in found),
        )
        for cid, found in merged.items()
        if len(found) > 1
    ]
    return tuple(sorted(result, key=lambda c: (-c.count, c.coarse_id)))
