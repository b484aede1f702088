"""Each warp of a dump as a snapshot to compare with another dump's, and its registers.

The lanes are read as three column gathers, as `postmortem.analysis.state` reads them; only
the warps become Python objects. Registers are located for many rows at once, and read only
for the warps whose PCs and masks did not change.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.reader import Coredump
from postmortem.model import Dim3, Warp

_NO_LANE_ID = 0xFFFFFFFF
_ALL = 0xFFFFFFFF
WarpKey = tuple[int, int | None, int | None, int | None, Dim3 | None]
"""(device, SM, warp id, grid id, block index)."""


@dataclass(frozen=True, slots=True)
class WarpSnapshot:
    """One warp of one dump: its lanes (id, virtual PC, function-relative PC) as bytes."""

    warp: Warp
    lanes: bytes
    offsets: Any
    """The lanes' function-relative PCs (a numpy view)."""
    table: int
    """The warp's lane table."""
    rows: Any
    """The lanes' rows in it, in lane order (a numpy view)."""


def warp_snapshots(core: Coredump) -> dict[Any, WarpSnapshot]:
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
    found: dict[Any, WarpSnapshot] = {}
    seen: Counter[WarpKey] = Counter()
    for table, start, count in zip(tables.tolist(), starts.tolist(), counts.tolist(), strict=True):
        warp = warp_of[table]
        assert warp is not None  # its lanes were kept
        key = warp_key(warp)
        seen[key] += 1
        end = start + count
        found[(key, seen[key])] = WarpSnapshot(
            warp, records[start:end].tobytes(), records[start:end, 2], table, rows[start:end]
        )
    return found


def _mask(mask: int | None) -> int:
    return _ALL if mask is None else mask


def warp_key(warp: Warp) -> WarpKey:
    """The key a warp has in both dumps: (device, SM, warp id, grid id, block index)."""
    return (warp.device_index, warp.sm_id, warp.warp_id, warp.grid_id, warp.block_idx)


def changes(then: WarpSnapshot, now: WarpSnapshot) -> tuple[str, ...]:
    """What changed of a warp between two dumps: "PC", "valid mask", "active mask"."""
    changed = []
    if then.lanes != now.lanes:
        changed.append("PC")
    if then.warp.valid_lanes_mask != now.warp.valid_lanes_mask:
        changed.append("valid mask")
    if then.warp.active_lanes_mask != now.warp.active_lanes_mask:
        changed.append("active mask")
    return tuple(changed)


class Registers:
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


def same_registers(
    earlier: tuple[Registers, Registers], later: tuple[Registers, Registers],
    then: WarpSnapshot, now: WarpSnapshot,
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
