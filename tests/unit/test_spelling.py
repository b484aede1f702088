"""Sizes spelled for people, the same in the analysis's messages and in every report."""

from __future__ import annotations

import pytest

from postmortem.spelling import size_text


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (0, "0 bytes"),
        (812, "812 bytes"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (4700, "4.6 KiB"),
        (8_283_750, "7.9 MiB"),
        (1_288_490_189, "1.2 GiB"),
        (5 << 40, "5120.0 GiB"),
    ],
)
def test_a_size_is_spelled_in_the_largest_unit_below_1024(size, shown):
    assert size_text(size) == shown
