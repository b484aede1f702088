"""Worker processes for a scan: one dump at a time each, a time limit per dump, clean stops.

Each worker has its own pipe, so a worker killed for overrunning its time limit (or one
that dies) takes nothing but itself down: the parent writes a "timeout" (or "error") row for
its dump and starts a fresh worker. Workers ignore SIGINT; the parent turns Ctrl-C into a
stop, kills them, and returns what was finished. A killed worker's nvdisasm, in a session of
its own, finishes on its own.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from postmortem.cubin.disasm_files import DisassemblyFiles
from postmortem.scan.row import DumpRow, RowStatus
from postmortem.scan.work.worker import WorkOptions, lost_row, scan_dump, with_store

_TICK_S = 0.2
_GRACE_S = 0.5
# Dumps handed to a worker ahead of time: it starts the next one as soon as it sends a row,
# instead of idling until the parent (on a busy machine, late) hands it more.
_IN_FLIGHT = 2


@dataclass(slots=True)
class _Slot:
    process: BaseProcess
    conn: Connection
    tasks: deque[Path] = field(default_factory=deque)
    """Sent to the worker, in order; the first is the one it works on."""
    started: float = 0.0
    """When the worker started on the first task."""

    @property
    def task(self) -> Path | None:
        return self.tasks[0] if self.tasks else None


def _context() -> Any:
    # fork starts a worker in milliseconds and shares the imported modules
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _worker_main(conn: Connection, options: WorkOptions, memo: Path | bool, scratch: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker killed for its time limit skips its clean-ups: its temporary files (cubin
    # copies among them) go into the scan's own directory, which the parent removes.
    tempfile.tempdir = scratch
    if memo is not False:
        options = with_store(options, DisassemblyFiles(memo if isinstance(memo, Path) else None))
    while True:
        try:
            path = conn.recv()
        except EOFError:
            return
        if path is None:
            return
        conn.send(scan_dump(path, options))


class WorkerPool:
    """`jobs` worker processes scanning dumps with `options`, `timeout_s` seconds each at most.

    `memo`: a directory to share disassemblies through, True to remember them in each
    worker only, False not to remember them.
    """

    def __init__(
        self, jobs: int, options: WorkOptions, timeout_s: float, *, memo: Path | bool = True
    ) -> None:
        self._jobs = max(jobs, 1)
        self._options = options
        self._timeout_s = timeout_s
        self._memo = memo
        self._context = _context()
        self._slots: list[_Slot] = []
        self._scratch = ""

    def run(self, paths: Iterable[Path], on_row: Callable[[DumpRow], None]) -> None:
        """Scan every path, calling `on_row` in the parent as each row arrives.

        Raises KeyboardInterrupt after stopping the workers when interrupted.
        """
        pending = deque(paths)
        self._scratch = tempfile.mkdtemp(prefix="postmortem-scan-")
        try:
            self._slots = [self._start() for _ in range(min(self._jobs, len(pending)))]
            for slot in self._slots:
                self._assign(slot, pending)
            while any(slot.task is not None for slot in self._slots):
                self._step(pending, on_row)
        except KeyboardInterrupt:
            self._take_sent(on_row)
            raise
        finally:
            self._stop()
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _take_sent(self, on_row: Callable[[DumpRow], None]) -> None:
        # Interrupted: the rows the workers have sent, or are sending (a report is written
        # before its row goes out), are finished work; keep them. The workers ignore SIGINT,
        # so a short grace is enough for a row in the middle of being sent.
        deadline = time.monotonic() + _GRACE_S
        for slot in self._slots:
            while slot.task is not None and slot.conn.poll(max(deadline - time.monotonic(), 0)):
                try:
                    row: DumpRow = slot.conn.recv()
                except (EOFError, OSError):
                    break
                slot.tasks.popleft()
                on_row(row)

    def _start(self) -> _Slot:
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_worker_main,
            args=(child, self._options, self._memo, self._scratch),
            daemon=True,
        )
        process.start()
        child.close()
        return _Slot(process, parent)

    def _assign(self, slot: _Slot, pending: deque[Path]) -> None:
        replaced = False
        while pending and len(slot.tasks) < _IN_FLIGHT:
            path = pending.popleft()
            try:
                slot.conn.send(path)
            except OSError:  # the worker died; with dumps in flight, its pipe says so
                pending.appendleft(path)
                if slot.tasks or replaced:
                    return
                self._replace(slot)  # it died idle: a fresh worker takes its place
                replaced = True
                continue
            if not slot.tasks:
                slot.started = time.monotonic()
            slot.tasks.append(path)

    def _step(self, pending: deque[Path], on_row: Callable[[DumpRow], None]) -> None:
        busy = {slot.conn: slot for slot in self._slots if slot.task is not None}
        first_deadline = min(slot.started for slot in busy.values()) + self._timeout_s
        tick = min(_TICK_S, max(first_deadline - time.monotonic(), 0.0))
        for conn in wait(list(busy), timeout=tick):
            slot = busy[conn]  # type: ignore[index]
            try:
                row: DumpRow = slot.conn.recv()
                slot.tasks.popleft()
                slot.started = time.monotonic()  # the worker went on to the next one
            except (EOFError, OSError):
                message = f"worker process died ({self._exit(slot)})"
                row = self._lost(slot, message, RowStatus.CRASHED, pending)
            on_row(row)
            self._assign(slot, pending)
        now = time.monotonic()
        for slot in self._slots:
            if slot.task is not None and now - slot.started > self._timeout_s:
                message = f"no result within {self._timeout_s:g} s (--timeout); worker killed"
                on_row(self._lost(slot, message, RowStatus.TIMEOUT, pending))
                self._assign(slot, pending)

    def _lost(self, slot: _Slot, message: str, status: RowStatus, pending: deque[Path]) -> DumpRow:
        """An error row for the slot's dump; the slot gets a fresh worker, and the dumps
        sent ahead to the old one go back to the front of the queue."""
        assert slot.task is not None
        path, elapsed = slot.tasks.popleft(), time.monotonic() - slot.started
        pending.extendleft(reversed(slot.tasks))
        self._replace(slot)
        return lost_row(path, status, message, round(elapsed, 4))

    def _replace(self, slot: _Slot) -> None:
        """A fresh worker in the slot, with nothing in flight."""
        self._kill(slot)
        fresh = self._start()
        slot.process, slot.conn, slot.tasks = fresh.process, fresh.conn, deque()

    @staticmethod
    def _exit(slot: _Slot) -> str:
        slot.process.join(1)
        code = slot.process.exitcode
        return f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"

    @staticmethod
    def _kill(slot: _Slot) -> None:
        if slot.process.is_alive() and slot.process.pid is not None:
            os.kill(slot.process.pid, signal.SIGKILL)
        slot.process.join()
        slot.conn.close()

    def _stop(self) -> None:
        for slot in self._slots:
            if slot.task is None and slot.process.is_alive():
                with contextlib.suppress(OSError):
                    slot.conn.send(None)
        deadline = time.monotonic() + 2
        for slot in self._slots:
            if slot.task is None:
                slot.process.join(max(deadline - time.monotonic(), 0))
            self._kill(slot)
        self._slots = []
