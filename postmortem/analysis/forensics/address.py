"""The address each faulting lane touched, computed from its registers in the dump, and the
spread of those addresses across lanes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from postmortem.analysis.state import still_at_fault
from postmortem.coredump import Coredump
from postmortem.cubin.operands import (
    MemoryAccess,
    address_plan,
    effective_address,
    registers_read,
)
from postmortem.model import Dim3, Fault, Lane, RowRef, Warp


@dataclass(frozen=True, slots=True)
class LaneAddress:
    """The effective address one lane accessed."""

    device_index: int
    sm_id: int | None
    """None (like the ids below) when the dump's rows are too short to say."""
    warp_id: int | None
    lane: int | None
    block_idx: Dim3 | None
    thread_idx: Dim3 | None
    address: int | None
    """None when a register the address needs is not in the dump (`missing` names it)."""
    missing: tuple[str, ...]
    registers: tuple[tuple[str, int], ...]
    """The register values the address was computed from, in formula order."""


SpreadPattern = Literal["single", "uniform", "broadcast", "grouped", "strided", "irregular"]
"""How the lanes' addresses relate: one lane; every lane at one address; lanes in groups that
share an address, the distinct addresses evenly spaced (a broadcast) or not (grouped); each lane
a common stride from its neighbour (strided); or none of these (irregular)."""


@dataclass(frozen=True, slots=True)
class AddressSpread:
    """How the lanes' addresses relate to each other."""

    count: int
    """Lanes with a computed address."""
    minimum: int
    maximum: int
    distinct: int
    stride_bytes: int | None
    """The usual distance between neighbouring lanes of a warp, per lane id (0 when every lane
    has one address); None when the lanes follow no common stride, when lanes share addresses in
    groups (a broadcast is no per-lane stride), or when only one lane is known."""
    irregular_lanes: tuple[tuple[int | None, int], ...]
    """(warp, lane) of the lanes off the common stride of their warp; empty without a stride."""
    pattern: SpreadPattern = "irregular"
    address_step_bytes: int | None = None
    """For a broadcast, the distance between neighbouring distinct addresses."""
    lanes_per_address: tuple[int, int] | None = None
    """For a broadcast or grouped pattern, the fewest and the most lanes sharing an address."""


def lane_addresses(
    core: Coredump, access: MemoryAccess, faults: Sequence[Fault]
) -> tuple[tuple[LaneAddress, ...], str, tuple[Lane, ...]]:
    """Addresses of the faulting lanes, or, for a warp-level fault, of the warp's active
    lanes at the error PC; with a phrase naming which lanes those are, and the faulting
    lanes left out because they had moved on (`still_at_fault`)."""
    pairs: list[tuple[Warp, Lane]] = []
    moved: list[Lane] = []
    warp_level = False
    for fault in faults:
        if fault.warp_record is None:
            continue
        if fault.lane_record is None:
            warp_level = True
            pairs.extend(_active_lanes_at(core, fault.warp_record, fault.error_pc))
        elif still_at_fault(fault.lane_record, fault.error_pc):
            pairs.append((fault.warp_record, fault.lane_record))
        else:
            moved.append(fault.lane_record)
    uniforms: dict[RowRef, tuple[int, ...] | None] = {}  # read once per warp
    result = []
    general, _ = registers_read(access)
    registers = core.registers_of([lane for _, lane in pairs], general)
    plan = address_plan(access)
    warp_now, held = None, None  # a warp's lanes come one after the other
    for (warp, lane), values in zip(pairs, registers, strict=True):
        if warp is not warp_now:
            if warp.ref not in uniforms:
                uniforms[warp.ref] = core.uniform_registers(warp)
            warp_now, held = warp, uniforms[warp.ref]
        found = (
            plan.evaluate(values, held)
            if plan is not None
            else effective_address(access, values, held)
        )
        result.append(
            LaneAddress(
                lane.device_index, lane.sm_id, lane.warp_id, lane.lane, lane.block_idx,
                lane.thread_idx, found.address, found.missing, found.registers,
            )
        )  # fmt: skip
    which = "active lanes at the error PC" if warp_level else "faulting lanes"
    return tuple(result), which, tuple(moved)


def _active_lanes_at(core: Coredump, warp: Warp, pc: int | None) -> Iterable[tuple[Warp, Lane]]:
    active = warp.active_lanes_mask or 0
    for lane in core.lanes(warp):
        if lane.lane is None or not active >> lane.lane & 1:
            continue
        if still_at_fault(lane, pc):
            yield warp, lane


@dataclass(frozen=True, slots=True)
class _Numbered:
    """A lane address whose lane id is known (a stride needs lane numbers)."""

    of: LaneAddress
    lane: int


def address_spread(lanes: Sequence[LaneAddress]) -> AddressSpread | None:
    """Min, max, distinct count and the pattern of the addresses: uniform, a broadcast (groups
    of lanes sharing evenly spaced addresses), grouped, a common per-lane stride (with the lanes
    off it) or irregular; None without any address."""
    addresses = [lane.address for lane in lanes if lane.address is not None]
    if not addresses:
        return None
    sharing = Counter(addresses)
    low, high, distinct = min(addresses), max(addresses), len(sharing)
    if len(addresses) == 1 or distinct == 1:
        pattern: SpreadPattern = "single" if len(addresses) == 1 else "uniform"
        stride = 0 if pattern == "uniform" and _has_neighbours(lanes) else None
        return AddressSpread(len(addresses), low, high, distinct, stride, (), pattern)
    if min(sharing.values()) > 1:
        # Every address is shared by several lanes: a per-lane stride would call most of them
        # "off the stride"; the pattern is in the distinct addresses.
        ordered = sorted(sharing)
        steps = {second - first for first, second in zip(ordered, ordered[1:], strict=False)}
        group = (min(sharing.values()), max(sharing.values()))
        if len(steps) == 1:
            (step,) = steps
            return AddressSpread(
                len(addresses), low, high, distinct, None, (), "broadcast", step, group
            )
        return AddressSpread(len(addresses), low, high, distinct, None, (), "grouped", None, group)
    stride, irregular, numbered = _lane_stride(lanes)
    if stride is None or 2 * (numbered - len(irregular)) <= numbered:
        # Fewer than half the lanes on the usual stride: there is no stride to be off.
        return AddressSpread(len(addresses), low, high, distinct, None, (), "irregular")
    return AddressSpread(len(addresses), low, high, distinct, stride, irregular, "strided")


_WarpKey = tuple[int, int | None, int | None, Dim3 | None]


def _by_warp(lanes: Sequence[LaneAddress]) -> dict[_WarpKey, list[_Numbered]]:
    """The lanes with an address and a lane id, per warp, in lane order."""
    by_warp: dict[_WarpKey, list[_Numbered]] = {}
    numbered = [
        _Numbered(lane, lane.lane)
        for lane in lanes
        if lane.address is not None and lane.lane is not None
    ]
    for lane in sorted(numbered, key=lambda lane: lane.lane):
        of = lane.of
        by_warp.setdefault((of.device_index, of.sm_id, of.warp_id, of.block_idx), []).append(lane)
    return by_warp


def _has_neighbours(lanes: Sequence[LaneAddress]) -> bool:
    return any(len(members) > 1 for members in _by_warp(lanes).values())


def _lane_stride(
    lanes: Sequence[LaneAddress],
) -> tuple[int | None, tuple[tuple[int | None, int], ...], int]:
    """The usual per-lane stride, the (warp, lane) pairs off it, and how many lanes had ids."""
    by_warp = _by_warp(lanes)
    strides: Counter[int] = Counter()
    for members in by_warp.values():
        for first, second in zip(members, members[1:], strict=False):
            step = second.lane - first.lane
            delta = (second.of.address or 0) - (first.of.address or 0)
            if step > 0 and delta % step == 0:  # a corrupt dump may repeat a lane id
                strides[delta // step] += 1
    numbered = sum(len(members) for members in by_warp.values())
    if not strides:
        return None, (), numbered
    stride = strides.most_common(1)[0][0]
    irregular: list[tuple[int | None, int]] = []
    # A lane is off the stride when its address minus stride * lane differs from what most
    # lanes of its warp give: one stray lane does not make the others irregular.
    for members in by_warp.values():
        intercepts = Counter((lane.of.address or 0) - stride * lane.lane for lane in members)
        usual = intercepts.most_common(1)[0][0]
        irregular.extend(
            (lane.of.warp_id, lane.lane)
            for lane in members
            if (lane.of.address or 0) - stride * lane.lane != usual
        )
    return stride, tuple(irregular), numbered
