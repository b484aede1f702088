"""Sizes and coordinates spelled for people, alike in the analysis's messages and the reports."""

from __future__ import annotations

import pytest

from postmortem.spelling import dim3_text, size_text


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


@pytest.mark.parametrize(
    ("value", "shown"),
    [((5, 0, 0), "(5,0,0)"), ([64, 1, 1], "(64,1,1)"), ([67, 0, None], "(67,0,?)"), (None, "(?)")],
)
def test_a_coordinate_is_spelled_as_a_triple_or_a_question_mark(value, shown):
    assert dim3_text(value) == shown
