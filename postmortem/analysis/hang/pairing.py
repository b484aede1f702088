"""Which dumps are of one hung process, and which of two is earlier.

A dump is one instant: a warp at a barrier may be on its way through it. Two dumps of the
same process, seconds apart, tell a hang from a slow kernel (`motion.py` compares them).
Whether two dumps are of one process is read from their file
names: the driver's `CUDA_COREDUMP_FILE` patterns carry the host (``%h``) and process id
(``%p``), and the dump itself holds neither (its metadata row has a timestamp, flags and
versions only). The grids both dumps hold (same device, grid id, kernel entry and context)
support the claim; without a process in the names, they are the only evidence and the
comparison says so. Names that give different hosts or pids, or dumps with no grid in
common, are never compared.

Which dump is earlier: the metadata timestamps (r565 and later), else the ``%t`` of the
names, else the files' modification times; the first source that tells them apart wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from postmortem.dumpnames import NameFacts, parse_name
from postmortem.model import TimeSource
from postmortem.summary import KernelLaunch


@dataclass(frozen=True, slots=True)
class DumpIdentity:
    """What tells one dump's process and time, without reading its warps."""

    path: str
    name: NameFacts
    timestamp: int | None
    """The metadata row's timestamp (Unix seconds); None before r565."""
    mtime: float | None
    grids: frozenset[tuple[int, int | None, int | None, int | None]]
    """(device, grid id, kernel entry, context id) of every grid the dump holds."""


def dump_identity(
    path: str, timestamp: int | None, mtime: float | None, launches: Sequence[KernelLaunch]
) -> DumpIdentity:
    """The identity of the dump at `path` from its summary's metadata and launches."""
    grids = frozenset(
        (g.device_index, g.grid_id, g.function_entry, g.context_id)
        for g in (launch.grid for launch in launches)
    )
    return DumpIdentity(path, parse_name(path), timestamp or None, mtime, grids)


@dataclass(frozen=True, slots=True)
class SameProcess:
    """Whether two dumps are of one process, and on what evidence."""

    same: bool
    host: str | None
    pid: int | None
    evidence: tuple[str, ...]
    """What was used, each in a phrase."""
    why: str
    """The answer in a phrase: what made them one process, or what told them apart."""


def same_process(a: DumpIdentity, b: DumpIdentity) -> SameProcess:
    """Whether dumps `a` and `b` are of one process (see the module's doc)."""
    na, nb = a.name, b.name
    evidence: list[str] = []
    if na.pid is not None and nb.pid is not None:
        if na.pid != nb.pid or (na.host is not None and nb.host is not None and na.host != nb.host):
            return SameProcess(
                False, None, None, ("file names",),
                f"different processes: {_process(na)} and {_process(nb)} (file names)",
            )  # fmt: skip
        evidence.append(f"file names: {_process(na)}")
    common = a.grids & b.grids
    if not common:
        why = "no grid (device, grid id, kernel entry, context) is in both dumps"
        if evidence:
            why += ": another process with the same pid, or no kernel left running"
        return SameProcess(False, None, None, (*evidence, "grids"), why)
    ids = sorted({g[1] for g in common if g[1] is not None})
    grid_text = f"grid{'s' if len(ids) != 1 else ''} {', '.join(map(str, ids))}" if ids else ""
    evidence.append(f"{len(common)} grid{'s' if len(common) != 1 else ''} in both ({grid_text})")
    if na.pid is None or nb.pid is None:
        why = "grids and contexts in common (the file names do not say the process)"
        return SameProcess(True, None, None, tuple(evidence), why)
    why = f"{_process(na)} in both file names, and grids in common"
    return SameProcess(True, na.host, na.pid, tuple(evidence), why)


def _process(name: NameFacts) -> str:
    host = f"host {name.host}, " if name.host is not None else ""
    return f"{host}pid {name.pid}"


def order_pair(
    a: DumpIdentity, b: DumpIdentity
) -> tuple[DumpIdentity, DumpIdentity, float, TimeSource]:
    """(earlier, later, seconds between them, the source that ordered them): metadata
    timestamps, else the names' ``%t``, else modification times; the first that tells them
    apart, else the first both have (0 s, the order given)."""
    sources: list[tuple[TimeSource, float, float]] = []
    for source, x, y in (
        (TimeSource.METADATA, a.timestamp, b.timestamp),
        (TimeSource.NAME, a.name.time, b.name.time),
        (TimeSource.MTIME, a.mtime, b.mtime),
    ):
        if x is not None and y is not None:
            sources.append((source, float(x), float(y)))
    chosen = next((s for s in sources if s[1] != s[2]), sources[0] if sources else None)
    if chosen is None:
        return a, b, 0.0, TimeSource.MTIME
    source, x, y = chosen
    return (a, b, y - x, source) if x <= y else (b, a, x - y, source)


@dataclass(frozen=True, slots=True)
class NotCompared:
    """Two dumps that were not compared, and why."""

    dumps: tuple[str, str]
    why: str


def pair_by_process(
    dumps: Sequence[DumpIdentity],
) -> tuple[
    list[tuple[DumpIdentity, DumpIdentity, float, TimeSource, SameProcess]], list[NotCompared]
]:
    """The dumps grouped by process: for each process with two dumps or more, its earliest
    and latest (with the gap and what ordered them); for each other process, why its first
    dump is not compared with the first dump of the first process."""
    groups: list[list[tuple[DumpIdentity, SameProcess | None]]] = []
    for dump in dumps:
        for group in groups:
            verdict = same_process(group[0][0], dump)
            if verdict.same:
                group.append((dump, verdict))
                break
        else:
            groups.append([(dump, None)])
    pairs = []
    for group in groups:
        if len(group) < 2:
            continue
        members = [d for d, _ in group]
        first, last = members[0], members[0]
        for member in members[1:]:
            first = order_pair(first, member)[0]
            last = order_pair(last, member)[1]
        earlier, later, seconds, source = order_pair(first, last)
        pairs.append((earlier, later, seconds, source, same_process(earlier, later)))
    lead = groups[0][0][0] if groups else None
    others = [
        NotCompared((lead.path, group[0][0].path), same_process(lead, group[0][0]).why)
        for group in groups[1:]
        if lead is not None
    ]
    return pairs, others


def seconds_text(seconds: float) -> str:
    """A gap between dumps for people: ``4 s``, ``4.1 s``, ``12 s``."""
    if seconds >= 10:
        return f"{seconds:.0f} s"
    text = f"{seconds:.1f}".removesuffix(".0")
    return f"{text} s"
