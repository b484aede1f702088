"""Run the captured command: its output kept in a log and passed on, signals passed to it.

This and `toolrun.py` are the only modules that start processes. The command is the user's
program, not a tool: it keeps standard input and runs as long as it runs, and postmortem
waits for it and ends with its exit status, as a shell does (killed by signal N: 128+N).

- Standard output and standard error each go through a pipe: every chunk is written on to
  postmortem's own stream at once, and into the host log, whole lines at a time (so the two
  streams interleave by line, as a terminal shows them). Each line is also read for the
  driver's ``coredump: Writing ELF file to PATH``, and for SGLang's ``Triggered CUDA user
  coredump for PID N via PIPE`` (a dump it asked for: a hang). Every chunk read tells the
  `Activity` given, if any, that the command still speaks (`capture --hang-after`).
- SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 sent to postmortem are sent on to the command. The
  command stays in postmortem's process group, so a Ctrl-C (SIGINT) or Ctrl-\\ (SIGQUIT)
  typed at the terminal reaches it, and its own children, straight from the terminal: these
  two are sent on only when postmortem is not in the terminal's foreground (then they came
  from someone's `kill`), or when the command has left the group.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from postmortem.capture.dumps import triggered_pid
from postmortem.capture.watch import Activity
from postmortem.errors import CommandNotExecutable, CommandNotStarted, OutputUnwritable
from postmortem.host.driver import written_path

FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
"""The signals sent on to the command."""
_FROM_TERMINAL = frozenset({signal.SIGINT, signal.SIGQUIT})
_CHUNK = 1 << 16
_MAX_LINE = 1 << 16
"""A line longer than this (a progress bar redrawn with carriage returns) is logged in pieces."""
_MAX_NAMED = 4096
"""The most dump paths kept from the driver's lines."""
MAX_LOG_BYTES = 256 << 20
"""Past this, the host log is rotated: it moves to ``host.PID.log.1`` (replacing an older
one) and a new log starts, so a chatty job keeps at most twice this on disk, the newest
output always in ``host.PID.log``, whose tail is what the analysis reads."""
_POLL_S = 0.1
_DRAIN_S = 5.0
_MAX_DRAIN_S = 120.0
"""How long, after the command ends, its output is still read from processes it left behind."""


@dataclass(frozen=True, slots=True)
class ChildExit:
    """How the command ended, and what it said."""

    pid: int
    returncode: int
    """As `subprocess` says it: negative when killed by that signal."""
    log: Path
    """The host log: both output streams, line by line."""
    named: tuple[str, ...]
    """The dump paths the driver's progress lines named, in order, as printed."""
    started: float
    """When the command started, Unix seconds."""
    rotations: int = 0
    """How often the log was rotated (`MAX_LOG_BYTES`): the earlier output is in
    ``LOG.1``, older still is gone."""
    triggered: tuple[int, ...] = ()
    """The process ids SGLang's "Triggered CUDA user coredump for PID N" lines named."""

    @property
    def exit_status(self) -> int:
        """The status a shell reports: the exit code, or 128+N when killed by signal N."""
        return 128 - self.returncode if self.returncode < 0 else self.returncode


def run_child(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_dir: Path,
    *,
    stdout: BinaryIO,
    stderr: BinaryIO,
    max_log_bytes: int = MAX_LOG_BYTES,
    activity: Activity | None = None,
    on_start: Callable[[int], None] | None = None,
) -> ChildExit:
    """Run `argv` to its end with `env`, its output passed on to `stdout` and `stderr` and kept
    in ``log_dir/host.<pid>.log`` (rotated past `max_log_bytes`). When `stdout` is closed by
    its reader (`capture -- yes | head -1`), the command's standard output is closed too, so
    that it ends as it would in a shell pipeline (SIGPIPE). `activity` is touched at every
    chunk of output; `on_start` is called with the command's pid once it runs.

    Raises:
        CommandNotStarted: the program was not found.
        CommandNotExecutable: it was found but cannot be run.
        OutputUnwritable: the log cannot be created in `log_dir`.
    """
    log_file, log_path = _open_log(log_dir)
    with log_file, _Forwarder() as forwarder:
        started = time.time()
        process = _start(argv, env, log_path)
        forwarder.attach(process.pid)
        log_path = _name_log(log_path, process.pid)
        log = _Log(log_file, log_path, max_log_bytes)
        tees = [
            _Tee(process.stdout, stdout, log, activity),  # type: ignore[arg-type]
            _Tee(process.stderr, stderr, log, activity),  # type: ignore[arg-type]
        ]
        for tee in tees:
            tee.start()
        if on_start is not None:
            on_start(process.pid)
        returncode = process.wait()
        _drain(tees)
        log.close()
    named = [path for tee in tees for path in tee.named]
    triggered = dict.fromkeys(pid for tee in tees for pid in tee.triggered)
    return ChildExit(
        process.pid, returncode, log_path, tuple(named[:_MAX_NAMED]), started, log.rotations,
        tuple(triggered)[:_MAX_NAMED],
    )  # fmt: skip


def _open_log(folder: Path) -> tuple[BinaryIO, Path]:
    # Made before the command starts, so a folder that cannot be written stops nothing that
    # has begun; renamed after the command's pid once it is known.
    try:
        fd, name = tempfile.mkstemp(prefix="host.", suffix=".log", dir=folder)
    except OSError as error:
        raise OutputUnwritable(folder, error.strerror or str(error)) from None
    return os.fdopen(fd, "wb"), Path(name)


def _name_log(path: Path, pid: int) -> Path:
    target = path.with_name(f"host.{pid}.log")
    try:
        os.replace(path, target)
    except OSError:
        return path
    return target


def _start(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    command = argv[0] if argv else ""
    try:
        return subprocess.Popen(
            list(argv), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except (FileNotFoundError, NotADirectoryError) as error:
        log_path.unlink(missing_ok=True)
        raise CommandNotStarted(command, error.strerror or "not found") from None
    except OSError as error:
        log_path.unlink(missing_ok=True)
        raise CommandNotExecutable(command, error.strerror or str(error)) from None


class _Log:
    """The host log, shared by the two streams' readers; written whole lines at a time (one
    write per chunk read, not per line), rotated past `limit` bytes."""

    def __init__(self, file: BinaryIO, path: Path, limit: int) -> None:
        self._file = file
        self._path = path
        self._limit = limit
        self._written = 0
        self.rotations = 0
        self._lock = threading.Lock()
        self._open = True

    def write(self, data: bytes) -> None:
        with self._lock:
            if not self._open:
                return
            with contextlib.suppress(OSError, ValueError):
                if self._written and self._written + len(data) > self._limit:
                    self._rotate()
                self._file.write(data)
                self._file.flush()
                self._written += len(data)

    def _rotate(self) -> None:
        self._file.close()
        os.replace(self._path, self._path.with_name(self._path.name + ".1"))
        self._file = open(self._path, "wb")  # noqa: SIM115 - lives as long as the log
        self._written = 0
        self.rotations += 1

    def close(self) -> None:
        """Stop writing (a process the command left behind may still print)."""
        with self._lock:
            self._open = False
            with contextlib.suppress(OSError, ValueError):
                self._file.close()


class _Tee(threading.Thread):
    """Reads one of the command's streams to its end."""

    def __init__(
        self, source: BinaryIO, sink: BinaryIO, log: _Log, activity: Activity | None = None
    ) -> None:
        super().__init__(daemon=True)
        self._source = source
        self._sink: BinaryIO | None = sink
        self._log = log
        self._activity = activity
        self._pending = b""
        self.named: list[str] = []
        self.triggered: list[int] = []
        self.stop = threading.Event()
        """Set to stop reading before the end of the stream."""

    def run(self) -> None:
        fd = self._source.fileno()
        while not self.stop.is_set():
            if not select.select([fd], [], [], _POLL_S)[0]:
                continue
            chunk = _read(fd)
            if not chunk:
                break
            if self._activity is not None:
                self._activity.touch()
            self._lines(chunk)
            if not self._pass_on(chunk):
                break  # our reader is gone: closing the pipe ends the command's writes too
        if self._pending:
            self._line(self._pending)
        self._source.close()

    def has_data(self) -> bool:
        """True while the stream holds bytes not read yet."""
        try:
            return bool(select.select([self._source.fileno()], [], [], 0)[0])
        except (OSError, ValueError):  # closed by the thread: read to its end
            return False

    def _pass_on(self, chunk: bytes) -> bool:
        """Pass `chunk` on; False once the sink's reader has closed it (a broken pipe)."""
        if self._sink is None:
            return True
        try:
            self._sink.write(chunk)
            self._sink.flush()
        except BrokenPipeError:
            self._sink = None
            return False
        except (OSError, ValueError):  # the terminal went away: keep logging
            self._sink = None
        return True

    def _lines(self, chunk: bytes) -> None:
        data = self._pending + chunk
        end = data.rfind(b"\n") + 1
        whole, self._pending = data[:end], data[end:]
        if whole:
            self._log.write(whole)
            if b"coredump:" in whole or b"Triggered CUDA" in whole:
                self._named(whole.split(b"\n"))
        if len(self._pending) > _MAX_LINE:
            self._line(self._pending)
            self._pending = b""

    def _line(self, line: bytes) -> None:
        # Every line ends in a newline in the log, the last one and a long line's pieces too:
        # else the other stream's next line would be glued to it.
        self._log.write(line + b"\n")
        self._named([line])

    def _named(self, lines: list[bytes]) -> None:
        for line in lines:
            if b"coredump:" in line and len(self.named) < _MAX_NAMED:
                path = written_path(line.decode("utf-8", "replace"))
                if path is not None:
                    self.named.append(path)
            pid = triggered_pid(line)
            if pid is not None and len(self.triggered) < _MAX_NAMED:
                self.triggered.append(pid)


def _drain(tees: Sequence[_Tee]) -> None:
    # The command is gone; what it wrote may still be in the pipes. Read on while anything is
    # there: a stream is given up only once it has had nothing to read for _DRAIN_S (a process
    # left behind holds it open in silence), or after _MAX_DRAIN_S in all. On a loaded machine
    # the reading thread may wait its turn for seconds; data in the pipe keeps it going. The
    # streams are watched together, so two silent ones cost one quiet period, not two.
    deadline = time.monotonic() + _MAX_DRAIN_S
    quiet_since = dict.fromkeys(tees, time.monotonic())
    live = list(tees)
    while live and time.monotonic() < deadline:
        live[0].join(_POLL_S)
        for tee in list(live):
            if not tee.is_alive():
                live.remove(tee)
            elif tee.has_data():
                quiet_since[tee] = time.monotonic()
            elif time.monotonic() - quiet_since[tee] > _DRAIN_S:
                tee.stop.set()
                live.remove(tee)
    for tee in tees:
        tee.stop.set()
        tee.join()


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, _CHUNK)
    except OSError:
        return b""


class _Forwarder:
    """Sends the signals postmortem gets on to the command, while it runs."""

    def __init__(self) -> None:
        self._pid: int | None = None
        self._pending: list[int] = []
        self._previous: dict[int, Any] = {}
        """What each signal's handler was before (a function, SIG_DFL, SIG_IGN, or None)."""

    def __enter__(self) -> _Forwarder:
        if threading.current_thread() is threading.main_thread():
            for number in FORWARDED:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *_: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)

    def attach(self, pid: int) -> None:
        """Send from now on to `pid`, and what came before it started."""
        self._pid = pid
        for number in self._pending:
            self._send(number)
        self._pending.clear()

    def _handle(self, number: int, _frame: FrameType | None) -> None:
        if self._pid is None:
            self._pending.append(number)
        else:
            self._send(number)

    def _send(self, number: int) -> None:
        assert self._pid is not None
        if number in _FROM_TERMINAL and _same_group(self._pid) and _in_terminal_foreground():
            return  # typed at the terminal: the command's group has it already
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self._pid, number)


def _in_terminal_foreground() -> bool:
    """Whether postmortem's process group is the foreground of its controlling terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _same_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == os.getpgrp()
    except OSError:
        return False
