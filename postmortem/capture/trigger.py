"""Ask a running process for a GPU dump through its coredump pipe, as the driver expects.

With `CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1` the driver makes a named pipe (FIFO) per process,
`CUDA_COREDUMP_PIPE` (default ``corepipe.cuda.%h.%p`` in the process's working folder, the
driver API's `CU_COREDUMP_PIPE`), reads it, and writes a dump when data arrives. The guides
write 1 MiB of zeros into it (``dd if=/dev/zero bs=1M count=1 > PIPE``: vLLM's hang post says a
short `echo` may not be enough). Here the pipe is opened without blocking, again and again
until a reader is there or the time is up, so a pipe that no process reads ends in a clear
error instead of a wait without end; then the MiB is written, waiting at most the same time
for the reader to take it.

The pipe often sits in a folder others can write to (a shared dump folder, /tmp), where its
name can be made to lead elsewhere between two looks at it. So a symbolic link is never
followed (`O_NOFOLLOW`), and what each open gave is checked on the descriptor itself
(`fstat`): anything but a FIFO is closed unwritten, and the zeros only ever go into a pipe.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import select
import socket
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from postmortem.capture.dumps import expand
from postmortem.capture.environment import PIPE_NAME
from postmortem.dumpnames import compile_pattern
from postmortem.errors import NotAFifo, PipeNotFound, TriggerTimedOut, UnreadableFile
from postmortem.spelling import size_text

TRIGGER_BYTES = 1 << 20
"""What is written to trigger a dump: 1 MiB of zeros."""
DRIVER_PIPE_NAMES = ("corepipe.cuda.%h.%p", "corepipe_%h_%p")
"""The driver's own pipe names: the documented default, and the one some driver builds make
(SGLang's `cudacore_pyspy_dump_utils.py` tries both)."""
MAX_ENVIRON_BYTES = 4 << 20
"""How much of /proc/PID/environ is read (Linux caps a new program's arguments and environment
together at a quarter of its stack limit: 2 MiB under the usual 8 MiB)."""
_RETRY_S = 0.05
_OPEN_FLAGS = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY
"""O_NONBLOCK: with no reader the open fails (ENXIO) instead of waiting forever; O_NOFOLLOW:
a link put in the pipe's place is refused; O_NOCTTY: a terminal put there is never ours."""


@dataclass(frozen=True, slots=True)
class Triggered:
    """A trigger written."""

    pipe: Path
    written_bytes: int
    """Less than `TRIGGER_BYTES` when the reader closed the pipe early (it took the trigger)."""
    at: float
    """When the pipe was first tried, Unix seconds: the dump is newer."""


def find_pipe(pid: int, dump_dir: Path, environ: Mapping[str, str]) -> Path:
    """The coredump pipe of process `pid`: the one its own `CUDA_COREDUMP_PIPE` names (when
    its environment can be read), the one `postmortem capture --hang` makes in `dump_dir`,
    the one our own `CUDA_COREDUMP_PIPE` (`environ`) names, or the driver's default, in the
    process's working folder, ours, or /tmp. A FIFO wins over anything else found.

    Raises:
        PipeNotFound: none of these exists.
    """
    host = socket.gethostname()
    cwd = process_cwd(pid) or Path.cwd()
    patterns = []
    theirs = process_environment(pid).get("CUDA_COREDUMP_PIPE")
    if theirs:
        patterns.append(_absolute(theirs, cwd))
    patterns.append(str(dump_dir.absolute() / PIPE_NAME))
    if environ.get("CUDA_COREDUMP_PIPE"):
        patterns.append(_absolute(environ["CUDA_COREDUMP_PIPE"], Path.cwd()))
    for folder in dict.fromkeys((cwd, Path.cwd(), Path("/tmp"))):
        patterns += [str(folder / name) for name in DRIVER_PIPE_NAMES]
    existing = [p for pattern in patterns for p in _existing(expand(pattern, host=host, pid=pid))]
    fifos = [p for p in existing if is_fifo(p)]
    if fifos or existing:
        return (fifos or existing)[0]
    named = (p.replace("%h", host).replace("%p", str(pid)) for p in patterns)
    raise PipeNotFound(pid, tuple(dict.fromkeys(named)))


def pid_of_pipe(pipe: Path) -> int | None:
    """The process id in a pipe's name when it follows one of the known names; else None."""
    for pattern in (PIPE_NAME, *DRIVER_PIPE_NAMES):
        match = compile_pattern(pattern).fullmatch(pipe.name)
        if match is not None:
            return int(match["pid"])
    return None


def process_environment(pid: int) -> dict[str, str]:
    """The environment process `pid` started with; empty when it cannot be read (another
    user's process, a process that is gone, a system without /proc)."""
    try:
        return environ_of_pid(pid)
    except UnreadableFile:
        return {}


def environ_of_pid(pid: int) -> dict[str, str]:
    """The environment process `pid` started with, from /proc/PID/environ (at most
    `MAX_ENVIRON_BYTES`).

    Raises:
        UnreadableFile: no such process, another user's process, or an environment past the
            bound.
    """
    path = Path(f"/proc/{pid}/environ")
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_ENVIRON_BYTES + 1)
    except OSError as error:
        raise UnreadableFile(path, _proc_reason(pid, error)) from None
    if len(raw) > MAX_ENVIRON_BYTES:
        raise UnreadableFile(path, f"the environment is larger than {size_text(MAX_ENVIRON_BYTES)}")
    pairs = (item.decode("utf-8", "replace").partition("=") for item in raw.split(b"\0"))
    return {name: value for name, sep, value in pairs if sep and name}


def cwd_of_pid(pid: int) -> Path:
    """The working folder of process `pid`, where its relative names lead.

    Raises:
        UnreadableFile: no such process, or another user's process.
    """
    path = Path(f"/proc/{pid}/cwd")
    try:
        return Path(os.readlink(path))
    except OSError as error:
        raise UnreadableFile(path, _proc_reason(pid, error)) from None


def _proc_reason(pid: int, error: OSError) -> str:
    if error.errno in (errno.ENOENT, errno.ESRCH):
        return f"no process {pid}"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied (process {pid} is another user's: run as that user or root)"
    return error.strerror or str(error)


def process_cwd(pid: int) -> Path | None:
    """The working folder of process `pid`; None when it cannot be read."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def trigger(pipe: Path, timeout: float) -> Triggered:
    """Write the trigger into `pipe`, waiting at most `timeout` seconds for a reader and as
    long again for it to take the bytes.

    Raises:
        UnreadableFile: `pipe` does not exist.
        NotAFifo: `pipe` is not a named pipe (a symbolic link to one included), or stopped
            being one while the trigger waited: nothing was written.
        TriggerTimedOut: no process opened the pipe for reading in time, or took nothing.
    """
    check_fifo(pipe)
    at = time.time()
    fd = _open_writer(pipe, timeout)
    try:
        written = _write_zeros(fd, pipe, timeout)
    finally:
        os.close(fd)
    return Triggered(pipe, written, at)


def check_fifo(pipe: Path) -> None:
    """Raises `UnreadableFile` when `pipe` is not there, `NotAFifo` when it is not a pipe
    itself (a symbolic link is not followed)."""
    try:
        mode = pipe.lstat().st_mode
    except OSError as error:
        raise UnreadableFile(pipe, error.strerror or str(error)) from None
    if not stat.S_ISFIFO(mode):
        raise NotAFifo(pipe, _kind(mode))


def _open_writer(pipe: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while (fd := _open_fifo(pipe)) is None:
        if time.monotonic() >= deadline:
            raise TriggerTimedOut(pipe, timeout, "no process reads this coredump pipe")
        time.sleep(_RETRY_S)
    return fd


def _open_fifo(pipe: Path) -> int | None:
    """A descriptor of the FIFO `pipe` open for writing; None while it has no reader."""
    try:
        fd = os.open(pipe, _OPEN_FLAGS)
    except OSError as error:
        # ELOOP (EMLINK on the BSDs) from O_NOFOLLOW, or ENXIO from a socket as from a pipe
        # with no reader: say what is there now rather than fail, or wait, on it.
        if error.errno in (errno.ENXIO, errno.ELOOP, errno.EMLINK):
            check_fifo(pipe)
        if error.errno != errno.ENXIO:
            raise UnreadableFile(pipe, error.strerror or str(error)) from None
        return None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as error:
        os.close(fd)
        raise UnreadableFile(pipe, error.strerror or str(error)) from None
    if not stat.S_ISFIFO(mode):
        os.close(fd)  # the name was made to lead elsewhere after the first look
        raise NotAFifo(pipe, _kind(mode))
    return fd


def _write_zeros(fd: int, pipe: Path, timeout: float) -> int:
    """Write `TRIGGER_BYTES` zeros as the reader takes them; how many it took."""
    zeros = memoryview(bytes(TRIGGER_BYTES))
    written = 0
    deadline = time.monotonic() + timeout
    while written < TRIGGER_BYTES:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([], [fd], [], left)[1]:
            if written:
                return written  # it took the start of it: enough to trigger
            raise TriggerTimedOut(pipe, timeout, "the reader took none of the trigger")
        try:
            written += os.write(fd, zeros[written:])
        except BlockingIOError:
            continue
        except BrokenPipeError:
            return written  # the reader closed the pipe: it took what it needed
    return written


def _existing(pattern: str) -> list[Path]:
    found = [Path(name) for name in glob.glob(pattern)]
    return sorted(found, key=_mtime, reverse=True)


def _mtime(path: Path) -> float:
    with contextlib.suppress(OSError):
        return path.lstat().st_mtime
    return 0.0


def is_fifo(path: Path) -> bool:
    """True when `path` is a named pipe itself (not a symbolic link to one)."""
    try:
        return stat.S_ISFIFO(path.lstat().st_mode)
    except OSError:
        return False


def _absolute(pattern: str, base: Path) -> str:
    return pattern if os.path.isabs(pattern) else str(base / pattern)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "something else"
