"""The watch before a trigger (`postmortem/capture/watch.py`) and the naming of asked-for
dumps (`capture/dumps.py`): the log followed as tail -F, bounded; each condition; the
options that do not go together."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import postmortem.capture.watch as watch_module
from postmortem.capture.dumps import (
    crash_folder_dumps,
    dump_pid,
    matching_pipes,
    triggered_pid,
)
from postmortem.capture.watch import (
    Activity,
    DeadlineCondition,
    LineCondition,
    LogFollower,
    QuietCondition,
    SilenceCondition,
    WatchSpec,
    arm,
    check_spec,
    first_match,
    process_alive,
    shorten,
    watch,
)
from postmortem.errors import BadOption, UnreadableFile


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


def test_the_log_is_followed_from_its_end_a_whole_line_at_a_time(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"old line\n")
    follower = LogFollower(log)
    assert follower.poll() == []
    append(log, b"first\r\nsecond with no end")
    assert follower.poll() == [b"first"]
    append(log, b" yet\n")
    assert follower.poll() == [b"second with no end yet"]


def test_a_rotated_log_is_read_to_its_end_then_the_new_one_from_its_start(tmp_path):
    # GIVEN a followed log
    log = tmp_path / "serve.log"
    log.write_bytes(b"")
    follower = LogFollower(log)
    # WHEN a line is written, the log moved away, and a new one started under its name
    append(log, b"last of the old\n")
    log.rename(tmp_path / "serve.log.1")
    log.write_bytes(b"first of the new\n")
    # THEN both lines are seen, in order, and the new file goes on being followed
    assert follower.poll() == [b"last of the old", b"first of the new"]
    append(log, b"more\n")
    assert follower.poll() == [b"more"]


def test_a_log_truncated_in_place_is_read_again_from_its_start(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"x" * 100 + b"\n")
    follower = LogFollower(log)
    log.write_bytes(b"after truncation\n")
    assert follower.poll() == [b"after truncation"]


def test_a_line_written_while_the_log_is_polled_is_not_taken_for_a_truncation(
    tmp_path, monkeypatch
):
    # GIVEN a followed log, and a writer that appends just after the follower looks at the name
    log = tmp_path / "train.log"
    log.write_bytes(b"an old line\n")
    follower = LogFollower(log)
    looked = watch_module._ident

    def look_then_write(path: Path) -> object:
        seen = looked(path)
        append(log, b"new line\n")
        return seen

    monkeypatch.setattr(watch_module, "_ident", look_then_write)
    # WHEN it polls, THEN it gives the new line once, and never the old one again
    assert follower.poll() == [b"new line"]
    monkeypatch.setattr(watch_module, "_ident", looked)
    assert follower.poll() == []


def test_a_log_that_appears_later_is_read_from_its_start(tmp_path):
    log = tmp_path / "later.log"
    follower = LogFollower(log)
    assert follower.poll() == []
    log.write_bytes(b"hello\n")
    assert follower.poll() == [b"hello"]


def test_a_huge_line_is_cut_and_the_rest_of_it_skipped_in_bounded_memory(tmp_path):
    # GIVEN a follower that keeps 1 KiB of a line
    log = tmp_path / "serve.log"
    log.write_bytes(b"")
    follower = LogFollower(log, max_line=1024)
    # WHEN 5 MB arrive without a newline, then the line ends and another follows
    append(log, b"A" * 5_000_000)
    lines = follower.poll()
    append(log, b"A" * 1000 + b"\nnext\n")
    lines += follower.poll()
    # THEN the long line is given once, cut, and the next line is whole
    assert lines == [b"A" * 1024, b"next"]
    assert len(follower._pending) <= 1024


def test_binary_junk_is_decoded_with_replacement_and_matched_safely(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"")
    condition = LineCondition(LogFollower(log), re.compile("Watchdog caught"))
    append(
        log, bytes(range(256)) + b"\n\xff\xfe\x00 Watchdog caught collective operation timeout\n"
    )
    reason = condition.check(0.0)
    assert reason is not None and "matched" in reason and "\ufffd" in reason


def test_a_matched_line_is_shortened_in_the_reason():
    assert shorten("x" * 300) == "x" * 200 + "…"
    assert shorten("short") == "short"


def test_the_quiet_condition_counts_from_the_last_change(tmp_path):
    metrics = tmp_path / "metrics.prom"
    metrics.write_text("requests 1\n")
    quiet = QuietCondition(metrics, 5.0, armed_at=100.0)
    assert quiet.check(103.0) is None
    metrics.write_text("requests 22\n")  # a change: the quiet time starts again
    assert quiet.check(104.0) is None
    assert quiet.check(108.9) is None
    reason = quiet.check(109.0)
    assert reason is not None and "unchanged for 5.0 s" in reason


def test_the_deadline_and_the_silence_conditions():
    assert DeadlineCondition(10, armed_at=50).check(59.9) is None
    assert DeadlineCondition(10, armed_at=50).check(60) == "deadline of 10 s reached"
    activity = Activity()
    silence = SilenceCondition(activity, 2.0)
    assert silence.check(activity.last + 1.0) is None
    assert "no output for 2.5 s" in (silence.check(activity.last + 2.5) or "")


def test_the_watch_fires_on_the_first_condition_that_holds():
    clock = iter([0.0, 0.0, 0.1, 0.1, 0.3, 0.3]).__next__
    fired = watch([DeadlineCondition(0.25, armed_at=0.0)], lambda: True, interval=0, clock=clock)
    assert fired is not None and fired.reason == "deadline of 0.25 s reached"
    assert fired.after_s == pytest.approx(0.3)


def test_the_watch_ends_without_firing_when_the_process_is_gone():
    assert watch([DeadlineCondition(100, armed_at=0.0)], lambda: False) is None


def test_the_watch_stops_when_asked():
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    assert (
        watch([DeadlineCondition(100, armed_at=time.monotonic())], lambda: True, stop=stop) is None
    )


@pytest.mark.parametrize(
    ("spec", "option"),
    [
        pytest.param(WatchSpec(), "--watch", id="nothing-armed"),
        pytest.param(WatchSpec(on_line="x"), "--on-line", id="line-without-log"),
        pytest.param(WatchSpec(quiet_s=3), "--quiet-for", id="quiet-without-file"),
        pytest.param(WatchSpec(on_line="(", log=Path("l")), "--on-line", id="bad-regex"),
    ],
)
def test_options_that_do_not_go_together_are_one_bad_option(spec, option):
    with pytest.raises(BadOption) as caught:
        check_spec(spec)
    assert caught.value.option == option and "\n" not in str(caught.value)


def test_arming_refuses_a_missing_file_and_a_pipe(tmp_path):
    with pytest.raises(UnreadableFile):
        arm(WatchSpec(on_line="x", log=tmp_path / "missing"), 0.0)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableFile, match="not a regular file"):
        arm(WatchSpec(quiet_s=1, metrics=fifo), 0.0)


def test_the_armed_conditions_are_described_in_one_line(tmp_path):
    spec = WatchSpec("timeout", Path("a.log"), Path("m"), 30, 600)
    assert spec.describe() == (
        "a line of a.log matching 'timeout'; a.log or m unchanged for 30 s; 600 s passed"
    )


def test_a_process_that_exits_is_no_longer_alive():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    alive = process_alive(child.pid)
    assert alive()
    deadline = time.monotonic() + 20
    while alive() and time.monotonic() < deadline:  # a zombie counts as gone
        time.sleep(0.05)
    assert not alive()
    child.wait()


def test_sglang_s_trigger_line_gives_its_pid():
    line = b"[2025-11-27 02:00:00 TP0] Triggered CUDA user coredump for PID 4242 via /w/corepipe"
    assert triggered_pid(line) == 4242
    assert triggered_pid(b"Failed to trigger CUDA user coredump for PID 4242 via /w/p") is None
    assert triggered_pid(b"x" * 100_000) is None


def test_a_dump_s_pid_is_read_from_capture_s_sglang_s_and_the_driver_s_names():
    assert dump_pid(Path("core_node.4242.1764208800.nvcudmp"), "/d/core_%h.%p.%t.nvcudmp") == 4242
    assert dump_pid(Path("core.cuda.1764208800.77")) == 77
    assert dump_pid(Path("core_1764208800_node_13.nvcudmp")) == 13
    assert dump_pid(Path("whatever.bin"), "/d/%x%p") is None


def test_sglang_s_crash_folder_dumps_are_found_in_a_folder_per_host(tmp_path):
    (tmp_path / "node-1").mkdir()
    dump = tmp_path / "node-1" / "core.cuda.1764208800.77"
    dump.write_bytes(b"")
    (tmp_path / "core.cuda.notes.txt").write_bytes(b"")
    assert crash_folder_dumps(tmp_path, since=0) == [dump]
    assert crash_folder_dumps(tmp_path, since=time.time() + 60) == []


def test_the_pipes_of_every_process_are_found_by_the_pipe_pattern(tmp_path):
    host = socket.gethostname()
    pipe = tmp_path / f"corepipe.{host}.77"
    os.mkfifo(pipe)
    (tmp_path / f"corepipe.{host}.78").write_text("")  # not a pipe
    found = matching_pipes(str(tmp_path / "corepipe.%h.%p"), host=host, base=tmp_path, since=0)
    assert found == [pipe]


def test_a_burst_too_large_for_a_poll_is_skipped_to_its_newest_lines_and_said(tmp_path):
    # GIVEN a followed log, and a watch for an engine's dying line
    log = tmp_path / "serve.log"
    log.write_bytes(b"starting\n")
    condition = LineCondition(LogFollower(log), re.compile(r"EngineDeadError"))
    # WHEN 32 MiB of short lines arrive at once, the dying line last
    burst = b"".join(b"step %07d loss 1.25\n" % i for i in range(1_700_000))
    assert len(burst) > 32 << 20
    append(log, burst + b"vllm EngineDeadError: EngineCore encountered an issue\n")
    started = time.monotonic()
    reason = condition.check(0.0)
    seconds = time.monotonic() - started
    # THEN the first poll fires on it, and says how much of the log it skipped
    skipped = log.stat().st_size - watch_module.READ_PER_POLL - len(b"starting\n")
    assert reason == (
        f"{log}: matched vllm EngineDeadError: EngineCore encountered an issue"
        f" (the watch fell behind the log and skipped {skipped} bytes of it)"
    )
    print(f"\n32 MiB burst: fired in {seconds:.2f} s, {skipped} bytes skipped")


def test_a_skip_gives_only_whole_lines_and_loses_none_past_a_line_end(tmp_path, monkeypatch):
    # GIVEN a follower that reads 64 bytes a poll, and 10 lines of 16 bytes behind it
    monkeypatch.setattr(watch_module, "READ_PER_POLL", 64)
    log = tmp_path / "serve.log"
    log.write_bytes(b"")
    follower = LogFollower(log)
    lines = [b"line %010d" % i for i in range(10)]
    append(log, b"".join(line + b"\n" for line in lines))
    # WHEN it polls; THEN it gives the last 4 lines, whole, and counts the 6 before as skipped
    assert follower.poll() == lines[-4:]
    assert follower.skipped_bytes == 6 * 16
    # AND a skip that lands inside a line drops that line's end rather than give it cut
    append(log, b"x" * 100 + b"\n" + b"".join(line + b"\n" for line in lines[:3]))
    assert follower.poll() == lines[:3]
    assert follower.skipped_bytes == 6 * 16 + (101 + 3 * 16 - 64)
    assert follower.poll() == []


def test_a_burst_a_poll_can_read_is_read_whole(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"")
    follower = LogFollower(log)
    count = (watch_module.READ_PER_POLL - 1) // 20
    append(log, b"".join(b"step %013d\n" % i for i in range(count)))
    lines = follower.poll()
    assert len(lines) == count and lines[-1] == b"step %013d" % (count - 1)
    assert follower.skipped_bytes == 0


@pytest.mark.parametrize(
    ("pattern", "log", "matched"),
    [
        pytest.param(r"^ERROR", b"an ERROR inside\nERROR at the start\n", "ERROR at the start",
                     id="start-anchor-per-line"),
        pytest.param(r"timeout$", b"timeout, then more\nsaw a timeout\r\nnext\n", "saw a timeout",
                     id="end-anchor-before-crlf"),
        pytest.param(r"first\s+second", b"first\nsecond\n", None, id="never-across-lines"),
        pytest.param(r"first\s+second|second", b"first\nsecond\n", "second",
                     id="a-cross-line-candidate-then-the-real-match"),
        pytest.param(r"(?s)a.*z", b"a\nz\naz\n", "az", id="dotall-stays-in-its-line"),
        pytest.param(r"", b"one\ntwo\n", "one", id="empty-pattern-matches-the-first-line"),
        pytest.param("été", "un été\n".encode(), "un été", id="utf-8"),
    ],
)  # fmt: skip
def test_a_block_of_lines_is_matched_one_line_at_a_time(tmp_path, pattern, log, matched):
    path = tmp_path / "serve.log"
    path.write_bytes(b"")
    condition = LineCondition(LogFollower(path), re.compile(pattern))
    append(path, log)
    reason = condition.check(0.0)
    assert reason == (None if matched is None else f"{path}: matched {matched}")


def test_a_match_past_the_cut_of_a_long_line_does_not_count_even_in_one_block(tmp_path):
    # GIVEN a follower that keeps 1 KiB of a line
    log = tmp_path / "serve.log"
    log.write_bytes(b"")
    condition = LineCondition(LogFollower(log, max_line=1024), re.compile("NCCL timeout"))
    # WHEN three long lines are read in one piece: the match after the cut, across it, before it
    append(
        log,
        b"x" * 2000 + b" NCCL timeout\n"
        + b"\xff" * 1020 + b"NCCL timeout\n"
        + b"NCCL timeout " + b"z" * 2000 + b"\n",
    )  # fmt: skip
    # THEN only the last counts, as cut
    expected = "NCCL timeout " + "z" * (1024 - 13)
    assert condition.check(0.0) == f"{log}: matched {shorten(expected)}"


def test_a_matched_line_is_given_cut_as_it_was_matched():
    pattern = re.compile("NCCL timeout")
    scan = re.compile(pattern.pattern, re.MULTILINE)
    line = first_match(b"ok\nNCCL timeout " + b"z" * 2000 + b"\n", pattern, scan, 1024)
    assert line == "NCCL timeout " + "z" * (1024 - 13)
    assert first_match(b"ok\n\xffNCCL timeout\n", pattern, scan, 1024) == "\ufffdNCCL timeout"
