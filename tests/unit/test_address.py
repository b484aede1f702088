"""The address each faulting lane touched, from its registers, and how the addresses spread."""

from __future__ import annotations

from postmortem import open_coredump
from postmortem.analysis.forensics.address import LaneAddress, address_spread, lane_addresses
from postmortem.codemap import find_faults
from postmortem.cubin.operands import decode_access
from postmortem.cubin.sass import parse_sass
from tests.tinydump import (
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    WarpSpec,
    cubin,
    write_tiny_dump,
)

FAULT = cubin("oob_store").fault["offset"]  # STG.E desc[UR4][R2.64], R7
BUFFER = 0x7F00_1000_0000


def _access(text):
    (instruction,) = parse_sass(f"        /*0000*/                   {text} ;").instructions
    return decode_access(instruction)


def _pointer(lane, stride=4096):
    address = BUFFER + stride * lane
    return {2: address & 0xFFFF_FFFF, 3: address >> 32}


def _addresses(tmp_path, warps, text="STG.E desc[UR4][R2.64], R7"):
    module = ModuleSpec("oob_store")
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, warps, sm=3)])
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))) as core:
        return lane_addresses(core, _access(text), find_faults(core))[:2]


def test_each_faulting_lane_address_comes_from_its_own_registers(tmp_path):
    lanes = [LaneSpec(FAULT, 14, lane=n, registers=_pointer(n)) for n in (3, 4, 5)]
    lanes.append(LaneSpec(FAULT, 0, lane=6, registers=_pointer(6)))  # not faulting
    addresses, which = _addresses(tmp_path, [WarpSpec(lanes, warp_id=2)])
    assert which == "faulting lanes"
    assert [(a.warp_id, a.lane, a.address) for a in addresses] == [
        (2, n, BUFFER + 4096 * n) for n in (3, 4, 5)
    ]
    first = addresses[0]
    assert first.registers == (("R2", (BUFFER + 3 * 4096) & 0xFFFF_FFFF), ("R3", BUFFER >> 32))
    assert (first.sm_id, first.missing) == (3, ())


def test_a_warp_level_fault_reads_the_active_lanes_at_the_error_pc(tmp_path):
    # GIVEN a warp-row fault (no lane exception) whose active lanes 0-2 are at the store,
    # lane 3 elsewhere, and lane 4 inactive
    lanes = [LaneSpec(FAULT, lane=n, registers=_pointer(n)) for n in (0, 1, 2, 4)]
    lanes.insert(3, LaneSpec(0x40, lane=3, registers=_pointer(3)))
    warp = WarpSpec(lanes, error_offset=FAULT, active_lanes=0b01111)
    # WHEN the addresses are computed
    addresses, which = _addresses(tmp_path, [warp])
    # THEN only the active lanes at the error PC count
    assert which == "active lanes at the error PC"
    assert [a.lane for a in addresses] == [0, 1, 2]


def test_uniform_registers_are_read_from_the_warp(tmp_path):
    lanes = [LaneSpec(FAULT, 14, lane=n, registers={4: 0x100 * n}) for n in (0, 1)]
    warp = WarpSpec(lanes, uniform_registers={8: 0x2000})
    addresses, _ = _addresses(tmp_path, [warp], "LDS R9, [R4+UR8+0x10]")
    assert [a.address for a in addresses] == [0x2010, 0x2110]
    assert addresses[1].registers == (("R4", 0x100), ("UR8", 0x2000))


def test_a_register_the_dump_lacks_leaves_the_lane_without_an_address(tmp_path):
    # GIVEN oob_kernel's 10 registers per lane, and an address in R40
    lanes = [LaneSpec(FAULT, 14, registers=_pointer(0))]
    (address,), _ = _addresses(tmp_path, [WarpSpec(lanes)], "STG.E desc[UR4][R40.64], R7")
    assert address.address is None
    assert "R40" in address.missing


def _lane(lane, address, warp=0):
    return LaneAddress(0, 3, warp, lane, (0, 0, 0), (lane, 0, 0), address, (), ())


def test_the_spread_finds_the_common_stride_and_the_lanes_off_it():
    # GIVEN lanes 0-5 of a warp 0x1000 apart, except lane 4, and a second warp on the stride
    lanes = [_lane(n, BUFFER + 0x1000 * n) for n in (0, 1, 2, 3, 5)]
    lanes.append(_lane(4, BUFFER + 0x1000 * 4 + 8))
    lanes += [_lane(n, BUFFER + 0x100000 + 0x1000 * n, warp=1) for n in (0, 1)]
    # WHEN the spread is taken
    spread = address_spread(lanes)
    # THEN the stride is the usual one, and only lane 4 of warp 0 is off it
    assert spread.stride_bytes == 0x1000
    assert spread.irregular_lanes == ((0, 4),)
    assert (spread.count, spread.distinct) == (8, 8)
    assert (spread.minimum, spread.maximum) == (BUFFER, BUFFER + 0x101000)


def test_no_known_address_no_spread_and_one_lane_no_stride():
    assert address_spread([_lane(0, None)]) is None
    one = address_spread([_lane(0, BUFFER), _lane(1, None)])
    assert (one.count, one.stride_bytes, one.irregular_lanes) == (1, None, ())
