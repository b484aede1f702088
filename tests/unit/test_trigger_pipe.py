"""`postmortem trigger`: the pipe found, refused when it is not one, the trigger written as the
driver expects, and a clear error when nobody reads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

import postmortem.capture.trigger as trigger_module
from postmortem.capture.trigger import TRIGGER_BYTES, find_pipe, pid_of_pipe, trigger
from postmortem.errors import NotAFifo, PipeNotFound
from tests.tooling import invoke


def run(*args: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`postmortem trigger` in a subprocess, with a time limit (a FIFO may block)."""
    argv = [sys.executable, "-m", "postmortem", "trigger", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def run_here(*args: object) -> types.SimpleNamespace:
    """`postmortem trigger` in this process, where no FIFO is opened."""
    return invoke("trigger", *args)


def one_line_error(
    result: subprocess.CompletedProcess[str] | types.SimpleNamespace, status: int
) -> str:
    assert result.returncode == status, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ")
    return line


def test_a_path_that_is_not_a_fifo_is_refused_with_exit_2(tmp_path):
    regular = tmp_path / "corepipe.h.1"
    regular.write_text("")
    line = one_line_error(run_here(regular), 2)
    assert "not a coredump pipe (a FIFO): it is a regular file" in line
    assert "a folder" in one_line_error(run_here(tmp_path), 2)


def test_a_fifo_with_no_reader_times_out_quickly_with_one_line(tmp_path):
    # GIVEN a FIFO that no process reads
    fifo = tmp_path / "corepipe.h.1"
    os.mkfifo(fifo)
    # WHEN a trigger is written with a short timeout
    started = time.monotonic()
    result = run(fifo, "--timeout", "0.3", "--wait", "1")
    # THEN it gives up in about that time, in one line, with the timed-out status
    assert time.monotonic() - started < 10
    line = one_line_error(result, 5)
    assert "no process reads this coredump pipe (waited 0.3 s)" in line


def test_neither_or_both_of_pipe_and_pid_is_a_one_line_error(tmp_path):
    assert "--pid" in one_line_error(run_here(), 2)
    assert "--pid" in one_line_error(run_here(tmp_path / "p", "--pid", "1"), 2)


def test_the_trigger_is_a_mebibyte_of_zeros_taken_by_the_reader(tmp_path):
    # GIVEN a FIFO with a reader, as the driver has one
    fifo = tmp_path / "corepipe.h.1"
    os.mkfifo(fifo)
    taken = bytearray()

    def read() -> None:
        with open(fifo, "rb") as reader:
            while chunk := reader.read(65536):
                taken.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    # WHEN the trigger is written
    done = trigger(fifo, timeout=5)
    reader.join(5)
    # THEN all of it arrived, zeros only
    assert done.written_bytes == TRIGGER_BYTES == len(taken)
    assert not any(taken)


def test_refusing_a_non_fifo_raises_the_typed_error(tmp_path):
    with pytest.raises(NotAFifo):
        trigger(tmp_path, timeout=0.1)


def test_the_pipe_of_a_pid_is_found_in_capture_s_folder(tmp_path):
    # GIVEN the pipe `capture --hang` names for this process in its folder
    pid = os.getpid()
    fifo = tmp_path / f"corepipe.{socket.gethostname()}.{pid}"
    os.mkfifo(fifo)
    # WHEN it is looked for by pid; THEN it is found, and its name gives the pid back
    assert find_pipe(pid, tmp_path, {}) == fifo
    assert pid_of_pipe(fifo) == pid
    assert pid_of_pipe(Path("corepipe.cuda.node-1.77")) == 77
    assert pid_of_pipe(Path("pipe")) is None


def test_no_pipe_for_a_pid_names_where_it_looked(tmp_path):
    with pytest.raises(PipeNotFound) as caught:
        find_pipe(os.getpid(), tmp_path, {})
    assert str(tmp_path) in str(caught.value)
    assert "CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1" in (caught.value.hint or "")


def swap_while_waiting(monkeypatch, swap) -> list[float]:
    """Runs `swap` once, at the first wait of a trigger between two tries to open its pipe
    (no reader yet), so the name changes after the pipe was checked: the waits seen."""
    waits: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if not waits:
            swap()
        waits.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(trigger_module.time, "sleep", sleep)
    return waits


def to_regular_file(fifo: Path, victim: Path) -> Path:
    """Renames `victim` over the pipe (as anyone who can write the folder can): its path now."""
    os.replace(victim, fifo)
    return fifo


def to_symlink(fifo: Path, victim: Path) -> Path:
    """Puts a link to `victim` in the pipe's place: `victim`'s path, unchanged."""
    link = fifo.with_name("link")
    link.symlink_to(victim)
    os.replace(link, fifo)
    return victim


@pytest.mark.parametrize(
    ("swap", "found"),
    [
        pytest.param(to_regular_file, "a regular file", id="regular-file"),
        pytest.param(to_symlink, "a symbolic link", id="symlink"),
    ],
)
def test_a_pipe_replaced_while_the_trigger_waits_is_never_written(
    tmp_path, monkeypatch, swap, found
):
    # GIVEN a FIFO that no process reads yet, and a file of someone's, byte for byte known
    fifo = tmp_path / "corepipe.h.1"
    os.mkfifo(fifo)
    content = bytes(range(256)) * 64
    victim = tmp_path / "elsewhere" / "victim.bin"
    victim.parent.mkdir()
    victim.write_bytes(content)
    before = victim.stat()
    # WHEN the trigger, waiting for a reader, finds the pipe's name made to lead to that file
    moved: list[Path] = []
    waits = swap_while_waiting(monkeypatch, lambda: moved.append(swap(fifo, victim)))
    result = run_here(fifo, "--timeout", "60", "--wait", "1")
    # THEN it stops at once with one line, and the file is as it was
    assert waits, "the name was never swapped: the trigger did not wait"
    line = one_line_error(result, 2)
    assert f"{fifo}: not a coredump pipe (a FIFO): it is {found}" in line
    (after,) = moved
    assert after.read_bytes() == content
    assert (after.stat().st_size, after.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_pipe_replaced_while_waiting_raises_the_typed_error(tmp_path, monkeypatch):
    fifo = tmp_path / "corepipe.h.1"
    os.mkfifo(fifo)
    victim = tmp_path / "victim"
    victim.write_bytes(b"kept\n")
    swap_while_waiting(monkeypatch, lambda: to_regular_file(fifo, victim))
    with pytest.raises(NotAFifo) as caught:
        trigger(fifo, timeout=60)
    assert caught.value.found == "a regular file"
    assert fifo.read_bytes() == b"kept\n"


def test_a_symbolic_link_to_a_read_fifo_is_refused_and_nothing_is_written(tmp_path):
    # GIVEN a FIFO with a reader, and a link to it where a pipe is expected
    fifo = tmp_path / "real-pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    link = tmp_path / "corepipe.h.1"
    link.symlink_to(fifo)
    try:
        # WHEN the trigger is written through the link; THEN it is refused, the pipe empty
        line = one_line_error(run_here(link, "--timeout", "1", "--wait", "1"), 2)
        assert "it is a symbolic link" in line
        assert os.read(reader, 4096) == b""  # no writer, and no zeros left in it
    finally:
        os.close(reader)
