"""What `postmortem trigger` does: find a hung process's coredump pipe, wait for a hang when
asked (`--watch`), write the trigger, wait for the dump and analyze it as a hang.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from postmortem.capture.dumps import (
    expand,
    wait_for_dump,
)
from postmortem.capture.environment import (
    DUMP_NAME,
)
from postmortem.capture.trigger import (
    check_fifo,
    find_pipe,
    is_fifo,
    pid_of_pipe,
    process_cwd,
    process_environment,
    trigger,
)
from postmortem.capture.watch import (
    WatchSpec,
    arm,
    check_spec,
    process_alive,
    watch,
)
from postmortem.errors import (
    BadOption,
    TriggerTimedOut,
)

if TYPE_CHECKING:
    pass

from postmortem.capture.reporting import ReportSettings, report_dump, say


@dataclass(frozen=True, slots=True)
class TriggerRequest:
    """What `postmortem trigger` was asked for."""

    pipe: Path | None
    """The pipe to write to; None: the pipe of process `pid`."""
    pid: int | None
    """The process to dump; None: read from the pipe's name when it follows a known one."""
    dump_dir: Path
    """Where `capture` puts pipes, dumps and host logs."""
    dump_glob: str | None = None
    """Where the dump will appear; None: the process's `CUDA_COREDUMP_FILE`, else capture's."""
    timeout: float = 10.0
    """Seconds to wait for a process to read the pipe (and to take the trigger)."""
    wait: float = 300.0
    """Seconds to wait for the dump to be written."""
    watch: WatchSpec | None = None
    """Trigger only once one of its conditions holds; None: at once."""


def trigger_dump(request: TriggerRequest, report: ReportSettings) -> Path:
    """Trigger a dump, wait for it, analyze it as a hang; the report's path (the dump's when
    not analyzed).

    Raises:
        BadOption: neither or both of a pipe and a pid, or watch options that do not go
            together.
        PipeNotFound, NotAFifo, UnreadableFile: no pipe to write to, or no file to watch.
        TriggerTimedOut: nobody took the trigger, or no dump was written in time, or the
            watched process ended before the watch fired.
        PostmortemError: the dump cannot be analyzed, or its report written.
    """
    from postmortem.analysis.analyze import AnalysisMode

    pipe, pid = request.pipe, request.pid
    if (pipe is None) == (pid is None):
        raise BadOption("PIPE", "give the pipe, or --pid PID, not both")
    if request.watch is not None:
        check_spec(request.watch)
    if pipe is None:
        assert pid is not None
        pipe = find_pipe(pid, request.dump_dir, os.environ)
    pid = pid if pid is not None else pid_of_pipe(pipe)
    if request.watch is not None:
        _watch_process(request.watch, pipe, pid)
    triggered = trigger(pipe, request.timeout)
    say(f"triggered a dump through {pipe}")
    globs = [request.dump_glob] if request.dump_glob else _dump_globs(pid, request.dump_dir)
    with _WaitLine(request.wait) as progress:
        dump = wait_for_dump(globs, since=triggered.at, timeout=request.wait, progress=progress)
    say(f"dump written: {dump}")
    if not report.analyze:
        return dump
    host_log = request.dump_dir.absolute() / f"host.{pid}.log"
    logs = (host_log,) if pid is not None and host_log.is_file() else ()
    return report_dump(dump, report, logs, AnalysisMode.HANG)[0]


def _watch_process(spec: WatchSpec, pipe: Path, pid: int | None) -> None:
    """Wait until a condition of `spec` holds (said in one line).

    Raises:
        TriggerTimedOut: the process ended first (without a pid: its pipe went away).
    """
    check_fifo(pipe)  # the watch may last hours: a path that is not a pipe is said first
    conditions = arm(spec, time.monotonic())
    if pid is not None:
        alive, who = process_alive(pid), f"process {pid}"
    else:
        alive, who = (lambda: is_fifo(pipe)), f"the reader of {pipe}"
    say(f"watching {who}; the dump is triggered on: {spec.describe()}")
    started = time.monotonic()
    fired = watch(conditions, alive)
    if fired is None:
        waited = round(time.monotonic() - started, 1)
        ended = f"{who} ended" if pid is not None else f"{pipe} went away"
        raise TriggerTimedOut(pipe, waited, f"{ended} before the watch fired; no dump taken")
    say(f"watch fired after {fired.after_s:.1f} s: {fired.reason}")


def _dump_globs(pid: int | None, dump_dir: Path) -> list[str]:
    """Where a triggered dump will be written: the process's own `CUDA_COREDUMP_FILE`, and
    capture's name in `dump_dir`."""
    host = socket.gethostname()
    patterns = []
    if pid is not None:
        theirs = process_environment(pid).get("CUDA_COREDUMP_FILE")
        if theirs:
            cwd = process_cwd(pid) or Path.cwd()
            patterns.append(theirs if os.path.isabs(theirs) else str(cwd / theirs))
    patterns.append(str(dump_dir.absolute() / DUMP_NAME))
    return [expand(p, host=host, pid=pid) for p in dict.fromkeys(patterns)]


class _WaitLine:
    """click's progress bar on standard error while the dump is awaited: how much of the wait
    is spent, and the newest dump's size (on a terminal only; elsewhere one line)."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._start = time.monotonic()
        self._done = 0
        self._bar = click.progressbar(
            length=max(1, round(seconds)), label="postmortem: waiting for the dump",
            file=sys.stderr, width=0, show_percent=False, show_eta=False,
            item_show_func=lambda item: item,
        )  # fmt: skip

    def __enter__(self) -> Callable[[Path | None, int], None]:
        self._bar.__enter__()
        return self._tick

    def __exit__(self, *_: object) -> None:
        self._bar.__exit__(None, None, None)

    def _tick(self, newest: Path | None, size: int) -> None:
        elapsed = min(round(time.monotonic() - self._start), self._bar.length or 1)
        shown = f"{newest.name} {_size(size)}" if newest is not None else None
        self._bar.update(elapsed - self._done, current_item=shown)
        self._done = elapsed


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 2**10:.0f} KiB"
