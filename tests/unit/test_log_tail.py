"""`read_log_tail`: the end of a log, bounded in bytes and, for a pipe, in time (a pipe that
no process writes to, a writer that never ends, one that never writes, a line of a GiB)."""

from __future__ import annotations

import os
import threading

import pytest

from postmortem.errors import UnreadableFile
from postmortem.host.reader import read_log_tail
from tests.fifo import rescued

GUARD_S = 60
"""A thread still reading after this long failed (the reads under test stop within seconds)."""
LINE = b"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus\n"


def _read_in_thread(*args, **kwargs):
    # The read runs in a thread joined with a guard: a hang fails the test, never blocks it.
    outcome = {}

    def read():
        try:
            outcome["tail"] = read_log_tail(*args, **kwargs)
        except UnreadableFile as error:
            outcome["error"] = error

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(GUARD_S)
    assert not reader.is_alive(), "the read did not stop"
    return outcome


def _writer(fifo, write):
    # A process-side writer of the FIFO: opens it (unblocked by the reader) and runs `write`.
    def run():
        try:
            with open(fifo, "wb", buffering=0) as stream:
                write(stream)
        except BrokenPipeError:  # the reader stopped reading: what is under test
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_regular_log_that_fits_is_read_whole(tmp_path):
    log = tmp_path / "kern.log"
    log.write_bytes(b"one\ntwo\n")
    tail = read_log_tail(log, 100)
    assert (tail.data, tail.size_bytes, tail.read_from, tail.still_open) == (
        b"one\ntwo\n", 8, 0, False,
    )  # fmt: skip


@pytest.mark.parametrize(("tail_bytes", "read_from"), [(10, 18), (6, 18), (7, 18), (13, 11)])
def test_a_regular_log_longer_than_the_tail_is_cut_to_whole_lines(tmp_path, tail_bytes, read_from):
    log = tmp_path / "kern.log"
    text = b"first line\nsecond\nthird\n"
    log.write_bytes(text)
    tail = read_log_tail(log, tail_bytes)
    assert (tail.data, tail.read_from, tail.size_bytes) == (text[read_from:], read_from, 24)


def test_a_single_line_of_a_gib_costs_only_the_tail(tmp_path):
    # GIVEN a log of one line of 1 GiB (sparse: zeros, no newline)
    log = tmp_path / "one-line.log"
    with open(log, "wb") as stream:
        stream.truncate(1 << 30)
    # WHEN its tail is read
    tail = read_log_tail(log, 1 << 20)
    # THEN only the tail was read: part of that line, and where it starts
    assert len(tail.data) == 1 << 20 and set(tail.data) == {0}
    assert (tail.size_bytes, tail.read_from) == (1 << 30, (1 << 30) - (1 << 20))


def test_a_pipe_no_process_writes_to_is_refused_after_the_writer_wait(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with rescued(fifo, seconds=GUARD_S / 2):
        outcome = _read_in_thread(fifo, 100, writer_wait_s=0.2)
    assert str(outcome["error"]) == (
        f"{fifo}: cannot read: a pipe that no process writes to (waited 0.2 s)"
    )


def test_an_endless_pipe_is_read_for_its_time_and_only_its_tail_kept(tmp_path):
    # GIVEN a FIFO a writer fills for ever (as `<(yes 'NVRM: Xid …')` does)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    stop = threading.Event()

    def forever(stream):
        while not stop.is_set():
            stream.write(LINE * 1000)

    writer = _writer(fifo, forever)
    # WHEN it is read for half a second, keeping 64 KiB
    outcome = _read_in_thread(fifo, 64 << 10, pipe_s=0.5)
    stop.set()
    writer.join(GUARD_S)
    # THEN it stopped with the writer still there, whole lines of its end kept: the
    # unfinished last one left out
    tail = outcome["tail"]
    assert tail.still_open
    assert 0 < len(tail.data) <= 64 << 10 < tail.size_bytes
    assert 0 <= tail.size_bytes - (tail.read_from + len(tail.data)) < len(LINE)
    assert tail.data == LINE * (len(tail.data) // len(LINE))


def test_a_writer_that_holds_the_pipe_open_without_writing_is_left_there(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    release = threading.Event()

    def one_line_then_silence(stream):
        stream.write(b"NVRM: Xid (PCI:0000:3b:00): 43, pid=1\n")
        release.wait(GUARD_S)

    writer = _writer(fifo, one_line_then_silence)
    outcome = _read_in_thread(fifo, 1 << 20, pipe_s=0.3)
    release.set()
    writer.join(GUARD_S)
    tail = outcome["tail"]
    assert (tail.data, tail.read_from, tail.still_open) == (
        b"NVRM: Xid (PCI:0000:3b:00): 43, pid=1\n", 0, True,
    )  # fmt: skip


def test_a_pipe_whose_writer_finishes_is_read_to_its_end(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    lines = b"".join(b"line %d\n" % n for n in range(20000))
    writer = _writer(fifo, lambda stream: stream.write(lines))
    outcome = _read_in_thread(fifo, 1000, pipe_s=GUARD_S / 2)
    writer.join(GUARD_S)
    tail = outcome["tail"]
    assert not tail.still_open and tail.size_bytes == len(lines)
    assert lines.endswith(tail.data) and tail.data.startswith(b"line ")
    assert lines[tail.read_from - 1 : tail.read_from] == b"\n"


@pytest.mark.parametrize("name", ["missing", "folder"])
def test_a_log_that_is_not_there_or_a_folder_is_one_error(tmp_path, name):
    path = tmp_path / name
    if name == "folder":
        path.mkdir()
    with pytest.raises(UnreadableFile) as caught:
        read_log_tail(path)
    assert str(caught.value).startswith(f"{path}: cannot read: ")


def test_a_pipe_of_one_line_longer_than_the_tail_keeps_its_end(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    line = bytes(range(256)).replace(b"\n", b"") * 100
    writer = _writer(fifo, lambda stream: stream.write(line))
    outcome = _read_in_thread(fifo, 1000, pipe_s=GUARD_S / 2)
    writer.join(GUARD_S)
    tail = outcome["tail"]
    assert (tail.data, tail.read_from, tail.still_open) == (line[-1000:], len(line) - 1000, False)
