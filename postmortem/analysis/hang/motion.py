"""Two dumps of one hung process, compared: the warps that did not move are the stuck ones.

A warp is the same warp in both dumps when its device, SM, warp slot, grid and block are.
It "did not move" when the PC of every lane (virtual and function-relative), its valid and
active lanes masks and, where both dumps hold them, its registers are all unchanged; any
change means it "moved". A warp in one dump only has exited ("gone") or was launched since
("new"). The lanes are read as three column gathers (`snapshot.py`), and registers only for
the warps that did not move (at most `MAX_REGISTER_WARPS`). Which dumps are of one process,
and which is earlier: `pairing.py`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from postmortem.analysis.hang.hang import StuckGroup
from postmortem.analysis.hang.pairing import DumpIdentity, NotCompared, SameProcess
from postmortem.analysis.hang.snapshot import (
    Registers,
    WarpKey,
    WarpSnapshot,
    changes,
    same_registers,
    warp_snapshots,
)
from postmortem.coredump import tables as t
from postmortem.coredump.reader import Coredump
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import Dim3, TimeSource

MAX_REGISTER_WARPS = 2048
"""Warps whose registers are compared, at most (64 Ki lanes); the rest by PCs and masks."""


class Motion(Enum):
    """What a warp did between two dumps."""

    STUCK = "did-not-move"
    """Same PCs, masks and (where both hold them) registers."""
    MOVED = "moved"
    GONE = "gone"
    """In the earlier dump only: it exited."""
    NEW = "new"
    """In the later dump only: launched since."""


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
    time_source: TimeSource
    process: SameProcess
    warps: tuple[WarpMotion, ...]
    """Every warp: stuck first, then moved, gone, new; each in key order."""
    grids: tuple[GridMotion, ...]
    groups: tuple[PcMotion, ...]
    """Stuck warps' PCs first (most warps first), then the others."""
    registers_compared: int
    """Warps whose registers were compared (both dumps hold them)."""
    notes: tuple[Finding, ...] = ()

    def count(self, motion: Motion) -> int:
        return sum(1 for w in self.warps if w.motion is motion)


@dataclass(frozen=True, slots=True)
class IncidentMotion:
    """The comparisons an incident's hang dumps allow."""

    compared: tuple[DumpComparison, ...]
    """One per process with two or more dumps: its earliest and latest dump."""
    not_compared: tuple[NotCompared, ...]
    """Dumps of other processes, each against the first dump."""


def compare_dumps(
    earlier: Coredump,
    later: Coredump,
    order: tuple[DumpIdentity, DumpIdentity, float, TimeSource],
    process: SameProcess,
    kernels: Mapping[tuple[int, int | None], str | None],
    hang_groups: Sequence[StuckGroup] = (),
) -> DumpComparison:
    """Compare the warps of two dumps of one process (see the module's doc).

    `kernels` names the kernel of each (device, grid id); `hang_groups` are the later
    dump's hang groups, whose instructions and source lines the PC summaries carry.
    Raises PostmortemError when a dump's tables cannot be followed.
    """
    before, after = warp_snapshots(earlier), warp_snapshots(later)
    registers = (
        (Registers(earlier, t.DEV_REGS), Registers(earlier, t.DEV_UREGS)),
        (Registers(later, t.DEV_REGS), Registers(later, t.DEV_UREGS)),
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
        changed = changes(then, now)
        checked = False
        if not changed and budget > 0:
            same = same_registers(*registers, then, now)
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
        _grids(warps, kernels), groups, compared,
        tuple(Finding(FindingCode.MOTION_LIMITED, Severity.INFO, n) for n in notes),
    )  # fmt: skip


def _key_of_motion(w: WarpMotion) -> WarpKey:
    return (w.device_index, w.sm_id, w.warp_id, w.grid_id, w.block_idx)


def _key_order(key: WarpKey) -> tuple[int, ...]:
    device, sm, warp, grid, block = key
    return (device, -1 if grid is None else grid, *(block or (-1, -1, -1)),
            -1 if sm is None else sm, -1 if warp is None else warp)  # fmt: skip


def _warp(
    snap: WarpSnapshot, motion: Motion, changed: tuple[str, ...] = (), checked: bool = False
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
