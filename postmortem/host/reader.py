"""Open host logs safely and read what matters of them, bounded, into `HostLogFile`s.

A log may be gigabytes (a server's stderr after a week) and what matters sits at its end,
next to the crash: only the last `TAIL_BYTES` are read, with a seek for a regular file and
by streaming for a pipe (``--host-log <(journalctl -k)``), never the whole file into memory.
It is opened by `postmortem.safefile`: a device is refused, and a named pipe that no process
writes to is waited on for a few seconds, not forever.
When a file was cut, `HostLogFile.read_from` says where reading started and the first,
partial line is dropped. Bytes are decoded as UTF-8 with undecodable bytes replaced; what
the file holds is recognized by content, by running every parser over the same lines.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

from postmortem.errors import UnreadableFile
from postmortem.host.cudaerror import parse_cuda_errors
from postmortem.host.driver import parse_driver_log
from postmortem.host.model import HostLogFile
from postmortem.host.sanitizer import parse_sanitizer_report
from postmortem.host.sglang import parse_sglang_api_log
from postmortem.safefile import WRITER_WAIT_S, iter_pipe, open_regular

TAIL_BYTES = 8 << 20
"""How much of the end of a log is read."""
_CHUNK = 1 << 20
_MAX_STREAMED = 16 << 30
"""A pipe is read at most this far (a producer that never ends is cut here)."""


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
    """One log, its last `tail_bytes` read and parsed.

    Raises:
        UnreadableFile: the log is missing, a folder, a device, cannot be read, or is a pipe
            that no process opened to write in `writer_wait_s`.
    """
    problem = host_log_problem(path)
    if problem is not None:
        raise UnreadableFile(path, problem)
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
    )


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
