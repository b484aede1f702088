"""Files read by a name that a user or a settings file gives, opened as what they claim to be.

A name on the command line or in a settings file may point anywhere: at a named pipe that no
process writes to (a plain `open` waits for a writer forever), at ``/dev/zero`` or
``/dev/urandom`` (a read never ends), at a folder. Every such file postmortem reads (the
settings, signature rules, host logs, the sources quoted into a report) is opened here:

- without blocking (``O_NONBLOCK``), so opening a named pipe returns at once;
- checked on the open descriptor (``fstat``), so a file put in the name's place after a
  check is never read for the one checked;
- refused unless it is a regular file, or a pipe where the caller streams pipes
  (`iter_pipe`), with an `UnreadableFile` that names what it is instead;
- read within a bound (`read_regular`).

A device is refused before it is opened at all: opening some (a serial line, a tape) acts.
"""

from __future__ import annotations

import math
import os
import select
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from postmortem.errors import UnreadableFile

WRITER_WAIT_S = 3.0
"""How long a named pipe that no process writes to is waited on before it is refused: the whole
command, start-up and refusal included, stays within the 5 s every input is held to."""

_KINDS = (
    (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
)  # fmt: skip
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def open_regular(path: Path, *, pipes: bool = False) -> BinaryIO:
    """`path` open for reading in binary, refused unless it is a regular file.

    With `pipes`, a pipe (a named pipe, or ``/dev/fd/N`` from the shell's ``<(command)``) is
    taken too; its descriptor stays non-blocking, to be read with `iter_pipe`.

    Raises:
        UnreadableFile: `path` is missing, cannot be opened, or is something else (a folder,
            a device, a socket, a pipe when `pipes` is false).
    """
    try:
        _check(path, os.stat(path).st_mode, pipes)
        fd = os.open(path, _FLAGS)
    except OSError as error:
        raise UnreadableFile(path, error.strerror or str(error)) from None
    try:
        mode = os.fstat(fd).st_mode
        _check(path, mode, pipes)
        if stat.S_ISREG(mode):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit_bytes: int) -> bytes:
    """The whole of the regular file `path`, which must hold at most `limit_bytes`.

    Raises:
        UnreadableFile: `path` cannot be opened or read, is not a regular file, or holds
            more than `limit_bytes`.
    """
    with open_regular(path) as file:
        try:
            data = file.read(limit_bytes + 1)
        except OSError as error:
            raise UnreadableFile(path, error.strerror or str(error)) from None
    if len(data) > limit_bytes:
        raise UnreadableFile(path, f"larger than {limit_bytes:,} bytes, the most read")
    return data


def read_within(path: Path, limit_bytes: int) -> bytes | None:
    """The whole of the regular file `path`, or None when it holds more than `limit_bytes`.

    For a file found rather than named (a settings file above the current folder), which
    is skipped when too large: the size is taken from the open descriptor, so a file over
    the limit (a sparse one of gigabytes) costs no read at all.

    Raises:
        UnreadableFile: `path` cannot be opened or read, or is not a regular file.
    """
    with open_regular(path) as file:
        if os.fstat(file.fileno()).st_size > limit_bytes:
            return None
        try:
            data = file.read(limit_bytes + 1)
        except OSError as error:
            raise UnreadableFile(path, error.strerror or str(error)) from None
    return data if len(data) <= limit_bytes else None  # it grew since the fstat


def iter_pipe(
    file: BinaryIO, path: Path, chunk_bytes: int, writer_wait_s: float = WRITER_WAIT_S
) -> Iterator[bytes]:
    """The chunks a pipe opened by `open_regular` gives, until every writer has closed it.

    A pipe with a writer is read for as long as the writer writes (that is what a user who
    names ``<(journalctl -k)`` asks for). A pipe with none is waited on for
    `writer_wait_s` and then refused, never waited on forever.

    Raises:
        UnreadableFile: no process opened the pipe to write in `writer_wait_s`, or a read
            failed.
    """
    fd = file.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline: float | None = None
    had_writer = False
    while True:
        try:
            chunk = os.read(fd, chunk_bytes)
        except BlockingIOError:  # a writer, that has not written yet
            had_writer = True
            poller.poll()
            continue
        except OSError as error:
            raise UnreadableFile(path, error.strerror or str(error)) from None
        if chunk:
            had_writer = True
            yield chunk
            continue
        if had_writer:  # the end: every writer closed it
            return
        # No writer yet. A hangup means one came and went without writing a byte.
        now = time.monotonic()
        deadline = now + writer_wait_s if deadline is None else deadline
        if now >= deadline:
            raise UnreadableFile(
                path, f"a pipe that no process writes to (waited {writer_wait_s:g} s)"
            )
        events = poller.poll(math.ceil((deadline - now) * 1000))
        had_writer = any(event & select.POLLHUP for _, event in events)


def _check(path: Path, mode: int, pipes: bool) -> None:
    if stat.S_ISREG(mode) or (pipes and stat.S_ISFIFO(mode)):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "of an unknown kind")
    wanted = "a regular file or a pipe" if pipes else "a regular file"
    raise UnreadableFile(path, f"not {wanted} ({kind})")
