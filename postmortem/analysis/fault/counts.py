"""How much of the GPU a set of fault records covers: the one count every report shows.

A site's header ("5 lanes in 1 warp"), a census row and `postmortem info` all count with
`count_faults`, so they agree: a warp is any record that names one (a lane's, a warp
row's or a trap's), told apart by device, SM, block and warp slot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from postmortem.model import Fault


@dataclass(frozen=True, slots=True)
class FaultCounts:
    """Records, and the lanes, warps, blocks, SMs and devices they cover."""

    records: int
    """Fault records (a lane, a warp row, an SM row or a trapped warp each)."""
    lanes: int
    """Records of a faulting lane."""
    warps: int
    ctas: int
    sms: int
    devices: int


def count_faults(faults: Iterable[Fault]) -> FaultCounts:
    """Count `faults` by lane, warp, block, SM and device."""
    found = list(faults)
    return FaultCounts(
        records=len(found),
        # A warp-row fault names its first valid lane as cuda-gdb does; it did not fault.
        lanes=sum(1 for f in found if f.lane is not None and not f.lane_chosen),
        warps=len(
            {
                (f.device_index, f.sm_id, f.block_idx, f.warp_id)
                for f in found
                if f.warp_id is not None
            }
        ),
        ctas=len(
            {(f.device_index, f.grid_id, f.block_idx) for f in found if f.block_idx is not None}
        ),
        sms=len({(f.device_index, f.sm_id) for f in found}),
        devices=len({f.device_index for f in found}),
    )
