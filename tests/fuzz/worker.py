"""The worker side: build a mutant, run the pipeline on it, measure time and memory.

Memory is measured twice. The peak RSS growth of every mutant (VmHWM, reset before each
mutant through /proc/self/clear_refs; it counts the touched pages of the mapped dump too),
and the peak of `tracemalloc` (Python objects and numpy buffers, which numpy reports to
tracemalloc) for the mutants the campaign traces: tracing makes the pipeline about 6
times slower, so a campaign traces one mutant in `--trace-every` (and a replay always).
The memory limit applies to both: over it, the outcome is `memory`. RLIMIT_DATA (private
writable memory: the heap and numpy's buffers, not the read-only map of the dump) is set
to the limit plus a margin, so an allocation far over it fails at once with MemoryError
(outcome `memory`) instead of exhausting the machine.
"""

from __future__ import annotations

import contextlib
import os
import resource
import tempfile
import time
import traceback
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postmortem.errors import PostmortemError
from tests.fuzz.mutant import NotApplicable, build
from tests.fuzz.pipeline import STEPS, Step

ROOT = Path(__file__).resolve().parents[2]
_MARGIN = 128 << 20


TRACE_SLOWDOWN = 8
"""How much slower a step may be under tracemalloc before it is stopped as slow."""
WALL_SLACK = 4
"""A step is judged by the CPU time it used, so a loaded machine (CI runs the campaign beside
the slow tier) does not turn a 0.5 s step into a failure; the worker is killed only once
the wall clock passes this many times the limit (a step blocked on something, not working)."""


@dataclass(frozen=True, slots=True)
class Limits:
    seconds: float = 5.0
    """Per step (each step opens the dump and does one command's work), CPU time of the
    worker; a traced mutant's steps get TRACE_SLOWDOWN times as long."""
    memory_bytes: int = 512 << 20
    traceback: bool = False
    """Send the whole traceback of a crash back (replays)."""


@dataclass(frozen=True, slots=True)
class Task:
    index: int
    dump: str
    mutator: str
    seed: int
    trace: bool = False
    """Measure the tracemalloc peak too (slow)."""

    @property
    def triple(self) -> str:
        return f"{self.dump} {self.mutator} {self.seed}"


@dataclass(frozen=True, slots=True)
class Result:
    task: Task
    outcome: str
    """ok, skipped, error:<PostmortemError class>, crash:<type>, slow, memory."""
    seconds: float = 0.0
    """The whole pipeline, wall clock."""
    step_seconds: float = 0.0
    """The slowest step's CPU time (the time limit applies to it)."""
    traced_bytes: int | None = None
    """Peak of tracemalloc while the pipeline ran (None: not traced)."""
    rss_bytes: int = 0
    """Peak resident set growth while the pipeline ran (VmHWM - VmRSS before)."""
    step: str | None = None
    where: str | None = None
    """The traceback's last frame, `file:line in function`."""
    ours: str | None = None
    """The traceback's last frame inside postmortem/."""
    message: str | None = None
    traceback: str | None = None

    @property
    def failed(self) -> bool:
        return self.outcome.startswith("crash:") or self.outcome in ("slow", "memory")


def serve(conn: Any, workdir: str, limits: Limits) -> None:
    """Worker main loop: Task in, ("step", name) as each step starts, Result out."""
    tempfile.tempdir = workdir  # the reader's decompressed copies go where we clean up
    os.environ["TMPDIR"] = workdir
    with contextlib.suppress(ValueError, OSError):
        data = _status("VmData")
        resource.setrlimit(resource.RLIMIT_DATA, (data + limits.memory_bytes + _MARGIN, -1))
    while (task := conn.recv()) is not None:
        conn.send(("done", run_task(task, Path(workdir), limits, conn)))


def run_task(task: Task, workdir: Path, limits: Limits, conn: Any = None) -> Result:
    try:
        mutant = build(task.dump, task.mutator, task.seed)
    except NotApplicable as reason:
        return Result(task, "skipped", message=str(reason))
    path = workdir / ("mutant.nvcudmp" + (".gz" if mutant.compressed else ""))
    mutant.write(path)
    try:
        return measure(task, path, limits, conn)
    finally:
        path.unlink()


def measure(task: Task, path: Path, limits: Limits, conn: Any = None) -> Result:
    """Run every step on the mutant at `path`; the outcome is the worst one seen."""
    if task.trace:
        tracemalloc.start()
    _reset_peak_rss()
    rss_before = _status("VmRSS")
    start = time.perf_counter()
    outcome, failure, slowest = "ok", None, 0.0
    for step in STEPS:
        if conn is not None:
            conn.send(("step", step.name))
        began = time.process_time()
        outcome, failure = _run_step(step, path, outcome, failure)
        slowest = max(slowest, time.process_time() - began)
        if outcome == "memory" or outcome.startswith("crash:"):
            break
    seconds = time.perf_counter() - start
    rss = max(0, _status("VmHWM") - rss_before)
    traced = None
    if task.trace:
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if outcome.startswith(("ok", "error")):
        if max(traced or 0, rss) > limits.memory_bytes:
            outcome = "memory"
        elif slowest > limits.seconds * (TRACE_SLOWDOWN if task.trace else 1):
            outcome = "slow"
    details: dict[str, Any] = {}
    if failure is not None:
        step_name, error = failure
        frames = traceback.extract_tb(error.__traceback__)
        ours = [f for f in frames if "/postmortem/" in f.filename]
        details = {
            "step": step_name,
            "where": _frame(frames[-1]) if frames else None,
            "ours": _frame(ours[-1]) if ours else None,
            "message": str(error)[:500],
        }
        if limits.traceback and not outcome.startswith("error"):
            details["traceback"] = "".join(traceback.format_exception(error))
    return Result(task, outcome, seconds, slowest, traced, rss, **details)


def _run_step(step: Step, path: Path, outcome: str, failure: Any) -> tuple[str, Any]:
    """The outcome so far after `step`: an error is kept unless a worse outcome comes."""
    try:
        step.run(path)
    except PostmortemError as error:
        if failure is None:
            return f"error:{type(error).__name__}", (step.name, error)
    except MemoryError as error:
        return "memory", (step.name, error)
    except Exception as error:
        return f"crash:{type(error).__name__}", (step.name, error)
    return outcome, failure


def _frame(frame: traceback.FrameSummary) -> str:
    name = frame.filename
    with contextlib.suppress(ValueError):
        name = str(Path(name).relative_to(ROOT))
    if "site-packages/" in name:
        name = name.split("site-packages/", 1)[1]
    return f"{name}:{frame.lineno} in {frame.name}"


def _status(key: str) -> int:
    """A size from /proc/self/status, in bytes (0 where there is none)."""
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak_rss() -> None:
    # "5" resets VmHWM to the current RSS (Linux >= 4.0); without it the growth reads low.
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
