"""Find the faults a dump records.

The order of evidence follows the format: a warp row with a valid error PC, the lanes
with a non-zero exception (each lane's own PC), and, since r555, an SM row's exception
and error PC, which is all that is left when every faulting warp has exited. Exception
columns are scanned in bulk over each table; rows are turned into objects only for
the lanes and warps that faulted.
"""

from __future__ import annotations

from collections.abc import Callable

from postmortem.coredump import tables as t
from postmortem.coredump.reader import Coredump
from postmortem.coredump.rows import make_cta, make_lane, make_sm, make_warp
from postmortem.model import CTA, SM, CodeLocation, Dim3, Fault, FaultSource, RowRef, Warp

Locate = Callable[[int, int | None], CodeLocation | None]
"""(device index, PC) → where the PC falls among the dump's code (`CodeMap.locate`)."""


def _nowhere(_device: int, _pc: int | None) -> CodeLocation | None:
    return None


def read_faults(core: Coredump, locate: Locate = _nowhere) -> tuple[Fault, ...]:
    """Every fault the dump records, lane faults first, then warp, trap and SM records, each
    kind sorted by location; `locate`
    places each PC in the dump's code (without it, no fault has a location).

    Each faulting lane is a record of its own, with its own exception code, so lanes with
    different codes at one PC stay apart. A warp stopped at a trap (`isWarpBroken`) with
    no exception is a `TRAP` record.
    """
    faults: list[Fault] = []
    # Each faulting warp is decoded once, however many of its lanes fault, and each lane
    # table's rows once, however many of them fault (a grid-wide fault: all 270,000).
    warps: dict[RowRef, Warp] = {}
    tables: dict[int, tuple[Warp, list[dict[str, int]]]] = {}
    for ref in core.tables.nonzero_rows(t.LN_TABLE, "exception"):
        if ref.section not in tables:
            warp_ref = core.tables.parent_of(ref.section)
            warp = warps.get(warp_ref) or warps.setdefault(warp_ref, _warp_at(core, warp_ref))
            tables[ref.section] = warp, core.tables.rows(ref.section, t.LN_TABLE)
        warp, rows = tables[ref.section]
        lane = make_lane(rows[ref.row], warp, ref)
        if not warp.holds_lane(lane.lane):
            continue  # a row the valid-lanes mask does not count is no thread
        pc = warp.error_pc if warp.error_pc is not None else lane.virtual_pc
        faults.append(
            Fault(
                FaultSource.LANE, lane.exception, pc, lane.device_index, lane.sm_id,
                lane.grid_id, lane.block_idx, lane.warp_id, lane.lane, lane.thread_idx,
                lane.function_offset, locate(lane.device_index, pc),
                warp_record=warp, lane_record=lane,
            )
        )  # fmt: skip
    seen = set(warps)
    faults.extend(_warp_faults(core, locate, seen))
    faults.extend(_trap_warps(core, locate, seen))
    faulted_sms = {(f.device_index, f.sm_id) for f in faults}
    faults.extend(_sm_faults(core, locate, faulted_sms))
    return tuple(sorted(faults, key=_order))


_PRECISION = {FaultSource.LANE: 0, FaultSource.WARP: 1, FaultSource.TRAP: 2, FaultSource.SM: 3}
"""The more precise record leads: a lane's fault names its thread and code, a warp's its PC,
an SM's only what is left when its warps have exited."""


def _order(fault: Fault) -> tuple[int, int, int, tuple[int, int, int], int, int]:
    return (
        _PRECISION[fault.source],
        fault.device_index,
        -1 if fault.sm_id is None else fault.sm_id,
        fault.block_idx or (-1, -1, -1),
        -1 if fault.warp_id is None else fault.warp_id,
        -1 if fault.lane is None else fault.lane,
    )


def _warp_faults(core: Coredump, locate: Locate, skip: set[RowRef]) -> list[Fault]:
    """Warps with a valid error PC but no lane exception (the code comes from the SM); a
    broken warp on an SM that reports no exception is left to `_trap_warps`. Each names its
    warp's first valid lane and that lane's thread, marked `lane_chosen`: no lane faulted on
    record."""
    found = []
    for ref in core.tables.nonzero_rows(t.WP_TABLE, "error_pc_valid"):
        if ref in skip:
            continue
        warp = _warp_at(core, ref)
        sm = _sm_at(core, core.tables.parent_of(core.tables.parent_of(ref.section).section))
        if warp.is_broken and not sm.exception:
            continue
        skip.add(ref)
        lost = lanes_lost(core, warp)
        lane, thread_idx = _first_valid_lane(core, warp, lost)
        # An SM row's 0 is "no exception" (the lane rows hold the code), never a code.
        found.append(
            Fault(
                FaultSource.WARP, sm.exception or None, warp.error_pc, warp.device_index,
                warp.sm_id, warp.grid_id, warp.block_idx, warp.warp_id, lane, thread_idx, None,
                locate(warp.device_index, warp.error_pc),
                warp_record=warp, lane_chosen=lane is not None, lanes_lost=lost,
            )
        )  # fmt: skip
    return found


def lanes_lost(core: Coredump, warp: Warp) -> bool:
    """Whether the lane rows of a warp that has lanes are lost: no usable lane table hangs
    from its row (set aside, or never written), or every one is zero-filled (no driver
    writes a zero row: it names its lane and PC). The exception codes they held are lost
    with them, and nothing read from a zero row is a thread."""
    if warp.valid_lanes_mask is not None and not warp.valid_lanes_mask & 0xFFFF_FFFF:
        return False  # no valid lane: no lane row is owed
    tables = core.tables.children(warp.ref, t.LN_TABLE)
    return not any(core.tables.data(section).strip(b"\0") for section in tables)


def _first_valid_lane(core: Coredump, warp: Warp, lost: bool) -> tuple[int | None, Dim3 | None]:
    """The lane cuda-gdb and LLDB name for a fault the warp row records: the lowest bit of
    the valid-lanes mask (the lowest lane row's id when the row holds no mask), with the
    thread index its row gives (none when the lane rows are `lost`); (None, None) for a
    warp with no valid lane, which LLDB shows as a lane-less stand-in."""
    lanes = () if lost else core.lanes(warp)
    rows = {lane.lane: lane for lane in lanes if lane.lane is not None}
    mask = warp.valid_lanes_mask
    if mask is None:
        first = min(rows, default=None)
    elif valid := mask & 0xFFFF_FFFF:
        first = (valid & -valid).bit_length() - 1
    else:
        return None, None
    row = rows.get(first) if first is not None else None
    return first, None if row is None else row.thread_idx


def _trap_warps(core: Coredump, locate: Locate, skip: set[RowRef]) -> list[Fault]:
    """Warps stopped at a trap or breakpoint (`isWarpBroken`) that report no exception."""
    found = []
    for ref in core.tables.nonzero_rows(t.WP_TABLE, "is_warp_broken"):
        if ref in skip:
            continue
        warp = _warp_at(core, ref)
        pc = warp.error_pc
        if pc is None and not lanes_lost(core, warp):  # a zero row's PC 0 is no PC
            pc = _warp_pc(core, warp)
        found.append(
            Fault(
                FaultSource.TRAP, None, pc, warp.device_index, warp.sm_id, warp.grid_id,
                warp.block_idx, warp.warp_id, None, None, None,
                locate(warp.device_index, pc),
                warp_record=warp,
            )
        )  # fmt: skip
    return found


def _warp_pc(core: Coredump, warp: Warp) -> int | None:
    """The PC of the warp's first active lane (else its first lane), when lanes say one."""
    lanes = [lane for lane in core.lanes(warp) if lane.virtual_pc is not None]
    active = warp.active_lanes_mask or 0
    chosen = next((x for x in lanes if x.lane is not None and active >> x.lane & 1), None)
    chosen = chosen or next(iter(lanes), None)
    return None if chosen is None else chosen.virtual_pc


def _sm_faults(core: Coredump, locate: Locate, skip: set[tuple[int, int | None]]) -> list[Fault]:
    """SM-level exceptions (r555+) on SMs where no warp or lane reports one."""
    found = []
    for ref in core.tables.nonzero_rows(t.SM_TABLE, "exception"):
        sm = _sm_at(core, ref)
        if (sm.device_index, sm.sm_id) in skip:
            continue
        found.append(
            Fault(
                FaultSource.SM, sm.exception or 0, sm.error_pc, sm.device_index, sm.sm_id,
                None, None, None, None, None, None,
                locate(sm.device_index, sm.error_pc), sm.exception_string,
            )
        )  # fmt: skip
    return found


def _sm_at(core: Coredump, ref: RowRef) -> SM:
    device = core.tables.parent_of(ref.section)
    rows = core.tables.rows(ref.section, t.SM_TABLE)
    return make_sm(rows[ref.row], device.row, ref, core.string)


def _cta_at(core: Coredump, ref: RowRef) -> CTA:
    sm = _sm_at(core, core.tables.parent_of(ref.section))
    return make_cta(core.tables.rows(ref.section, t.CTA_TABLE)[ref.row], sm, ref)


def _warp_at(core: Coredump, ref: RowRef) -> Warp:
    cta = _cta_at(core, core.tables.parent_of(ref.section))
    return make_warp(core.tables.rows(ref.section, t.WP_TABLE)[ref.row], cta, ref, core.string)
