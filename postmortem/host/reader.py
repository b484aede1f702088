"""Open host logs safely and read what matters of them, bounded, into `HostLogFile`s.

A log may be gigabytes (a server's stderr after a week) and what matters sits at its end,
next to the crash: only the last `TAIL_BYTES` are read, with a seek for a regular file and
by streaming for a pipe (``--host-log <(journalctl -k)``), never the whole file into memory.
It is opened by `postmortem.safefile`: a device is refused, and a named pipe that no process
writes to is waited on for a few seconds, not forever.
When a file was cut, `HostLogFile.read_from` says where reading started and the first,
partial line is dropped. Bytes are decoded as UTF-8 with undecodable bytes replaced; what
the file holds is recognized by content, by running every parser over the same lines.

A pickle is not read as lines: a regular file that starts as pickle protocols 2 to 5 do
(``\x80`` and the protocol), or one named like SGLang's ``crash_dump_*.pkl`` (protocols 0
and 1 have no such start), is summarized by `postmortem.host.crashpickle` from its opcodes,
never loaded, within that package's own bounds. A pipe is always read as text: its first
bytes, once read, cannot be given back.
"""

from __future__ import annotations

import fnmatch
import math
import os
import select
import stat
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from postmortem.errors import UnreadableFile
from postmortem.host.crashpickle import summarize_crash_pickle
from postmortem.host.cudaerror import parse_cuda_errors
from postmortem.host.driver import parse_driver_log
from postmortem.host.model import HostLogFile
from postmortem.host.sanitizer import parse_sanitizer_report
from postmortem.host.sglang import parse_sglang_api_log
from postmortem.host.vllm import parse_vllm_dump
from postmortem.safefile import WRITER_WAIT_S, iter_pipe, open_regular

TAIL_BYTES = 8 << 20
"""How much of the end of a log is read."""
_CHUNK = 1 << 20
_MAX_STREAMED = 16 << 30
"""A pipe is read at most this far (a producer that never ends is cut here)."""
PICKLE_NAME = "*crash_dump_*.pkl"
"""The names read as a pickle whatever their first bytes: SGLang's crash dumps."""
_PROTO = 0x80
"""Pickle's PROTO opcode, the first byte of every pickle of protocol 2 and later."""


def host_log_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a host log (missing, a folder, no permission), or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        return error.strerror or str(error)
    if stat.S_ISDIR(mode):
        return "is a folder"
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        return "is not a regular file or a pipe"
    if not os.access(path, os.R_OK):
        return "permission denied"
    return None


def read_host_logs(paths: Sequence[Path], tail_bytes: int = TAIL_BYTES) -> tuple[HostLogFile, ...]:
    """Every log of `paths`, read and parsed, in the order given.

    Raises:
        UnreadableFile: a log is missing, a folder, or cannot be read.
    """
    return tuple(read_host_log(path, tail_bytes) for path in paths)


def read_host_log(
    path: Path, tail_bytes: int = TAIL_BYTES, *, writer_wait_s: float = WRITER_WAIT_S
) -> HostLogFile:
    """One log, its last `tail_bytes` read and parsed; a pickle summarized instead
    (`read_crash_pickle`), within its own bounds.

    Raises:
        UnreadableFile: the log is missing, a folder, a device, cannot be read, or is a pipe
            that no process opened to write in `writer_wait_s`.
    """
    problem = host_log_problem(path)
    if problem is not None:
        raise UnreadableFile(path, problem)
    if _starts_a_pickle(path):
        return read_crash_pickle(path)
    try:
        size, read_from, data = _tail(path, max(tail_bytes, 1), writer_wait_s)
    except OSError as error:
        raise UnreadableFile(path, error.strerror or str(error)) from None
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return parse_host_lines(path, lines, size, read_from)


def parse_host_lines(path: Path, lines: Sequence[str], size: int, read_from: int) -> HostLogFile:
    """A host log's lines parsed by every parser (what the file is, is what they find)."""
    return HostLogFile(
        path=path,
        size_bytes=size,
        read_from=read_from,
        lines=len(lines),
        sglang=parse_sglang_api_log(lines),
        cuda_errors=parse_cuda_errors(lines),
        driver=parse_driver_log(lines),
        sanitizer=parse_sanitizer_report(lines),
        vllm=parse_vllm_dump(lines),
    )


def read_crash_pickle(path: Path) -> HostLogFile:
    """A pickle given as a host log: its summary, read from its opcodes (never loaded).

    Raises:
        UnreadableFile: `path` is missing, not a regular file, or cannot be read.
    """
    summary = summarize_crash_pickle(path)
    return HostLogFile(
        path=path, size_bytes=summary.size_bytes, read_from=0, lines=0, sglang=None,
        cuda_errors=None, driver=None, sanitizer=None, crash_pickle=summary,
    )  # fmt: skip


def is_pickle_start(start: bytes, name: str) -> bool:
    """Whether a file whose first bytes are `start` and whose name is `name` is read as a
    pickle: protocols 2 to 5 by their PROTO opcode, 0 and 1 (which have none) by SGLang's
    name for its crash dumps (`PICKLE_NAME`)."""
    if len(start) >= 2 and start[0] == _PROTO and 2 <= start[1] <= 5:
        return True
    return fnmatch.fnmatchcase(name, PICKLE_NAME)


def _starts_a_pickle(path: Path) -> bool:
    # A pipe is never opened here: opening and closing it would let a writer waiting for a
    # reader in, to find none once it writes.
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open_regular(path) as file:
            start = file.read(2)
    except OSError as error:
        raise UnreadableFile(path, error.strerror or str(error)) from None
    return is_pickle_start(start, path.name)


def _tail(path: Path, tail_bytes: int, writer_wait_s: float) -> tuple[int, int, bytes]:
    """(bytes in the file, where reading started, the bytes read from there)."""
    with open_regular(path, pipes=True) as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            return _stream_tail(iter_pipe(file, path, _CHUNK, writer_wait_s), tail_bytes)
        size = info.st_size
        if size <= tail_bytes:
            return size, 0, file.read(tail_bytes)
        # One byte more: whether the tail starts at a line's start or mid-line.
        file.seek(size - tail_bytes - 1)
        data = file.read(tail_bytes + 1)
    return size, *_whole_lines(size - len(data), data)


def _stream_tail(chunks: Iterator[bytes], tail_bytes: int) -> tuple[int, int, bytes]:
    kept: deque[bytes] = deque()
    kept_bytes = total = 0
    for chunk in chunks:
        if total >= _MAX_STREAMED:
            break
        kept.append(chunk)
        kept_bytes += len(chunk)
        total += len(chunk)
        while kept_bytes - len(kept[0]) >= tail_bytes + 1:
            kept_bytes -= len(kept.popleft())
    data = b"".join(kept)
    if len(data) <= tail_bytes:
        return total, 0, data
    data = data[-(tail_bytes + 1) :]
    return total, *_whole_lines(total - len(data), data)


def _whole_lines(start: int, data: bytes) -> tuple[int, bytes]:
    """`data` (read from byte `start`, one byte before the tail) cut to whole lines."""
    if data[:1] == b"\n":
        return start + 1, data[1:]
    newline = data.find(b"\n")
    if newline < 0:  # one line longer than the tail: keep what there is of it
        return start + 1, data[1:]
    return start + newline + 1, data[newline + 1 :]


PIPE_READ_S = 4.0
"""How long `read_log_tail` reads a pipe whose writer has not finished."""


@dataclass(frozen=True, slots=True)
class LogTail:
    """The end of a log, as `read_log_tail` read it."""

    data: bytes
    """Whole lines of the log's end (part of one line, when a line is longer than the read;
    of a pipe still open, its unfinished last line left out)."""
    size_bytes: int
    """Bytes in the file; of a pipe, the bytes it gave."""
    read_from: int
    """Where `data` starts in the log: 0 when it was read from its start."""
    still_open: bool
    """True for a pipe whose writer had neither finished nor stopped by the limits."""


def read_log_tail(
    path: Path,
    tail_bytes: int = TAIL_BYTES,
    *,
    pipe_s: float = PIPE_READ_S,
    pipe_bytes: int = _MAX_STREAMED,
    writer_wait_s: float = WRITER_WAIT_S,
) -> LogTail:
    """The last `tail_bytes` of a log, bounded in time as well as in memory.

    A regular file is read from a seek. A pipe is read for `pipe_s` seconds and `pipe_bytes`
    bytes at most: a writer that never ends (``<(yes)``) or never writes (``<(sleep 1d)``)
    is left there, `LogTail.still_open` set, and the bytes it gave by then are the log.

    Raises:
        UnreadableFile: the log is missing, a folder, a device, cannot be read, or is a pipe
            that no process opened to write in `writer_wait_s`.
    """
    problem = host_log_problem(path)
    if problem is not None:
        raise UnreadableFile(path, problem)
    tail_bytes = max(tail_bytes, 1)
    try:
        with open_regular(path, pipes=True) as file:
            info = os.fstat(file.fileno())
            if stat.S_ISREG(info.st_mode):
                return _file_tail(file, info.st_size, tail_bytes)
            pipe = _Pipe(file.fileno(), path, writer_wait_s, time.monotonic() + pipe_s)
            return _pipe_tail(pipe, tail_bytes, pipe_bytes)
    except OSError as error:
        raise UnreadableFile(path, error.strerror or str(error)) from None


def _file_tail(file: BinaryIO, size: int, tail_bytes: int) -> LogTail:
    # The tail is held once: a line cut at its start is skipped by reading again, not by
    # slicing a copy (a log of one line of a GiB costs the tail, not twice that).
    if size <= tail_bytes:
        return LogTail(file.read(tail_bytes), size, 0, still_open=False)
    start = size - tail_bytes
    file.seek(start - 1)
    if file.read(1) != b"\n":  # the tail starts mid-line: it starts at the next line
        data = file.read(tail_bytes)
        newline = data.find(b"\n")
        if newline < 0:  # one line longer than the tail: keep what there is of it
            return LogTail(data, size, start, still_open=False)
        del data
        start += newline + 1
        file.seek(start)
    return LogTail(file.read(size - start), size, start, still_open=False)


def _pipe_tail(pipe: _Pipe, tail_bytes: int, limit_bytes: int) -> LogTail:
    kept: deque[bytes] = deque()
    kept_bytes = total = 0
    for chunk in pipe.chunks():
        kept.append(chunk)
        kept_bytes += len(chunk)
        total += len(chunk)
        while kept_bytes - len(kept[0]) >= tail_bytes + 1:
            kept_bytes -= len(kept.popleft())
        if total >= limit_bytes:
            pipe.still_open = True
            break
    # The chunks are cut to whole lines before the join: the join is the one copy made.
    start = 0
    if total > tail_bytes:  # from the byte before the tail: does the tail start a line?
        kept[0] = kept[0][kept_bytes - tail_bytes - 1 :]
        start = total - tail_bytes - 1 + _skip_to_next_line(kept)
    if pipe.still_open:  # its last line is not finished: what follows could change it
        _drop_unfinished_line(kept)
    return LogTail(b"".join(kept), total, start, pipe.still_open)


def _skip_to_next_line(chunks: deque[bytes]) -> int:
    """Drops the bytes of `chunks` up to the first newline, that included, and returns how
    many; without a newline (one line longer than them all), the first byte only."""
    dropped = 0
    for index, chunk in enumerate(chunks):
        newline = chunk.find(b"\n")
        if newline >= 0:
            for _ in range(index):
                dropped += len(chunks.popleft())
            chunks[0] = chunk[newline + 1 :]
            return dropped + newline + 1
    chunks[0] = chunks[0][1:]
    return 1


def _drop_unfinished_line(chunks: deque[bytes]) -> None:
    while chunks:
        newline = chunks[-1].rfind(b"\n")
        if newline >= 0:
            chunks[-1] = chunks[-1][: newline + 1]
            return
        chunks.pop()


@dataclass(slots=True)
class _Pipe:
    """A pipe read until its writers close it, or until `deadline` (`time.monotonic`)."""

    fd: int
    path: Path
    writer_wait_s: float
    deadline: float
    still_open: bool = False

    def chunks(self) -> Iterator[bytes]:
        # As `postmortem.safefile.iter_pipe`, with every wait bounded by the deadline: a
        # writer that holds the pipe open without writing is left there too.
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        no_writer_until: float | None = None
        had_writer = False
        while True:
            try:
                chunk: bytes | None = os.read(self.fd, _CHUNK)
            except BlockingIOError:  # a writer, that has not written yet
                chunk, had_writer = None, True
            if chunk:
                had_writer = True
                yield chunk
            elif chunk is not None and had_writer:  # the end: every writer closed it
                return
            now = time.monotonic()
            if had_writer and now >= self.deadline:
                self.still_open = True
                return
            if chunk:
                continue
            if had_writer:
                poller.poll(math.ceil((self.deadline - now) * 1000))
                continue
            # No writer yet. A hangup means one came and went without writing a byte.
            if no_writer_until is None:
                no_writer_until = now + self.writer_wait_s
            if now >= no_writer_until:
                wait = f"waited {self.writer_wait_s:g} s"
                raise UnreadableFile(self.path, f"a pipe that no process writes to ({wait})")
            events = poller.poll(math.ceil((no_writer_until - now) * 1000))
            had_writer = any(event & select.POLLHUP for _, event in events)
