"""The known-crashes file: read strictly, edited as a small diff, and the marks it gives."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, datetime, timezone
from pathlib import Path, PurePath

import pytest

from postmortem.analysis.fleet.signature import SignatureInput, SignatureRules, compute_signature
from postmortem.cubin.sass import SourceFrame
from postmortem.errors import KnownCrashesError
from postmortem.model import TimeSource
from postmortem.scan.fleet.group import History, group_rows
from postmortem.scan.fleet.known.edit import NEW_FILE, Change, apply_change, edit_text, toml_value
from postmortem.scan.fleet.known.judge import judge
from postmortem.scan.fleet.known.load import load_known, parse_known
from postmortem.scan.fleet.known.model import CrashState, KnownCrash, Lifecycle, Mark
from postmortem.scan.fleet.runs import CiRun, ci_run
from postmortem.scan.outputs.ci.github import source_in_checkout
from postmortem.scan.outputs.ci.policy import FailOn, fails, mark_of
from postmortem.scan.outputs.ci.tracker import COMMENT_LIMIT, tracker_comment
from tests.tooling import invoke
from tests.unit.test_scan_group import _row

DAY = 86400.0
FIX = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)

FILE = """\
# Known crashes of the serving kernels.

[crash.aaaaaaaaaaaa]  # the MoE one
title = "illegal address in fused_moe"
state = "open"   # bug 17

# Fixed in the spring.
[crash."bbbbbbbbbbbb"]
state = "fixed"
fixed_by = "#4512"  # the bounds check
fixed_on = 2026-11-20T12:00:00Z
crashed_builds = ["b1", "b2"]

[crash.cccccccccccc]
state = "ignored"
reason = "node 7's GPU"
until = 2026-12-31
until_count = 3
"""


def _parse(text: str):
    return parse_known(Path("known.toml"), text.encode())


def test_a_file_is_read_with_each_crash_its_state_and_header_line():
    known = _parse(FILE)
    assert [(c.id, c.state, c.line) for c in known.crashes] == [
        ("aaaaaaaaaaaa", CrashState.OPEN, 3),
        ("bbbbbbbbbbbb", CrashState.FIXED, 8),
        ("cccccccccccc", CrashState.IGNORED, 14),
    ]
    fixed = known.find("bbbbbbbbbbbb")
    assert (fixed.fixed_by, fixed.fixed_on, fixed.crashed_builds) == ("#4512", FIX, ("b1", "b2"))
    ignored = known.find("cccccccccccc")
    # a date alone is the end of that day
    assert ignored.until == datetime(2027, 1, 1, tzinfo=timezone.utc)
    assert (ignored.reason, ignored.until_count) == ("node 7's GPU", 3)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[crash.aaaaaaaaaaaa]\nstate = "closed"\n', "state must be one of open, fixed, ignored"),
        ('[crash.aaaaaaaaaaaa]\nstate = "open"\nfixd_by = "#1"\n', "unknown key 'fixd_by'"),
        ('[crash.aaaaaaaaaaaa]\nstate = "ignored"\n', "an ignored crash needs a reason"),
        ('[crash.NOT-AN-ID]\nstate = "open"\n', "not a signature id"),
        ('[crash.aaaaaaaaaaaa]\nstate = "fixed"\nfixed_on = "yesterday"\n', "must be a date"),
        ('[crash.aaaaaaaaaaaa]\nstate = "ignored"\nreason = "x"\nuntil_count = -1\n', "0 or more"),
        ('[crash.aaaaaaaaaaaa]\nstate = "fixed"\ncrashed_builds = "b1"\n', "list of build keys"),
        ("crashes = 1\n", "unknown top-level key 'crashes'"),
        ("[crash.aaaaaaaaaaaa\n", "not TOML"),
    ],
)
def test_a_wrong_file_is_refused_in_one_line_naming_the_table_and_its_line(text, said):
    with pytest.raises(KnownCrashesError) as raised:
        _parse(text)
    message = str(raised.value)
    assert said in message and "\n" not in message
    if "[crash." in text and "not TOML" not in said and "NOT-AN-ID" not in text:
        assert "(line 1)" in message


def test_a_file_that_cannot_be_read_is_refused(tmp_path):
    with pytest.raises(KnownCrashesError, match="cannot read"):
        load_known(tmp_path)  # a folder
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (5 << 20))
    with pytest.raises(KnownCrashesError, match="cannot read"):
        load_known(big)


def test_resolving_a_crash_changes_its_lines_only_and_keeps_every_comment():
    change = Change(
        "aaaaaaaaaaaa",
        (("state", "fixed"), ("fixed_by", "#9"), ("fixed_on", FIX), ("crashed_builds", ("b9",))),
        ("reason", "until", "until_count"),
    )
    edited = edit_text(FILE, change)
    assert (
        edited.replace(
            'state = "fixed"   # bug 17\nfixed_by = "#9"\nfixed_on = 2026-11-20T12:00:00Z\n'
            'crashed_builds = ["b9"]\n',
            'state = "open"   # bug 17\n',
        )
        == FILE
    )
    assert _parse(edited).find("aaaaaaaaaaaa").fixed_by == "#9"


def test_reopening_removes_the_old_state_keys_and_keeps_the_comments_around_them():
    change = Change(
        "bbbbbbbbbbbb", (("state", "open"),), ("fixed_by", "fixed_on", "crashed_builds")
    )
    edited = edit_text(FILE, change)
    assert '# Fixed in the spring.\n[crash."bbbbbbbbbbbb"]\nstate = "open"\n\n[crash.ccc' in edited
    assert "#4512" not in edited and "# bug 17" in edited


def test_a_crash_not_in_the_file_is_appended_as_a_new_table():
    edited = edit_text(FILE, Change("dddddddddddd", (("state", "open"), ("title", 'a "b"\x1b'))))
    assert edited == FILE + '\n[crash.dddddddddddd]\nstate = "open"\ntitle = "a \\"b\\"\\u001b"\n'
    assert _parse(edited).find("dddddddddddd").title == 'a "b"\x1b'


def test_the_first_edit_creates_the_file_with_its_explanation(tmp_path):
    path = tmp_path / "known-crashes.toml"
    apply_change(path, Change("aaaaaaaaaaaa", (("state", "open"),)))
    assert path.read_text().startswith(NEW_FILE)
    assert load_known(path).find("aaaaaaaaaaaa").state is CrashState.OPEN


def test_an_edit_a_multiline_string_defeats_is_refused_and_the_file_left_alone(tmp_path):
    # GIVEN a table whose multi-line string holds a line that looks like a table header
    path = tmp_path / "known.toml"
    text = '[crash.aaaaaaaaaaaa]\nstate = "open"\ntitle = """one\n[crash.x]\n"""\nkey = "k"\n'
    path.write_text(text)
    # WHEN a key after it is set
    with pytest.raises(KnownCrashesError, match="cannot edit in place"):
        apply_change(path, Change("aaaaaaaaaaaa", (("state", "ignored"), ("reason", "r"))))
    # THEN the file is as it was
    assert path.read_text() == text


def test_values_are_written_as_toml():
    assert toml_value(date(2026, 11, 20)) == "2026-11-20"
    assert toml_value(FIX) == "2026-11-20T12:00:00Z"
    assert toml_value(("a", "b")) == '["a", "b"]'
    assert toml_value("back\\slash\x7f") == '"back\\\\slash\\u007f"'
    with pytest.raises(TypeError):
        toml_value(True)


def _group(*rows):
    (group,) = group_rows(rows)
    return group


def _fixed(**fields):
    return KnownCrash("sig", CrashState.FIXED, 4, fixed_by="#4512", fixed_on=FIX, **fields)


def test_a_fixed_crash_seen_after_the_fix_in_a_new_build_has_regressed():
    rows = [replace(_row("late", FIX.timestamp() + DAY), build_key="new")]
    lifecycle = judge(_group(*rows), rows, _fixed(crashed_builds=("old",)), 0.0)
    assert (lifecycle.mark, lifecycle.after_fix) == (Mark.REGRESSED, 1)
    assert (
        lifecycle.detail == "fixed by #4512 on 2026-11-20 12:00 UTC; 1 dump(s) since, in build new"
    )


def test_old_builds_and_dumps_from_before_the_fix_are_not_a_regression():
    rows = [
        replace(_row("old build, late", FIX.timestamp() + DAY), build_key="old"),
        replace(_row("new build, early", FIX.timestamp() - DAY), build_key="new"),
    ]
    lifecycle = judge(_group(*rows), rows, _fixed(crashed_builds=("old",)), 0.0)
    assert lifecycle.mark is Mark.KNOWN and not lifecycle.acted_on
    assert "predate the fix" in lifecycle.detail


def test_a_regression_dated_by_file_times_only_says_so():
    rows = [replace(_row("late", FIX.timestamp() + DAY, source=TimeSource.MTIME), build_key="n")]
    assert "file times only" in judge(_group(*rows), rows, _fixed(), 0.0).detail


@pytest.mark.parametrize(
    ("until", "count", "found", "expired"),
    [(None, None, 5, False), (FIX, None, 1, True), (None, 3, 3, False), (None, 3, 4, True)],
)
def test_an_ignore_runs_out_at_its_date_or_its_count(until, count, found, expired):
    rows = [_row(f"d{n}", 100.0 + n) for n in range(found)]
    entry = KnownCrash("sig", CrashState.IGNORED, 2, reason="flaky", until=until, until_count=count)
    lifecycle = judge(_group(*rows), rows, entry, FIX.timestamp() + DAY)
    assert (lifecycle.mark, lifecycle.expired, lifecycle.acted_on) == (Mark.KNOWN, expired, expired)


def test_a_group_the_file_does_not_name_is_new_and_an_open_one_known():
    rows = [_row("a", 1.0)]
    assert judge(_group(*rows), rows, None, 0.0).mark is Mark.NEW
    open_one = judge(_group(*rows), rows, KnownCrash("sig", CrashState.OPEN, 7), 0.0)
    assert (open_one.mark, open_one.acted_on, open_one.line) == (Mark.KNOWN, True, 7)


@pytest.mark.parametrize(
    ("mark", "state", "expired", "failing"),
    [
        (Mark.NEW, None, False, {"new", "any"}),
        (Mark.REGRESSED, CrashState.FIXED, False, {"regressed", "any"}),
        (Mark.KNOWN, CrashState.OPEN, False, {"any"}),
        (Mark.KNOWN, CrashState.IGNORED, False, set()),
        (Mark.KNOWN, CrashState.IGNORED, True, {"any"}),
        (Mark.KNOWN, CrashState.FIXED, False, set()),
    ],
)
def test_fail_on_counts_the_groups_it_names(mark, state, expired, failing):
    group = replace(_group(_row("a", 1.0)), lifecycle=Lifecycle(mark, state, "", expired=expired))
    assert {str(f) for f in FailOn if fails(group, f)} == failing


def test_without_a_file_the_cache_history_marks_and_with_neither_every_group_is_new():
    group = _group(_row("a", 1.0))
    assert mark_of(group) is Mark.NEW
    history = History(1.0, 1.0, 1, (), new=False, regressed=True, quiet_days=9)
    assert mark_of(replace(group, history=history)) is Mark.REGRESSED
    assert mark_of(replace(group, history=replace(history, regressed=False))) is Mark.KNOWN


@pytest.mark.parametrize(
    ("path", "run"),
    [
        # the name docs/ci.md gives the artifact
        ("cuda-coredumps-unit-1-gpu-19283746501-2/cuda_coredump_h.1.2",
         CiRun("19283746501", 2, "unit-1-gpu")),
        # SGLang's runner folder, and its artifact downloaded into a folder named by the run
        ("27318076885-2/cuda_coredump_h.1.2", CiRun("27318076885", 2, None)),
        ("27318076885/cuda-coredumps-run-3/cuda_coredump_h", CiRun("27318076885", None, "run-3")),
        ("cuda-coredumps-run/cuda_coredump_h.1.2", CiRun(None, None, "run")),
        ("runs/19283746501/3/core", CiRun("19283746501", 3, None)),
        ("job-a/run-19283746501/attempt-1/core", CiRun("19283746501", 1, None)),
        ("dumps/2026-11-28/core", None),
        ("core_h.123.1732780800", None),
    ],
)  # fmt: skip
def test_a_ci_run_and_attempt_are_read_off_the_artifact_folders(path, run):
    assert ci_run(PurePath(path)) == run


def _signature_at(*files: str):

    chain = tuple(SourceFrame(file, 40 + n) for n, file in enumerate(files))
    facts = SignatureInput(14, "_Z1kPf", 0x40, chain, True)
    return compute_signature(facts, SignatureRules("test", ("/usr/local/cuda/",), 3))


def test_a_source_is_found_in_the_checkout_by_its_path_tails_then_by_a_unique_name(tmp_path):
    (tmp_path / "csrc" / "attn").mkdir(parents=True)
    (tmp_path / "csrc" / "attn" / "fwd.cu").write_text("")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "common.cuh").write_text("")
    # the build machine's path, by its tail; a library frame is passed over
    sig = _signature_at("/usr/local/cuda/include/cuda_fp16.hpp", "/build/x/csrc/attn/fwd.cu")
    assert source_in_checkout(sig, tmp_path) == ("csrc/attn/fwd.cu", 41)
    # a bare name that one file of the checkout has
    assert source_in_checkout(_signature_at("fwd.cu"), tmp_path) == ("csrc/attn/fwd.cu", 40)
    # a bare name two files have, a path that climbs out, or no checkout: none
    assert source_in_checkout(_signature_at("common.cuh"), tmp_path) is None
    assert source_in_checkout(_signature_at("../../etc/passwd"), tmp_path) is None
    assert source_in_checkout(sig, None) is None


def test_a_tracker_comment_of_thousands_of_groups_stays_within_githubs_limit():
    groups = [
        replace(
            _group(replace(_row(f"d{n}", 1.0), signature=_sig_named(n))), runs=("run 1 attempt 1",)
        )
        for n in range(3000)
    ]
    text = tracker_comment(groups, 3000, 0, None, FailOn.NEW)
    assert len(text) <= COMMENT_LIMIT
    assert "more groups not listed" in text and text.count("**new**") > 10


def _sig_named(n: int):

    facts = SignatureInput(14, f"_Z{len(f'k{n}')}k{n}Pf", 0x40, (SourceFrame("k.cu", n),), True)
    return compute_signature(facts, SignatureRules("test", (), 3))


def test_a_known_crashes_file_nested_too_deeply_is_refused_in_one_line():
    text = "[crash.aaaaaaaaaaaa]\nstate = " + "[" * 100_000 + "]" * 100_000 + "\n"
    with pytest.raises(KnownCrashesError, match="nested too deeply"):
        _parse(text)


def test_triage_refuses_a_scan_file_with_an_endless_line_and_leaves_the_file_alone(tmp_path):
    # GIVEN a sparse 2 GiB "scan" with no newline, and a known-crashes file
    rows = tmp_path / "rows.jsonl"
    with rows.open("wb") as file:
        file.truncate(2 << 30)
    known = tmp_path / "known.toml"
    known.write_text("# ours\n")
    # WHEN a crash is resolved from it
    done = invoke("triage", "resolve", "aaaaaaaaaaaa", "--scan", rows, "--file", known)
    # THEN one line says why, and the file is as it was
    assert done.returncode == 2 and "a line longer than" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert known.read_text() == "# ours\n"
