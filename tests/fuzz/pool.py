"""Worker processes that run mutants with a time limit, restarted when they die or are killed."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

from tests.fuzz.worker import TRACE_SLOWDOWN, WALL_SLACK, Limits, Result, Task, serve

BUILD_SECONDS = 120.0
"""How long building and writing one mutant may take (a harness problem if longer)."""
RECYCLE = 2000
"""Mutants a worker runs before it is replaced (bounds slow leaks and heap growth)."""


@dataclass
class _Worker:
    process: Any
    conn: Any
    workdir: str
    task: Task | None = None
    assigned: float = 0.0
    started: float | None = None
    """When the current step started (None: the mutant is still being built)."""
    step: str | None = None
    done: int = 0
    finished: bool = field(default=False)


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class Pool:
    """`jobs` forked workers; `run(tasks)` yields one Result per task, in completion order."""

    def __init__(self, jobs: int, limits: Limits) -> None:
        self.jobs = max(1, jobs)
        self.limits = limits
        self.root = tempfile.mkdtemp(prefix="postmortem-fuzz-")
        self._context = multiprocessing.get_context("fork")
        self._serial = 0
        self.restarts = 0

    def _start(self) -> _Worker:
        self._serial += 1
        workdir = os.path.join(self.root, f"w{self._serial}")
        os.mkdir(workdir)
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=serve, args=(child, workdir, self.limits), daemon=True
        )
        process.start()
        child.close()
        return _Worker(process, parent, workdir)

    def _stop(self, worker: _Worker, kill: bool) -> None:
        if kill and worker.process.is_alive():
            os.kill(worker.process.pid, signal.SIGKILL)
        elif not kill:
            with contextlib.suppress(OSError):
                worker.conn.send(None)
        worker.process.join(10)
        worker.conn.close()
        shutil.rmtree(worker.workdir, ignore_errors=True)

    def run(self, tasks: Iterable[Task]) -> Iterator[Result]:
        pending = iter(tasks)
        workers = [self._start() for _ in range(self.jobs)]
        exhausted = False
        try:
            while True:
                for worker in workers:
                    if worker.task is None and not exhausted:
                        task = next(pending, None)
                        if task is None:
                            exhausted = True
                            break
                        worker.conn.send(task)
                        worker.task, worker.assigned = task, time.monotonic()
                        worker.started = worker.step = None
                busy = [w for w in workers if w.task is not None]
                if not busy:
                    return
                now = time.monotonic()
                timeout = max(0.0, min(self._deadline(w) for w in busy) - now)
                ready = wait([w.conn for w in busy], timeout)
                for worker in busy:
                    if worker.conn in ready:
                        result = self._receive(worker)
                        if result is not None:
                            yield result
                    elif time.monotonic() > self._deadline(worker):
                        yield self._timed_out(worker)
                for i, worker in enumerate(workers):
                    if worker.finished:
                        self._stop(worker, kill=worker.task is not None)
                        self.restarts += 1
                        workers[i] = self._start()
        finally:
            for worker in workers:
                self._stop(worker, kill=worker.task is not None)
            shutil.rmtree(self.root, ignore_errors=True)

    def _deadline(self, worker: _Worker) -> float:
        if worker.started is None:
            return worker.assigned + BUILD_SECONDS
        assert worker.task is not None
        slowdown = TRACE_SLOWDOWN if worker.task.trace else 1
        return worker.started + self.limits.seconds * slowdown * WALL_SLACK

    def _receive(self, worker: _Worker) -> Result | None:
        task = worker.task
        assert task is not None
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            worker.process.join(5)
            code = worker.process.exitcode
            worker.finished = True
            worker.task = None
            elapsed = time.monotonic() - (worker.started or worker.assigned)
            return Result(task, "crash:WorkerDied", elapsed, message=f"exit code {code}")
        if message[0] == "step":
            worker.started, worker.step = time.monotonic(), message[1]
            return None
        worker.task = None
        worker.done += 1
        if worker.done >= RECYCLE:
            worker.finished = True
        result: Result = message[1]
        return result

    def _timed_out(self, worker: _Worker) -> Result:
        task = worker.task
        assert task is not None
        worker.finished = True
        if worker.started is None:
            return Result(task, "crash:BuildTimeout", BUILD_SECONDS, message="harness")
        elapsed = time.monotonic() - worker.started
        message = f"killed after {elapsed:.1f} s of wall clock in step {worker.step}"
        return Result(task, "slow", elapsed, elapsed, step=worker.step, message=message)
