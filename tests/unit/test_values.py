"""Values spelled alike in every report: times in UTC."""

from __future__ import annotations

import pytest

from postmortem.report.values import utc_text


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (1_767_225_603, "2026-01-01T00:00:03Z"),
        (1_767_225_603.9, "2026-01-01T00:00:03Z"),  # to the second, never rounded up
    ],
)
def test_a_time_is_iso_8601_utc_to_the_second(seconds, shown):
    assert utc_text(seconds) == shown
