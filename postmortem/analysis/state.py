"""Where every warp was: a PC histogram per kernel, and which warps had diverged.

The lanes' PCs and exception codes are read as two column gathers over all lane tables;
each lane table is one warp, mapped to its block and grid through the warp and CTA rows
once per table. A 270,000-lane dump is summarized without building an object per lane.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from postmortem.codemap import CodeMap
from postmortem.coredump import tables as t
from postmortem.coredump.reader import Coredump
from postmortem.coredump.rows import make_cta, make_sm, make_warp
from postmortem.cubin.inspect import Function
from postmortem.cubin.sass import INSTRUCTION_BYTES
from postmortem.model import CTA, SM, CodeLocation, Dim3, Grid, Lane, RowRef, Warp


@dataclass(frozen=True, slots=True)
class WarpPcs:
    """One warp and the function-relative PCs of its lanes."""

    device_index: int
    grid_id: int | None
    """None (like the ids below) when the dump's rows are too short to say."""
    block_idx: Dim3 | None
    sm_id: int | None
    warp_id: int | None
    lanes_at: tuple[tuple[int, int], ...]
    """(PC offset, lanes there), most populous first."""
    faulting_at: tuple[tuple[int, int], ...]
    """(PC offset, lanes there with an exception)."""
    barrier_scope: int | None = None
    """The warp row's barrierScope (r590+): 0 none, 1 warp, 2 warp group, 3 block,
    4 cluster, 5 kernel; None when the row does not hold it."""
    barrier_info: str | None = None
    """The warp row's additionalBarrierInfo text (r590+), when it holds one."""

    @property
    def diverged(self) -> bool:
        return len(self.lanes_at) > 1


@dataclass(frozen=True, slots=True)
class PcGroup:
    """The warps and lanes of one kernel sitting at one PC."""

    offset: int
    """Function-relative PC of the lanes (the lane rows' `physPC`)."""
    warps: int
    """Warps with at least one lane here."""
    lanes: int
    faulting_lanes: int
    """Lanes here with a non-zero exception."""
    blocks: int
    """Blocks with at least one lane here."""


@dataclass(frozen=True, slots=True)
class KernelState:
    """One grid's warps: how many, where their lanes were, how many had diverged."""

    device_index: int
    grid_id: int | None
    """None when the dump's CTA rows are too short to name the grid."""
    kernel: str | None
    """Mangled name of the kernel the grid runs, when its entry lies in a loaded image."""
    warps: int
    lanes: int
    pcs: tuple[PcGroup, ...]
    """Most populous first."""
    divergent_warps: int
    """Warps whose lanes were at more than one PC."""


def warp_pcs(core: Coredump) -> tuple[WarpPcs, ...]:
    """Every warp of the dump with the PCs of its lanes, in table order.

    A lane row counts when its warp's valid-lanes mask holds its lane id; rows too short
    to hold a PC are left out. The lanes are filtered and counted in bulk: a full H100 dump
    has 270,000 of them, and only the 8,000 warps become Python objects.
    """
    pcs = core.tables.column_arrays(t.LN_TABLE, "phys_pc")
    if not len(pcs.section):
        return ()
    # Columns over the same tables as the PCs, row for row (0 where a stride lacks them).
    exceptions = core.tables.column_arrays(t.LN_TABLE, "exception", default=0)
    lane_ids = core.tables.column_arrays(t.LN_TABLE, "ln", default=_NO_LANE_ID)
    keep = np.isin(exceptions.section, pcs.section)
    tables, starts, counts = np.unique(pcs.section, return_index=True, return_counts=True)
    codes_all, ids_all = exceptions.values[keep], lane_ids.values[keep]
    parents = _Parents(core)
    warps = [parents.warp(table) for table in tables.tolist()]
    # Each lane row's warp (by table), and whether the warp's valid-lanes mask holds it.
    owner = np.repeat(np.arange(len(tables)), counts)
    masks = np.array([_ALL if w.valid_lanes_mask is None else w.valid_lanes_mask for w in warps],
                     dtype=np.uint64)[owner]  # fmt: skip
    ids = ids_all.astype(np.uint64)
    unknown = ids == _NO_LANE_ID
    held = (masks >> np.minimum(ids, 63)) & 1 == 1
    counted = unknown | ((ids < 32) & held)
    offsets = pcs.values.astype(np.uint64)
    lanes = _per_warp(owner[counted], offsets[counted])
    faulting = _per_warp(owner[counted & (codes_all != 0)], offsets[counted & (codes_all != 0)])
    return tuple(
        _warp_pcs(warp, lanes[index], faulting.get(index, Counter()))
        for index, warp in enumerate(warps)
        if index in lanes
    )


# A lane id no row holds (ln is a u32 < 32): stands for "the row is too short to say".
_NO_LANE_ID = 0xFFFFFFFF
_ALL = 0xFFFFFFFFFFFFFFFF  # a warp whose row gives no mask keeps every lane


def _per_warp(
    owner: np.ndarray[Any, Any], offsets: np.ndarray[Any, Any]
) -> dict[int, Counter[int]]:
    """(warp index → Counter of PC offsets) for rows given as parallel arrays."""
    found: dict[int, Counter[int]] = {}
    if not len(owner):
        return found
    if int(offsets.max()) < 1 << 32:  # one 64-bit key a row sorts far faster than pairs
        keys, counts = np.unique(owner.astype(np.uint64) << 32 | offsets, return_counts=True)
        indices, values = (keys >> 32).tolist(), (keys & 0xFFFFFFFF).tolist()
    else:
        pairs, counts = np.unique(np.stack([owner.astype(np.uint64), offsets]), axis=1,
                                  return_counts=True)  # fmt: skip
        indices, values = pairs[0].tolist(), pairs[1].tolist()
    for index, offset, count in zip(indices, values, counts.tolist(), strict=True):
        found.setdefault(int(index), Counter())[int(offset)] = int(count)
    return found


class _Parents:
    """A lane table's warp, made once per SM and CTA row (a warp table's rows share them)."""

    def __init__(self, core: Coredump) -> None:
        self._core = core
        self._sms: dict[RowRef, SM] = {}
        self._ctas: dict[RowRef, CTA] = {}

    def warp(self, lane_table: int) -> Warp:
        index = self._core.tables
        ref = index.parent_of(lane_table)
        cta_ref = index.parent_of(ref.section)
        cta = self._ctas.get(cta_ref)
        if cta is None:
            sm_ref = index.parent_of(cta_ref.section)
            sm = self._sms.get(sm_ref)
            if sm is None:
                device = index.parent_of(sm_ref.section)
                row = index.rows(sm_ref.section, t.SM_TABLE)[sm_ref.row]
                sm = self._sms[sm_ref] = make_sm(row, device.row, sm_ref, self._core.string)
            row = index.rows(cta_ref.section, t.CTA_TABLE)[cta_ref.row]
            cta = self._ctas[cta_ref] = make_cta(row, sm, cta_ref)
        return make_warp(index.rows(ref.section, t.WP_TABLE)[ref.row], cta, ref, self._core.string)


def _warp_pcs(warp: Warp, lanes: Counter[int], faulting: Counter[int]) -> WarpPcs:
    return WarpPcs(
        device_index=warp.device_index,
        grid_id=warp.grid_id,
        block_idx=warp.block_idx,
        sm_id=warp.sm_id,
        warp_id=warp.warp_id,
        lanes_at=tuple(sorted(lanes.items(), key=lambda item: (-item[1], item[0]))),
        faulting_at=tuple(sorted(faulting.items())),
        barrier_scope=warp.barrier_scope,
        barrier_info=warp.additional_barrier_info,
    )


def gpu_state(
    core: Coredump, code_map: CodeMap | None = None, warps: Sequence[WarpPcs] | None = None
) -> tuple[KernelState, ...]:
    """The PC histogram of every grid that has warps in the dump."""
    code_map = code_map or CodeMap(core)
    by_grid: dict[tuple[int, int | None], list[WarpPcs]] = defaultdict(list)
    for warp in warp_pcs(core) if warps is None else warps:
        by_grid[(warp.device_index, warp.grid_id)].append(warp)
    return tuple(
        _kernel_state(grid, members, kernel_of(core, code_map, *grid))
        for grid, members in sorted(by_grid.items(), key=lambda item: _grid_order(item[0]))
    )


def _grid_order(grid: tuple[int, int | None]) -> tuple[int, int]:
    return grid[0], -1 if grid[1] is None else grid[1]


def pc_groups(warps: Sequence[WarpPcs]) -> tuple[PcGroup, ...]:
    """The warps' lanes counted per PC (with warps and blocks there), most lanes first."""
    lanes: Counter[int] = Counter()
    warps_at: Counter[int] = Counter()
    faulting: Counter[int] = Counter()
    blocks_at: dict[int, set[Dim3 | None]] = defaultdict(set)
    for warp in warps:
        for offset, count in warp.lanes_at:
            lanes[offset] += count
            warps_at[offset] += 1
            blocks_at[offset].add(warp.block_idx)
        faulting.update(dict(warp.faulting_at))
    return tuple(
        sorted(
            (PcGroup(o, warps_at[o], lanes[o], faulting[o], len(blocks_at[o])) for o in lanes),
            key=lambda g: (-g.lanes, g.offset),
        )
    )


def _kernel_state(
    grid: tuple[int, int | None], warps: list[WarpPcs], kernel: str | None
) -> KernelState:
    groups = pc_groups(warps)
    return KernelState(
        grid[0], grid[1], kernel, len(warps), sum(g.lanes for g in groups), groups,
        sum(1 for w in warps if w.diverged),
    )  # fmt: skip


def kernel_code(
    core: Coredump, code_map: CodeMap, device_index: int, grid_id: int | None
) -> tuple[CodeLocation, Function] | None:
    """Where the kernel a grid runs lives: its code section and its function, if loaded."""
    grid = None if grid_id is None else core.find_grid(device_index, grid_id)
    return None if grid is None else grid_code(code_map, grid)


def grid_code(code_map: CodeMap, grid: Grid) -> tuple[CodeLocation, Function] | None:
    """Where the kernel of `grid` lives: its code section and its function, if loaded."""
    entry = grid.function_entry
    location = code_map.locate(grid.device_index, entry)
    summary = code_map.summary(location.module) if location else None
    function = summary.find_function(entry) if summary and entry is not None else None
    return None if location is None or function is None else (location, function)


def kernel_of(
    core: Coredump, code_map: CodeMap, device_index: int, grid_id: int | None
) -> str | None:
    """The mangled name of the kernel a grid runs, when its entry lies in a loaded image."""
    code = kernel_code(core, code_map, device_index, grid_id)
    return code[1].name if code else None


FAULT_PC_STEPS = (0, INSTRUCTION_BYTES)
"""How far past the error PC a faulting lane's PC may be while nothing has run since: the
driver reports a memory fault after the warp issued the instruction."""


def still_at_fault(lane: Lane, error_pc: int | None) -> bool:
    """The lane is where the fault left it, so its registers and call stack are the fault's.

    The driver reports a memory fault after the warp issued the instruction: on an H100
    (driver 580) the faulting lanes' PC is the next instruction (fixtures/real/oob_store_real),
    with nothing executed since. A lane further on may have overwritten them: in
    fixtures/real/calls_real the lanes had returned from the faulting function to `EXIT`.
    """
    if error_pc is None or lane.virtual_pc is None:
        return True
    return lane.virtual_pc - error_pc in FAULT_PC_STEPS
