"""The fault census: sites merged by kernel and offset, counted, with coordinate ranges."""

from __future__ import annotations

from postmortem import open_coredump
from postmortem.analysis.fault.census import CoordinateRange, fault_census
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from tests.tinydump import (
    WARP_ILLEGAL_ADDRESS,
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

FAULT = cubin("oob_store").fault["offset"]


def _device(blocks):
    module = ModuleSpec("oob_store")
    return DeviceSpec([module], [GridSpec(1, module)], blocks)


def _census(tmp_path, devices):
    path = write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec(devices))
    with open_coredump(path) as core:
        sites = localize(core, LocalizeOptions(nvdisasm=False))
    return sites, fault_census(sites)


def _lanes(offset, lanes, exception=WARP_ILLEGAL_ADDRESS):
    return [LaneSpec(offset, exception, lane=n) for n in lanes]


def test_one_instruction_faulting_on_two_devices_is_one_row(tmp_path):
    # GIVEN the same store faulting on device 0 (3 lanes) and device 1 (2 lanes)
    first = _device([BlockSpec(1, [WarpSpec(_lanes(FAULT, range(3)))], (2, 0, 0), sm=3)])
    second = _device([BlockSpec(1, [WarpSpec(_lanes(FAULT, (8, 9)), warp_id=1)], (7, 0, 0))])
    # WHEN the census is taken
    sites, (row,) = _census(tmp_path, [first, second])
    # THEN two sites (one per device) make one row that counts both devices
    assert len(sites) == 2
    assert (row.kernel, row.offset, row.exceptions) == ("_Z10oob_kernelPfif", FAULT, (14,))
    counts = row.counts
    assert (counts.lanes, counts.warps, counts.ctas, counts.sms, counts.devices) == (5, 2, 2, 2, 2)
    assert row.sms_seen == ((0, 3), (1, 0))
    assert row.blocks == CoordinateRange((2, 0, 0), (7, 0, 0))
    assert row.threads == CoordinateRange((0, 0, 0), (41, 0, 0))


def test_rows_are_ordered_by_lanes_and_keep_every_exception_code(tmp_path):
    # GIVEN 2 lanes at 0x40 and, at the store, 3 lanes of two different exception codes
    lanes = _lanes(0x40, (0, 1)) + _lanes(FAULT, (4, 5)) + _lanes(FAULT, (6,), exception=6)
    _, rows = _census(tmp_path, [_device([BlockSpec(1, [WarpSpec(lanes)])])])
    # THEN the store's row comes first and lists both codes; the other row follows
    assert [(r.offset, r.counts.lanes, r.exceptions) for r in rows] == [
        (FAULT, 3, (6, 14)),
        (0x40, 2, (14,)),
    ]


def test_unlocated_pcs_stay_in_rows_of_their_own(tmp_path):
    # GIVEN two warps whose error PCs lie outside every module, at two different PCs
    warps = [
        WarpSpec(_lanes(0, (0,)), warp_id=0, error_offset=0x10_0000),
        WarpSpec(_lanes(0, (0,)), warp_id=1, error_offset=0x20_0000),
    ]
    sites, rows = _census(tmp_path, [_device([BlockSpec(1, warps)])])
    # THEN they are not merged as one "unknown" row
    assert len(rows) == 2
    assert {(r.kernel, r.offset) for r in rows} == {(None, s.error_pc) for s in sites}
