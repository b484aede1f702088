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
from postmortem.cubin.inspect import Function
from postmortem.cubin.sass import INSTRUCTION_BYTES
from postmortem.model import CodeLocation, Dim3, Grid, Lane


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
    to hold a PC are left out. Lanes, warps, blocks and SMs are read as column gathers and
    counted in bulk: a full H100 dump has 270,000 lanes, and only its 8,000 warps become
    Python objects, with no row decoded one by one.
    """
    pcs = core.tables.column_arrays(t.LN_TABLE, "phys_pc")
    if not len(pcs.section):
        return ()
    # Columns over the same tables as the PCs, row for row (0 where a stride lacks them).
    exceptions = core.tables.column_arrays(t.LN_TABLE, "exception", default=0)
    lane_ids = core.tables.column_arrays(t.LN_TABLE, "ln", default=_NO_LANE_ID)
    keep = np.isin(exceptions.section, pcs.section)
    tables, counts = np.unique(pcs.section, return_counts=True)
    codes_all, ids_all = exceptions.values[keep], lane_ids.values[keep]
    warps = _WarpRows(core, tables)
    # Each lane row's warp (by table), and whether the warp's valid-lanes mask holds it.
    owner = np.repeat(np.arange(len(tables)), counts)
    masks = warps.masks[owner]
    ids = ids_all.astype(np.uint64)
    unknown = ids == _NO_LANE_ID
    held = (masks >> np.minimum(ids, 63)) & 1 == 1
    counted = unknown | ((ids < 32) & held)
    offsets = pcs.values.astype(np.uint64)
    faults = counted & (codes_all != 0)
    lanes = _Runs(owner[counted], offsets[counted], len(tables), by_count=True)
    faulting = _Runs(owner[faults], offsets[faults], len(tables), by_count=False)
    return tuple(
        warps.warp_pcs(number, lanes.of(number), faulting.of(number))
        for number in range(len(tables))
        if lanes.has(number)
    )


# A lane id no row holds (ln is a u32 < 32): stands for "the row is too short to say".
_NO_LANE_ID = 0xFFFFFFFF
_ALL = 0xFFFFFFFFFFFFFFFF  # a warp whose row gives no mask keeps every lane

Array = np.ndarray[Any, Any]


class _Runs:
    """Rows given as parallel arrays (warp number, PC offset) counted per (warp, offset):
    each warp's (offset, count) pairs, most populous first (`by_count`) or by offset."""

    def __init__(self, owner: Array, offsets: Array, warps: int, by_count: bool) -> None:
        if len(owner) and int(offsets.max()) < 1 << 32:  # one 64-bit key sorts far faster
            keys, counts = np.unique(owner.astype(np.uint64) << 32 | offsets, return_counts=True)
            owners, values = keys >> 32, keys & 0xFFFFFFFF
        else:
            order = np.lexsort((offsets, owner))
            owners, values = owner[order].astype(np.uint64), offsets[order]
            first = np.ones(len(owners), dtype=bool)
            first[1:] = (owners[1:] != owners[:-1]) | (values[1:] != values[:-1])
            starts = np.flatnonzero(first)
            counts = np.diff(np.append(starts, len(owners)))
            owners, values = owners[starts], values[starts]
        if by_count:
            order = np.lexsort((values, -counts.astype(np.int64), owners))
            owners, values, counts = owners[order], values[order], counts[order]
        self._bounds: list[int] = np.searchsorted(owners, np.arange(warps + 1)).tolist()
        self._pairs = list(zip(values.tolist(), counts.tolist(), strict=True))

    def has(self, warp: int) -> bool:
        return self._bounds[warp] < self._bounds[warp + 1]

    def of(self, warp: int) -> tuple[tuple[int, int], ...]:
        return tuple(self._pairs[self._bounds[warp] : self._bounds[warp + 1]])


class _WarpRows:
    """The warp rows that lane tables hang from, with their blocks' and SMs' fields, read
    as column gathers (a field the row's stride lacks is None, as `rows.make_warp` has it).

    The survey let through only lane tables whose links name a usable row of a usable
    table, all the way up, so every link followed here is sound.
    """

    def __init__(self, core: Coredump, lane_tables: Array) -> None:
        self._core = core
        link, info = core.sections.link, core.sections.info
        self._link = np.asarray(link, dtype=np.int64) if isinstance(link, list) else link
        self._info = np.asarray(info, dtype=np.int64) if isinstance(info, list) else info
        warp, warp_row = self._parent(lane_tables)
        cta, cta_row = self._parent(warp)
        sm, sm_row = self._parent(cta)
        self.device: list[int] = self._parent(sm)[1].tolist()
        self.warp_id = self._field(t.WP_TABLE, "warp_id", warp, warp_row)
        self.scope = self._field(t.WP_TABLE, "barrier_scope", warp, warp_row)
        self.info = self._field(t.WP_TABLE, "additional_barrier_info", warp, warp_row)
        self.grid_id = self._field(t.CTA_TABLE, "grid_id", cta, cta_row)
        axes = [self._field(t.CTA_TABLE, f"block_idx_{a}", cta, cta_row) for a in "xyz"]
        self.block: list[Dim3 | None] = [
            None if x is None or y is None or z is None else (x, y, z)
            for x, y, z in zip(*axes, strict=True)
        ]
        self.sm_id = self._field(t.SM_TABLE, "sm_id", sm, sm_row)
        masks = self._field(t.WP_TABLE, "valid_lanes_mask", warp, warp_row)
        self.masks: Array = np.array([_ALL if m is None else m for m in masks], dtype=np.uint64)

    def _parent(self, sections: Array) -> tuple[Array, Array]:
        return self._link[sections].astype(np.int64), self._info[sections].astype(np.int64)

    def _field(self, kind: int, field: str, sections: Array, rows: Array) -> list[int | None]:
        index = self._core.tables
        if not self._core.sections.bulk:  # a few warps: their rows, decoded once and cached
            at = zip(sections.tolist(), rows.tolist(), strict=True)
            return [index.rows(section, kind)[row].get(field) for section, row in at]
        from postmortem.coredump.column_bulk import values_at

        column = index.column_arrays(kind, field)
        values, present = values_at(column.section, column.row, column.values, sections, rows)
        return [v if p else None for v, p in zip(values.tolist(), present.tolist(), strict=True)]

    def warp_pcs(
        self, number: int, lanes_at: tuple[tuple[int, int], ...],
        faulting_at: tuple[tuple[int, int], ...],
    ) -> WarpPcs:  # fmt: skip
        info = self.info[number]
        return WarpPcs(
            device_index=self.device[number], grid_id=self.grid_id[number],
            block_idx=self.block[number], sm_id=self.sm_id[number],
            warp_id=self.warp_id[number], lanes_at=lanes_at, faulting_at=faulting_at,
            barrier_scope=self.scope[number],
            barrier_info=self._core.string(info, "additional_barrier_info") if info else None,
        )  # fmt: skip


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
