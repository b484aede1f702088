"""count_faults: records, lanes, warps, blocks, SMs and devices, from fault records."""

from __future__ import annotations

from postmortem.analysis.fault.counts import FaultCounts, count_faults
from postmortem.model import Fault, FaultSource


def _fault(source=FaultSource.LANE, device=0, sm=3, block=(5, 0, 0), warp=2, lane=3):
    lane_level = source is FaultSource.LANE
    return Fault(
        source, 14, 0x7F3C_2A00_00D0, device, sm,
        None if source is FaultSource.SM else 7,
        None if source is FaultSource.SM else block,
        None if source is FaultSource.SM else warp,
        lane if lane_level else None,
        (64 + lane, 0, 0) if lane_level else None,
        0xD0 if lane_level else None, None,
    )  # fmt: skip


def test_lanes_of_one_warp_count_as_one_warp_block_sm_and_device():
    faults = [_fault(lane=n) for n in range(3, 8)]
    assert count_faults(faults) == FaultCounts(
        records=5, lanes=5, warps=1, ctas=1, sms=1, devices=1
    )


def test_the_same_warp_slot_on_two_devices_or_sms_is_two_warps():
    faults = [_fault(device=0), _fault(device=1), _fault(device=1, sm=17)]
    counts = count_faults(faults)
    assert (counts.warps, counts.ctas, counts.sms, counts.devices) == (3, 2, 3, 2)


def test_warp_trap_and_sm_records_are_counted_without_lanes():
    # GIVEN a warp-row fault, a trapped warp and an SM-level fault whose warp exited
    faults = [
        _fault(FaultSource.WARP, warp=2),
        _fault(FaultSource.TRAP, warp=9),
        _fault(FaultSource.SM, sm=40),
    ]
    # THEN every record counts, no lane does, and the SM record names no warp or block
    assert count_faults(faults) == FaultCounts(
        records=3, lanes=0, warps=2, ctas=1, sms=2, devices=1
    )
