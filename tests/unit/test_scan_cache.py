"""The scan cache trusts stat only when stat can vouch for the file (git's index rule)."""

from __future__ import annotations

import time

from postmortem.scan.row import RowStatus, error_row
from postmortem.scan.store.cache import FileState, ScanCache

ROW = error_row("/dumps/a.nvcudmp", 10, 1.0, RowStatus.ERROR, "truncated at byte 4")
OLD = time.time_ns() - 3600 * 10**9
STATE = FileState(size=10, mtime_ns=OLD, ctime_ns=OLD, inode=7, device=1)


def _never() -> str:
    raise AssertionError("the fingerprint was taken although stat vouched for the file")


def test_an_unchanged_stat_is_a_hit_without_reading_the_file(tmp_path):
    with ScanCache(tmp_path / "c.sqlite") as cache:
        cache.put("/dumps/a.nvcudmp", "s", STATE, "print", ROW)
        assert cache.get("/dumps/a.nvcudmp", "s", STATE, _never) == ROW


def test_a_moved_ctime_takes_the_fingerprint_again(tmp_path):
    moved = FileState(10, OLD, OLD + 1, 7, 1)  # rewritten, mtime put back
    with ScanCache(tmp_path / "c.sqlite") as cache:
        cache.put("/dumps/a.nvcudmp", "s", STATE, "print", ROW)
        assert cache.get("/dumps/a.nvcudmp", "s", moved, lambda: "print") == ROW
        assert cache.get("/dumps/a.nvcudmp", "s", moved, lambda: "other") is None
        assert (cache.hits, cache.misses) == (1, 1)


def test_a_file_recorded_right_after_it_changed_is_always_checked(tmp_path):
    racy = FileState(10, time.time_ns(), time.time_ns(), 7, 1)
    with ScanCache(tmp_path / "c.sqlite") as cache:
        cache.put("/dumps/a.nvcudmp", "s", racy, "print", ROW)
        assert cache.get("/dumps/a.nvcudmp", "s", racy, lambda: "other") is None


def test_other_settings_or_size_miss(tmp_path):
    with ScanCache(tmp_path / "c.sqlite") as cache:
        cache.put("/dumps/a.nvcudmp", "s", STATE, "print", ROW)
        assert cache.get("/dumps/a.nvcudmp", "t", STATE, _never) is None
        bigger = FileState(11, OLD, OLD, 7, 1)
        assert cache.get("/dumps/a.nvcudmp", "s", bigger, _never) is None
