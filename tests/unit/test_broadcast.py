"""The pattern of the lanes' addresses: uniform, a broadcast, grouped, strided or irregular,
and never lanes "off the stride" where lanes share addresses."""

from __future__ import annotations

import random

from postmortem.analysis.forensics.address import LaneAddress, address_spread
from postmortem.report.forensics import spread_text

BUFFER = 0x7F00_2000_0000


def _lanes(address_of, lanes=range(32), warp=0):
    return [
        LaneAddress(0, 3, warp, n, (0, 0, 0), (32 * warp + n, 0, 0), address_of(n), (), ())
        for n in lanes
    ]


def test_eight_lanes_per_address_four_addresses_apart_is_a_broadcast():
    # GIVEN lanes 0-7 at one float, 8-15 at the next, and so on: 4 addresses 4 bytes apart
    lanes = _lanes(lambda n: BUFFER + 4 * (n // 8))
    # WHEN the spread is taken
    spread = address_spread(lanes)
    # THEN it is a broadcast, with no per-lane stride and no lane "off the stride"
    assert spread.pattern == "broadcast"
    assert (spread.count, spread.distinct) == (32, 4)
    assert (spread.address_step_bytes, spread.lanes_per_address) == (4, (8, 8))
    assert (spread.stride_bytes, spread.irregular_lanes) == (None, ())
    assert spread_text(spread) == "4 distinct addresses 4 bytes apart, 8 lanes each"


def test_an_interleaved_broadcast_is_a_broadcast_too():
    # GIVEN lane n at element n % 4: lanes 0, 4, 8, ... share the first address
    spread = address_spread(_lanes(lambda n: BUFFER + 16 * (n % 4)))
    assert spread.pattern == "broadcast"
    assert (spread.distinct, spread.address_step_bytes, spread.lanes_per_address) == (4, 16, (8, 8))
    assert spread.irregular_lanes == ()


def test_a_broadcast_with_unequal_groups_says_how_many_lanes_share_an_address():
    # GIVEN 3 addresses 8 bytes apart shared by 10, 11 and 11 lanes (n // 11 of 32 lanes)
    spread = address_spread(_lanes(lambda n: BUFFER + 8 * (n // 11)))
    assert (spread.pattern, spread.lanes_per_address) == ("broadcast", (10, 11))
    assert spread_text(spread) == "3 distinct addresses 8 bytes apart, 10 to 11 lanes each"


def test_shared_addresses_unevenly_spaced_are_grouped():
    offsets = [0, 4, 100, 1000]
    spread = address_spread(_lanes(lambda n: BUFFER + offsets[n // 8]))
    assert spread.pattern == "grouped"
    assert (spread.address_step_bytes, spread.lanes_per_address) == (None, (8, 8))
    assert (spread.stride_bytes, spread.irregular_lanes) == (None, ())
    assert spread_text(spread) == "4 distinct addresses, unevenly spaced, 8 lanes each"


def test_every_lane_at_one_address_is_uniform():
    spread = address_spread(_lanes(lambda n: BUFFER))
    assert (spread.pattern, spread.distinct, spread.stride_bytes) == ("uniform", 1, 0)
    assert spread.irregular_lanes == ()
    assert spread_text(spread) == "all 32 lanes at one address"


def test_one_lane_is_a_single_address():
    spread = address_spread(_lanes(lambda n: BUFFER, lanes=[5]))
    assert (spread.pattern, spread.stride_bytes) == ("single", None)
    assert spread_text(spread) == "one lane"


def test_a_regular_stride_per_lane_is_strided():
    spread = address_spread(_lanes(lambda n: BUFFER + 4 * n))
    assert (spread.pattern, spread.stride_bytes, spread.irregular_lanes) == ("strided", 4, ())
    assert spread.lanes_per_address is None
    assert spread_text(spread) == "stride 4 bytes per lane"


def test_a_stray_lane_on_a_stride_is_still_named_off_the_stride():
    # GIVEN a 16-byte stride where lane 9 lands on lane 10's address
    spread = address_spread(_lanes(lambda n: BUFFER + 16 * (10 if n == 9 else n)))
    # THEN the shared address does not make a broadcast: lane 9 is off the stride
    assert (spread.pattern, spread.stride_bytes) == ("strided", 16)
    assert spread.irregular_lanes == ((0, 9),)
    assert spread_text(spread) == "stride 16 bytes per lane; 1 lane off the stride"


def test_scattered_addresses_are_irregular_with_no_stride_to_be_off():
    rng = random.Random(24)
    offsets = rng.sample(range(0, 1 << 20, 4), 32)
    spread = address_spread(_lanes(lambda n: BUFFER + offsets[n]))
    assert (spread.pattern, spread.stride_bytes, spread.irregular_lanes) == ("irregular", None, ())
    assert spread_text(spread) == "32 distinct addresses, no common stride"


def test_a_broadcast_in_two_warps_is_one_broadcast():
    # GIVEN two warps, each with its 32 lanes on two addresses, the four addresses 64 bytes apart
    lanes = _lanes(lambda n: BUFFER + 64 * (n // 16))
    lanes += _lanes(lambda n: BUFFER + 128 + 64 * (n // 16), warp=1)
    spread = address_spread(lanes)
    assert (spread.pattern, spread.distinct, spread.address_step_bytes) == ("broadcast", 4, 64)
    assert spread.lanes_per_address == (16, 16)
