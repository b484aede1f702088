"""Files read by a name a user gives: a pipe, a device or a folder is refused at once (or,
where pipes are streamed, waited on for a bounded time), and a file is read within a bound."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from postmortem.errors import UnreadableFile
from postmortem.safefile import iter_pipe, open_regular, read_regular


def _refusal(path, **kwargs) -> str:
    with pytest.raises(UnreadableFile) as caught:
        read_regular(path, 1 << 20, **kwargs)
    assert "\n" not in str(caught.value)
    return caught.value.reason


def test_a_regular_file_is_read_whole(tmp_path):
    path = tmp_path / "rules.json"
    path.write_bytes(b"x" * 1000)
    assert read_regular(path, 1000) == b"x" * 1000


def test_a_file_past_the_bound_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "big.toml"
    path.write_bytes(b"#" * 1001)
    with pytest.raises(UnreadableFile, match=r"big.toml: cannot read: larger than 1,000 bytes"):
        read_regular(path, 1000)


def test_a_fifo_with_no_writer_is_refused_at_once(tmp_path):
    fifo = tmp_path / "rules.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert _refusal(fifo) == "not a regular file (a FIFO)"
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("/dev/zero", "not a regular file (a character device)"),
        ("/dev/null", "not a regular file (a character device)"),
    ],
)
def test_a_device_is_refused_not_read_forever(name, reason):
    if not Path(name).exists():
        pytest.skip(f"{name} is not here")
    assert _refusal(Path(name)) == reason


def test_a_folder_and_a_missing_file_are_one_line_errors(tmp_path):
    assert _refusal(tmp_path) == "not a regular file (a folder)"
    assert _refusal(tmp_path / "missing") == "No such file or directory"


def test_a_link_to_a_regular_file_is_followed(tmp_path):
    target = tmp_path / "target.toml"
    target.write_bytes(b"a = 1\n")
    link = tmp_path / "link.toml"
    link.symlink_to(target)
    assert read_regular(link, 100) == b"a = 1\n"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    assert _refusal(tmp_path / "to-fifo") == "not a regular file (a FIFO)"


def test_a_device_is_refused_where_pipes_are_streamed():
    with pytest.raises(UnreadableFile, match=r"not a regular file or a pipe \(a character"):
        open_regular(Path("/dev/zero"), pipes=True)


def _streamed(fifo, wait_s=5.0) -> bytes:
    with open_regular(fifo, pipes=True) as file:
        return b"".join(iter_pipe(file, fifo, 1 << 16, wait_s))


def test_a_pipe_no_process_writes_to_is_refused_after_the_wait(tmp_path):
    # GIVEN a named pipe that no process opens to write
    fifo = tmp_path / "host.log"
    os.mkfifo(fifo)
    # WHEN it is streamed with a wait of a fifth of a second
    started = time.monotonic()
    with pytest.raises(UnreadableFile) as caught:
        _streamed(fifo, wait_s=0.2)
    # THEN it is refused once the wait is over, not waited on forever
    assert caught.value.reason == "a pipe that no process writes to (waited 0.2 s)"
    assert 0.2 <= time.monotonic() - started < 5


def _writer(fifo, delay_s, body, hold_s=0.0):
    def write() -> None:
        time.sleep(delay_s)
        with fifo.open("wb") as writer:
            time.sleep(hold_s)
            writer.write(body)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_a_writer_that_comes_within_the_wait_is_read_to_its_end(tmp_path):
    fifo = tmp_path / "host.log"
    os.mkfifo(fifo)
    writer = _writer(fifo, 0.2, b"line\n" * 100_000)
    assert _streamed(fifo) == b"line\n" * 100_000
    writer.join(timeout=10)


def test_a_writer_that_is_silent_past_the_wait_is_still_read(tmp_path):
    # GIVEN a writer that opens the pipe at once but writes only after the wait is over
    fifo = tmp_path / "host.log"
    os.mkfifo(fifo)
    writer = _writer(fifo, 0.0, b"late\n", hold_s=0.6)
    time.sleep(0.1)
    # THEN it is a writer: what it writes is read
    assert _streamed(fifo, wait_s=0.2) == b"late\n"
    writer.join(timeout=10)


def test_a_writer_that_closes_without_writing_gives_nothing(tmp_path):
    fifo = tmp_path / "host.log"
    os.mkfifo(fifo)
    writer = _writer(fifo, 0.1, b"")
    assert _streamed(fifo) == b""
    writer.join(timeout=10)


def test_a_regular_file_opened_where_pipes_are_streamed_reads_as_usual(tmp_path):
    path = tmp_path / "host.log"
    path.write_bytes(b"abc")
    with open_regular(path, pipes=True) as file:
        assert file.read() == b"abc"
