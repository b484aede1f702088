"""Where every warp was: a PC histogram per kernel, and which warps had diverged.

The lanes' PCs and exception codes are read as two column gathers over all lane tables;
each lane table is one warp, mapped to its grid through the warp and CTA rows once per
table. A 270,000-lane dump is summarized without building an object per lane.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.faults import CodeMap
from postmortem.coredump.reader import Coredump


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


def gpu_state(core: Coredump, code_map: CodeMap | None = None) -> tuple[KernelState, ...]:
    """The PC histogram of every grid that has warps in the dump."""
    code_map = code_map or CodeMap(core)
    pcs = core.tables.column(t.LN_TABLE, "phys_pc")
    exceptions = core.tables.column(t.LN_TABLE, "exception").values
    grid_of_table: dict[int, tuple[int, int]] = {}
    per_grid: dict[tuple[int, int], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    tables, starts = np.unique(pcs.section, return_index=True)
    bounds = starts[1:].tolist() + [len(pcs.section)]
    for table, begin, end in zip(tables.tolist(), starts.tolist(), bounds, strict=True):
        grid = grid_of_table.get(table) or _grid_of_lane_table(core, table)
        grid_of_table[table] = grid
        per_grid[grid][table] = [begin, end]
    return tuple(
        _kernel_state(core, code_map, grid, warps, pcs.values, exceptions)
        for grid, warps in sorted(per_grid.items())
    )


def _grid_of_lane_table(core: Coredump, lane_table: int) -> tuple[int, int]:
    warp = core.tables.parent_of(lane_table)
    cta = core.tables.parent_of(warp.section)
    sm = core.tables.parent_of(cta.section)
    device = core.tables.parent_of(sm.section)
    grid_id = int(core.tables.rows(cta.section, t.CTA_TABLE)[cta.row]["grid_id"])
    return device.row, grid_id


def _kernel_state(
    core: Coredump,
    code_map: CodeMap,
    grid: tuple[int, int],
    warps: dict[int, list[int]],
    pcs: np.ndarray[Any, Any],
    exceptions: np.ndarray[Any, Any],
) -> KernelState:
    device_index, grid_id = grid
    lanes_at: dict[int, int] = defaultdict(int)
    warps_at: dict[int, int] = defaultdict(int)
    faulting_at: dict[int, int] = defaultdict(int)
    divergent = lanes = 0
    for begin, end in warps.values():
        offsets = pcs[begin:end]
        distinct = np.unique(offsets)
        divergent += int(len(distinct) > 1)
        lanes += end - begin
        for offset in distinct.tolist():
            warps_at[offset] += 1
        for offset, code in zip(offsets.tolist(), exceptions[begin:end].tolist(), strict=True):
            lanes_at[offset] += 1
            faulting_at[offset] += code != 0
    groups = sorted(
        (PcGroup(o, warps_at[o], lanes_at[o], faulting_at[o]) for o in lanes_at),
        key=lambda g: (-g.lanes, g.offset),
    )
    return KernelState(
        device_index, grid_id, _kernel(core, code_map, device_index, grid_id), len(warps),
        lanes, tuple(groups), divergent,
    )  # fmt: skip


def _kernel(core: Coredump, code_map: CodeMap, device_index: int, grid_id: int) -> str | None:
    grid = core.find_grid(device_index, grid_id)
    if grid is None:
        return None
    location = code_map.locate(device_index, grid.function_entry)
    return location.function if location else None
