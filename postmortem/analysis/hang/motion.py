"""Two dumps of one hung process, compared: the warps that did not move are the stuck ones.

A dump is one instant: a warp at a barrier may be on its way through it. Two dumps of the
same process, seconds apart, tell a hang from a slow kernel, which is the comparison every
hang debugger makes by hand. Whether two dumps are of one process is read from their file
names: the driver's `CUDA_COREDUMP_FILE` patterns carry the host (``%h``) and process id
(``%p``), and the dump itself holds neither (its metadata row has a timestamp, flags and
versions only). The grids both dumps hold (same device, grid id, kernel entry and context)
support the claim; without a process in the names, they are the only evidence and the
comparison says so. Names that give different hosts or pids, or dumps with no grid in
common, are never compared.

Which dump is earlier: the metadata timestamps (r565 and later), else the ``%t`` of the
names, else the files' modification times; the first source that tells them apart wins.

A warp is the same warp in both dumps when its device, SM, warp slot, grid and block are.
It "did not move" when the PC of every lane (virtual and function-relative), its valid and
active lanes masks and, where both dumps hold them, its registers are all unchanged; any
change means it "moved". A warp in one dump only has exited ("gone") or was launched since
("new"). The lanes are read as three column gathers, as `postmortem.analysis.state` reads
them, and registers only for the warps that did not move (at most `MAX_REGISTER_WARPS`).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import PurePath
from typing import Any

import numpy as np

from postmortem.analysis.hang.hang import StuckGroup
from postmortem.coredump import tables as t
from postmortem.coredump.reader import Coredump
from postmortem.model import Dim3, Warp
from postmortem.summary import KernelLaunch

NAME_PATTERNS = (
    "core.cuda.%t.%p",
    "core_%h.%p.%t.nvcudmp",
    "core_%h.%p.%t",
    "core_%t_%h_%p.nvcudmp",
    "core.cuda.%h.%p",
    "%h.%p.%t.nvcudmp",
    "%h.%p.%t",
    "%h_%p_%t",
)
"""Names the driver writes (``CUDA_COREDUMP_FILE`` as `postmortem capture` sets it, cuda-gdb's
and the driver API's defaults, SGLang's crash folder), first match wins; a ``.gz`` suffix is
ignored. The same patterns as `postmortem.scan.names`, which the analysis may not import."""
MAX_REGISTER_WARPS = 2048
"""Warps whose registers are compared, at most (64 Ki lanes); the rest by PCs and masks."""
METADATA = "metadata"
NAME = "name"
MTIME = "mtime"

_FIELDS = {"h": r"(?P<host>[^/]+?)", "p": r"(?P<pid>\d{1,10})", "t": r"(?P<time>\d{10})"}
_NO_LANE_ID = 0xFFFFFFFF
_ALL = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class DumpName:
    """What a dump's file name says about the process that wrote it."""

    host: str | None
    pid: int | None
    time: int | None
    """Unix seconds from ``%t``."""
    pattern: str | None
    """The pattern that matched; None when none did."""


@lru_cache(maxsize=32)
def _compiled(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"%([htp])", pattern)
    out = [re.escape(parts[0])]
    for spec, text in zip(parts[1::2], parts[2::2], strict=True):
        out += [_FIELDS[spec], re.escape(text)]
    return re.compile("".join(out))


def parse_dump_name(path: str) -> DumpName:
    """Host, pid and time from the file name of `path` (a path or URL), by `NAME_PATTERNS`."""
    name = PurePath(path.rsplit("/", 1)[-1]).name.removesuffix(".gz")
    for pattern in NAME_PATTERNS:
        match = _compiled(pattern).fullmatch(name)
        if match is None:
            continue
        fields = match.groupdict()
        pid, time = fields.get("pid"), fields.get("time")
        return DumpName(
            fields.get("host"),
            None if pid is None else int(pid),
            None if time is None else int(time),
            pattern,
        )
    return DumpName(None, None, None, None)


@dataclass(frozen=True, slots=True)
class DumpIdentity:
    """What tells one dump's process and time, without reading its warps."""

    path: str
    name: DumpName
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
    return DumpIdentity(path, parse_dump_name(path), timestamp or None, mtime, grids)


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


def _process(name: DumpName) -> str:
    host = f"host {name.host}, " if name.host is not None else ""
    return f"{host}pid {name.pid}"


def order_pair(a: DumpIdentity, b: DumpIdentity) -> tuple[DumpIdentity, DumpIdentity, float, str]:
    """(earlier, later, seconds between them, the source that ordered them): metadata
    timestamps, else the names' ``%t``, else modification times; the first that tells them
    apart, else the first both have (0 s, the order given)."""
    sources: list[tuple[str, float, float]] = []
    for source, x, y in (
        (METADATA, a.timestamp, b.timestamp),
        (NAME, a.name.time, b.name.time),
        (MTIME, a.mtime, b.mtime),
    ):
        if x is not None and y is not None:
            sources.append((source, float(x), float(y)))
    chosen = next((s for s in sources if s[1] != s[2]), sources[0] if sources else None)
    if chosen is None:
        return a, b, 0.0, MTIME
    source, x, y = chosen
    return (a, b, y - x, source) if x <= y else (b, a, x - y, source)


class Motion(Enum):
    """What a warp did between two dumps."""

    STUCK = "did-not-move"
    """Same PCs, masks and (where both hold them) registers."""
    MOVED = "moved"
    GONE = "gone"
    """In the earlier dump only: it exited."""
    NEW = "new"
    """In the later dump only: launched since."""


WarpKey = tuple[int, int | None, int | None, int | None, Dim3 | None]
"""(device, SM, warp id, grid id, block index)."""


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """One warp of one dump: its lanes (id, virtual PC, function-relative PC) as bytes."""

    warp: Warp
    lanes: bytes
    offsets: Any
    """The lanes' function-relative PCs (a numpy view)."""
    table: int
    """The warp's lane table."""
    rows: Any
    """The lanes' rows in it, in lane order (a numpy view)."""


@dataclass(frozen=True, slots=True)
class WarpMotion:
    """One warp, compared."""

    device_index: int
    sm_id: int | None
    warp_id: int | None
    grid_id: int | None
    block_idx: Dim3 | None
    motion: Motion
    offsets: tuple[tuple[int, int], ...]
    """(function-relative PC, lanes there) in the later dump (the earlier for a gone one),
    most lanes first."""
    changed: tuple[str, ...] = ()
    """What changed, for a warp that moved: "PC", "valid mask", "active mask", "registers"."""
    registers_compared: bool = False

    @property
    def offset(self) -> int | None:
        """Where most of its lanes are."""
        return self.offsets[0][0] if self.offsets else None


@dataclass(frozen=True, slots=True)
class GridMotion:
    """One grid's warps, compared."""

    device_index: int
    grid_id: int | None
    kernel: str | None
    counts: Mapping[Motion, int]
    stuck_blocks: tuple[Dim3, ...]
    moved_blocks: tuple[Dim3, ...]


@dataclass(frozen=True, slots=True)
class PcMotion:
    """The warps at one PC of one grid in the later dump (gone ones: in the earlier)."""

    device_index: int
    grid_id: int | None
    offset: int
    counts: Mapping[Motion, int]
    blocks: tuple[Dim3, ...]
    """Blocks with a warp here that did not move (else with any warp here)."""
    group: StuckGroup | None
    """The later dump's hang group at this PC: its instruction and source line."""


@dataclass(frozen=True, slots=True)
class DumpComparison:
    """Two dumps of one process, compared warp by warp."""

    earlier: str
    later: str
    seconds: float
    time_source: str
    process: SameProcess
    warps: tuple[WarpMotion, ...]
    """Every warp: stuck first, then moved, gone, new; each in key order."""
    grids: tuple[GridMotion, ...]
    groups: tuple[PcMotion, ...]
    """Stuck warps' PCs first (most warps first), then the others."""
    registers_compared: int
    """Warps whose registers were compared (both dumps hold them)."""
    notes: tuple[str, ...] = ()

    def count(self, motion: Motion) -> int:
        return sum(1 for w in self.warps if w.motion is motion)


def compare_dumps(
    earlier: Coredump,
    later: Coredump,
    order: tuple[DumpIdentity, DumpIdentity, float, str],
    process: SameProcess,
    kernels: Mapping[tuple[int, int | None], str | None],
    hang_groups: Sequence[StuckGroup] = (),
) -> DumpComparison:
    """Compare the warps of two dumps of one process (see the module's doc).

    `kernels` names the kernel of each (device, grid id); `hang_groups` are the later
    dump's hang groups, whose instructions and source lines the PC summaries carry.
    Raises PostmortemError when a dump's tables cannot be followed.
    """
    before, after = _snapshots(earlier), _snapshots(later)
    registers = (
        (_Registers(earlier, t.DEV_REGS), _Registers(earlier, t.DEV_UREGS)),
        (_Registers(later, t.DEV_REGS), _Registers(later, t.DEV_UREGS)),
    )
    notes: list[str] = []
    warps: list[WarpMotion] = []
    budget = MAX_REGISTER_WARPS
    compared = 0
    for key, now in after.items():
        then = before.get(key)
        if then is None:
            warps.append(_warp(now, Motion.NEW))
            continue
        changed = _changes(then, now)
        checked = False
        if not changed and budget > 0:
            same = _same_registers(*registers, then, now)
            if same is not None:
                budget -= 1
                compared += 1
                checked = True
                changed = () if same else ("registers",)
        warps.append(_warp(now, Motion.MOVED if changed else Motion.STUCK, changed, checked))
    warps += [_warp(then, Motion.GONE) for key, then in before.items() if key not in after]
    unchecked = sum(1 for w in warps if w.motion is Motion.STUCK and not w.registers_compared)
    if unchecked:
        notes.append(
            f"{unchecked} warp{'s' if unchecked != 1 else ''} judged by PCs and masks only: "
            + ("a dump holds no registers for them" if budget > 0
               else f"registers are compared for {MAX_REGISTER_WARPS} warps at most")
        )  # fmt: skip
    order_of = {m: i for i, m in enumerate(Motion)}
    warps.sort(key=lambda w: (order_of[w.motion], _key_order(_key_of_motion(w))))
    groups = _groups(warps, hang_groups)
    # A warp spinning on a flag moves around its loop and is stuck all the same.
    spinning = sum(
        g.counts[Motion.MOVED] for g in groups if g.group is not None and g.group.in_polling_loop
    )
    if spinning:
        notes.append(
            f"{spinning} warp{'s' if spinning != 1 else ''} that moved "
            f"{'are' if spinning != 1 else 'is'} in a short loop that reads memory in the "
            "later dump: spinning on a flag nobody writes is as stuck as waiting"
        )
    return DumpComparison(
        order[0].path, order[1].path, order[2], order[3], process, tuple(warps),
        _grids(warps, kernels), groups, compared, tuple(notes),
    )  # fmt: skip


def _snapshots(core: Coredump) -> dict[Any, _Snapshot]:
    """Every warp of `core` with lanes, by key (a repeated key gets an occurrence count).

    Lane rows count when their warp's valid-lanes mask holds their lane id (as in
    `postmortem.analysis.state`); they are filtered and sorted in bulk, and only the warps
    become Python objects.
    """
    index = core.tables
    pcs = index.column_arrays(t.LN_TABLE, "phys_pc")
    if not len(pcs.section):
        return {}
    # Columns over the same tables as the PCs, row for row.
    virtual = index.column_arrays(t.LN_TABLE, "virtual_pc", default=0)
    ids = index.column_arrays(t.LN_TABLE, "ln", default=_NO_LANE_ID)
    keep = np.isin(virtual.section, pcs.section)
    lane_ids = np.asarray(ids.values, dtype=np.uint64)[keep]
    sections = np.asarray(pcs.section, dtype=np.int64)
    order = np.lexsort((lane_ids, sections))
    lane_ids, sections = lane_ids[order], sections[order]
    rows = np.asarray(pcs.row, dtype=np.int64)[order]
    records = np.stack(
        [lane_ids, np.asarray(virtual.values, dtype=np.uint64)[keep][order],
         np.asarray(pcs.values, dtype=np.uint64)[order]],
        axis=1,
    )  # fmt: skip
    by_ref = {w.ref: w for device in core.devices for w in core.iter_warps(device)}
    all_tables, counts = np.unique(sections, return_counts=True)
    warps = [by_ref.get(index.parent_of(table)) for table in all_tables.tolist()]
    owner = np.repeat(np.arange(len(all_tables)), counts)
    masks = np.array([0 if w is None else _mask(w.valid_lanes_mask) for w in warps],
                     dtype=np.uint64)[owner]  # fmt: skip
    placed = np.array([w is not None for w in warps], dtype=bool)[owner]
    unknown = lane_ids == _NO_LANE_ID
    held = unknown | ((lane_ids < 32) & ((masks >> np.minimum(lane_ids, 63)) & 1 == 1))
    held &= placed  # a lane table whose warp row was not found is left out
    records, sections, rows = records[held], sections[held], rows[held]
    tables, starts, counts = np.unique(sections, return_index=True, return_counts=True)
    warp_of = dict(zip(all_tables.tolist(), warps, strict=True))
    found: dict[Any, _Snapshot] = {}
    seen: Counter[WarpKey] = Counter()
    for table, start, count in zip(tables.tolist(), starts.tolist(), counts.tolist(), strict=True):
        warp = warp_of[table]
        assert warp is not None  # its lanes were kept
        key = _key(warp)
        seen[key] += 1
        end = start + count
        found[(key, seen[key])] = _Snapshot(
            warp, records[start:end].tobytes(), records[start:end, 2], table, rows[start:end]
        )
    return found


def _mask(mask: int | None) -> int:
    return _ALL if mask is None else mask


def _key(warp: Warp) -> WarpKey:
    return (warp.device_index, warp.sm_id, warp.warp_id, warp.grid_id, warp.block_idx)


def _key_of_motion(w: WarpMotion) -> WarpKey:
    return (w.device_index, w.sm_id, w.warp_id, w.grid_id, w.block_idx)


def _key_order(key: WarpKey) -> tuple[int, ...]:
    device, sm, warp, grid, block = key
    return (device, -1 if grid is None else grid, *(block or (-1, -1, -1)),
            -1 if sm is None else sm, -1 if warp is None else warp)  # fmt: skip


def _changes(then: _Snapshot, now: _Snapshot) -> tuple[str, ...]:
    changed = []
    if then.lanes != now.lanes:
        changed.append("PC")
    if then.warp.valid_lanes_mask != now.warp.valid_lanes_mask:
        changed.append("valid mask")
    if then.warp.active_lanes_mask != now.warp.active_lanes_mask:
        changed.append("active mask")
    return tuple(changed)


class _Registers:
    """Where the register sections of a dump's lanes (or uniform ones of its warps) are:
    one sorted key per section, looked up for many rows at once."""

    def __init__(self, core: Coredump, section_type: int) -> None:
        self._core = core
        s = core.tables.sections
        members = np.asarray(core.tables.attached(section_type), dtype=np.int64)
        links = np.asarray(s.link, dtype=np.uint64)[members]
        infos = np.asarray(s.info, dtype=np.uint64)[members]
        keys = links << np.uint64(32) | infos
        order = np.argsort(keys, kind="stable")
        self._keys, self._members = keys[order], members[order]

    def sections(self, table: int, rows: Any) -> list[int] | None:
        """The register section of each row of `table`; None when a row has none."""
        if not len(self._keys):
            return None
        keys = np.uint64(table) << np.uint64(32) | np.asarray(rows, dtype=np.uint64)
        at = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
        if not bool(np.all(self._keys[at] == keys)):
            return None
        found: list[int] = self._members[at].tolist()
        return found

    def data(self, section: int) -> bytes:
        return self._core.tables.data(section)


def _same_registers(
    earlier: tuple[_Registers, _Registers], later: tuple[_Registers, _Registers],
    then: _Snapshot, now: _Snapshot,
) -> bool | None:  # fmt: skip
    """Whether every lane's registers (and the warp's uniform ones, where held) are equal;
    None when either dump holds no registers for this warp's lanes."""
    pairs = []
    a = earlier[0].sections(then.table, then.rows)
    b = later[0].sections(now.table, now.rows)
    if a is None or b is None:
        return None
    pairs.append((a, b))
    ua = earlier[1].sections(then.warp.ref.section, [then.warp.ref.row])
    ub = later[1].sections(now.warp.ref.section, [now.warp.ref.row])
    if (ua is None) != (ub is None):
        return None
    if ua is not None and ub is not None:  # none before r400: the lanes' say it all
        pairs.append((ua, ub))
    return all(
        earlier[0].data(x) == later[0].data(y)
        for xs, ys in pairs
        for x, y in zip(xs, ys, strict=True)
    )


def _warp(
    snap: _Snapshot, motion: Motion, changed: tuple[str, ...] = (), checked: bool = False
) -> WarpMotion:
    w = snap.warp
    at = Counter(int(offset) for offset in snap.offsets.tolist())
    offsets = tuple(sorted(at.items(), key=lambda item: (-item[1], item[0])))
    return WarpMotion(
        w.device_index, w.sm_id, w.warp_id, w.grid_id, w.block_idx, motion, offsets,
        changed, checked,
    )  # fmt: skip


def _blocks(warps: Sequence[WarpMotion]) -> tuple[Dim3, ...]:
    return tuple(sorted({w.block_idx for w in warps if w.block_idx is not None}))


def _grids(
    warps: Sequence[WarpMotion], kernels: Mapping[tuple[int, int | None], str | None]
) -> tuple[GridMotion, ...]:
    by_grid: dict[tuple[int, int | None], list[WarpMotion]] = defaultdict(list)
    for w in warps:
        by_grid[(w.device_index, w.grid_id)].append(w)
    return tuple(
        GridMotion(
            device, grid, kernels.get((device, grid)),
            {m: sum(1 for w in members if w.motion is m) for m in Motion},
            _blocks([w for w in members if w.motion is Motion.STUCK]),
            _blocks([w for w in members if w.motion is Motion.MOVED]),
        )
        for (device, grid), members in sorted(
            by_grid.items(), key=lambda item: (item[0][0], -1 if item[0][1] is None else item[0][1])
        )
    )  # fmt: skip


def _groups(warps: Sequence[WarpMotion], hang: Sequence[StuckGroup]) -> tuple[PcMotion, ...]:
    by_pc: dict[tuple[int, int | None, int], list[WarpMotion]] = defaultdict(list)
    for w in warps:
        if w.offset is not None:
            by_pc[(w.device_index, w.grid_id, w.offset)].append(w)
    found = {(g.device_index, g.grid_id, g.offset): g for g in hang}
    groups = []
    for (device, grid, offset), members in by_pc.items():
        stuck = [w for w in members if w.motion is Motion.STUCK]
        counts = {m: sum(1 for w in members if w.motion is m) for m in Motion}
        group = found.get((device, grid, offset)) if grid is not None else None
        groups.append(PcMotion(device, grid, offset, counts, _blocks(stuck or members), group))
    groups.sort(
        key=lambda g: (-g.counts[Motion.STUCK], -sum(g.counts.values()), g.device_index,
                       -1 if g.grid_id is None else g.grid_id, g.offset)
    )  # fmt: skip
    return tuple(groups)


def seconds_text(seconds: float) -> str:
    """A gap between dumps for people: ``4 s``, ``4.1 s``, ``12 s``."""
    if seconds >= 10:
        return f"{seconds:.0f} s"
    text = f"{seconds:.1f}".removesuffix(".0")
    return f"{text} s"


@dataclass(frozen=True, slots=True)
class NotCompared:
    """Two dumps that were not compared, and why."""

    dumps: tuple[str, str]
    why: str


@dataclass(frozen=True, slots=True)
class IncidentMotion:
    """The comparisons an incident's hang dumps allow."""

    compared: tuple[DumpComparison, ...]
    """One per process with two or more dumps: its earliest and latest dump."""
    not_compared: tuple[NotCompared, ...]
    """Dumps of other processes, each against the first dump."""


def pair_by_process(
    dumps: Sequence[DumpIdentity],
) -> tuple[list[tuple[DumpIdentity, DumpIdentity, float, str, SameProcess]], list[NotCompared]]:
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
