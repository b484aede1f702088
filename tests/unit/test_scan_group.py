"""Grouping rows by signature: counts, facets, the earliest dump, near-duplicates; progress."""

from __future__ import annotations

from dataclasses import replace

import pytest

from postmortem.analysis.fleet.signature import SignatureInput, SignatureRules, compute_signature
from postmortem.cubin.sass import SourceFrame
from postmortem.scan.fleet.group import coarse_groups, group_rows
from postmortem.scan.row import DumpRow, error_row, row_from_dict, row_to_dict

RULES = SignatureRules("test", (), 3)


def _sig(line=3, offset=0x40):
    facts = SignatureInput(14, "_Z1kPf", offset, (SourceFrame("k.cu", line),), True)
    return compute_signature(facts, RULES)


def _row(path, time, source="metadata", host=None, pid=None, sig=None, driver="575.51"):
    return DumpRow(
        path, 100, time, "ok", None, time, source, host, pid, driver, ("H100",), 14,
        "void k(float*)", 1, sig or _sig(),
    )  # fmt: skip


def test_groups_count_facets_and_sort_by_count():
    rows = [
        _row("a", 300.0, host="h1", pid=1),
        _row("b", 100.0, host="h2", pid=2, driver="580.65"),
        _row("c", 200.0, host="h1", pid=3),
        _row("d", 50.0, sig=_sig(line=9)),
        error_row("e", 0, 10.0, "error", "e: truncated at byte 4"),
    ]
    groups = group_rows(rows)
    assert [g.count for g in groups] == [3, 1]
    big = groups[0]
    assert big.hosts == (("h1", 2), ("h2", 1))
    assert big.pids == (1, 2, 3)
    assert big.driver_versions == ("575.51", "580.65")
    assert (big.first_seen, big.last_seen) == (100.0, 300.0)
    assert big.dumps == ("b", "c", "a") and big.earliest == "b"


def test_earliest_prefers_metadata_timestamps_over_mtimes():
    rows = [_row("old-mtime", 10.0, source="mtime"), _row("meta", 500.0, source="metadata")]
    (group,) = group_rows(rows)
    assert group.earliest == "meta" and group.earliest_source == "metadata"
    assert group.first_seen == 10.0


def test_coarse_groups_show_near_duplicates_only():
    rows = [_row("a", 1.0), _row("b", 2.0, sig=_sig(line=9)), _row("c", 3.0, sig=_sig(offset=0x80))]
    groups = group_rows(rows)
    (coarse,) = coarse_groups(groups)
    assert coarse.count == 3 and len(coarse.signatures) == 3
    assert coarse_groups(group_rows(rows[:1])) == ()


def test_rows_survive_their_json_form():
    row = replace(_row("a", 1.0, host="h", pid=4), report="r/a.html")
    assert row_from_dict(row_to_dict(row)) == row
    broken = error_row("x", 1, 2.0, "error", "x: not a CUDA coredump")
    assert row_from_dict(row_to_dict(broken)) == broken


def test_a_group_counts_its_builds_and_names_the_first_to_crash():
    # GIVEN one signature crashing in three builds; the earliest dump by metadata timestamp
    # is of build "bbbb", although a dump timed only by its mtime is older
    rows = [
        replace(_row("late", 300.0), build_key="cccc"),
        replace(_row("first", 100.0), build_key="bbbb"),
        replace(_row("mtime-only", 10.0, source="mtime"), build_key="aaaa"),
        replace(_row("again", 200.0), build_key="bbbb"),
        _row("no-module", 50.0),
    ]
    # WHEN grouped
    (group,) = group_rows(rows)
    # THEN the group spans three builds, and "bbbb" crashed first
    assert (group.builds, group.first_build) == (3, "bbbb")
    # AND without build keys there are no builds to name
    (bare,) = group_rows([_row("x", 1.0)])
    assert (bare.builds, bare.first_build) == (0, None)


def test_a_cached_row_without_a_build_key_is_analyzed_again():
    data = row_to_dict(replace(_row("a", 1.0), build_key="ab12"))
    assert row_from_dict(data).build_key == "ab12"
    del data["build_key"]
    with pytest.raises(KeyError):
        row_from_dict(data)
