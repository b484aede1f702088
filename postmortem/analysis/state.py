"""Where every warp was: a PC histogram per kernel, and which warps had diverged.

The lanes' PCs and exception codes are read as two column gathers over all lane tables;
each lane table is one warp, mapped to its block and grid through the warp and CTA rows
once per table. A 270,000-lane dump is summarized without building an object per lane.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.faults import CodeMap
from postmortem.coredump.reader import Coredump
from postmortem.cubin.inspect import Function
from postmortem.model import CodeLocation, Dim3


@dataclass(frozen=True, slots=True)
class WarpPcs:
    """One warp and the function-relative PCs of its lanes."""

    device_index: int
    grid_id: int
    block_idx: Dim3
    sm_id: int
    warp_id: int
    lanes_at: tuple[tuple[int, int], ...]
    """(PC offset, lanes there), most populous first."""
    faulting_at: tuple[tuple[int, int], ...]
    """(PC offset, lanes there with an exception)."""

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
    grid_id: int
    kernel: str | None
    """Mangled name of the kernel the grid runs, when its entry lies in a loaded image."""
    warps: int
    lanes: int
    pcs: tuple[PcGroup, ...]
    """Most populous first."""
    divergent_warps: int
    """Warps whose lanes were at more than one PC."""


def warp_pcs(core: Coredump) -> tuple[WarpPcs, ...]:
    """Every warp of the dump with the PCs of its lanes, in table order."""
    pcs = core.tables.column(t.LN_TABLE, "phys_pc")
    exceptions = core.tables.column(t.LN_TABLE, "exception").values
    if not len(pcs.section):
        return ()
    tables, starts = np.unique(pcs.section, return_index=True)
    bounds = [*starts[1:].tolist(), len(pcs.section)]
    warps = []
    for table, begin, end in zip(tables.tolist(), starts.tolist(), bounds, strict=True):
        offsets = pcs.values[begin:end].tolist()
        codes = exceptions[begin:end].tolist()
        lanes = Counter(offsets)
        faulting = Counter(o for o, code in zip(offsets, codes, strict=True) if code)
        warps.append(_warp(core, table, lanes, faulting))
    return tuple(warps)


def _warp(core: Coredump, lane_table: int, lanes: Counter[int], faulting: Counter[int]) -> WarpPcs:
    index = core.tables
    warp = index.parent_of(lane_table)
    cta = index.parent_of(warp.section)
    sm = index.parent_of(cta.section)
    device = index.parent_of(sm.section)
    cta_row = index.rows(cta.section, t.CTA_TABLE)[cta.row]
    return WarpPcs(
        device_index=device.row,
        grid_id=int(cta_row["grid_id"]),
        block_idx=(int(cta_row["block_idx_x"]), int(cta_row["block_idx_y"]),
                   int(cta_row["block_idx_z"])),
        sm_id=int(index.rows(sm.section, t.SM_TABLE)[sm.row]["sm_id"]),
        warp_id=int(index.rows(warp.section, t.WP_TABLE)[warp.row]["warp_id"]),
        lanes_at=tuple(sorted(lanes.items(), key=lambda item: (-item[1], item[0]))),
        faulting_at=tuple(sorted(faulting.items())),
    )  # fmt: skip


def gpu_state(
    core: Coredump, code_map: CodeMap | None = None, warps: Sequence[WarpPcs] | None = None
) -> tuple[KernelState, ...]:
    """The PC histogram of every grid that has warps in the dump."""
    code_map = code_map or CodeMap(core)
    by_grid: dict[tuple[int, int], list[WarpPcs]] = defaultdict(list)
    for warp in warp_pcs(core) if warps is None else warps:
        by_grid[(warp.device_index, warp.grid_id)].append(warp)
    return tuple(
        _kernel_state(grid, members, kernel_of(core, code_map, *grid))
        for grid, members in sorted(by_grid.items())
    )


def pc_groups(warps: Sequence[WarpPcs]) -> tuple[PcGroup, ...]:
    """The warps' lanes counted per PC (with warps and blocks there), most lanes first."""
    lanes: Counter[int] = Counter()
    warps_at: Counter[int] = Counter()
    faulting: Counter[int] = Counter()
    blocks_at: dict[int, set[Dim3]] = defaultdict(set)
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


def _kernel_state(grid: tuple[int, int], warps: list[WarpPcs], kernel: str | None) -> KernelState:
    groups = pc_groups(warps)
    return KernelState(
        grid[0], grid[1], kernel, len(warps), sum(g.lanes for g in groups), groups,
        sum(1 for w in warps if w.diverged),
    )  # fmt: skip


def kernel_code(
    core: Coredump, code_map: CodeMap, device_index: int, grid_id: int
) -> tuple[CodeLocation, Function] | None:
    """Where the kernel a grid runs lives: its code section and its function, if loaded."""
    grid = core.find_grid(device_index, grid_id)
    location = code_map.locate(device_index, grid.function_entry) if grid else None
    summary = code_map.summary(location.module_handle) if location else None
    function = summary.find_function(grid.function_entry) if summary and grid else None
    return None if location is None or function is None else (location, function)


def kernel_of(core: Coredump, code_map: CodeMap, device_index: int, grid_id: int) -> str | None:
    """The mangled name of the kernel a grid runs, when its entry lies in a loaded image."""
    code = kernel_code(core, code_map, device_index, grid_id)
    return code[1].name if code else None
