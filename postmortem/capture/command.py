"""What `postmortem capture` and `postmortem trigger` do, for `postmortem.cli`.

capture: plan the variables, run the command with its output kept, find the dumps it wrote,
analyze each with the host log attached, and write each report beside its dump. trigger: find
a process's pipe, write the trigger, wait for the dump, analyze it as a hang. Both say what
they do on standard error, one line at a time, prefixed ``postmortem:``; a dump that cannot
be analyzed gets its one-line error and the others are still analyzed.

`trigger --watch` and `capture --hang-after` first wait for a hang (`capture/watch.py`), then
write the trigger once. A dump that was asked for (by the watch, or by a serving engine whose
"Triggered CUDA user coredump for PID N" line is in the host log) is analyzed as a hang.

Before COMMAND starts, the environment it would get is checked (`capture/checks.py`): an error
(a dump asked for that would not be written) refuses to start it, a warning is said. `--check`
prints the whole verdict instead, for the plan or for a running process (`--pid`).
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from postmortem.capture.checks import EnvironmentCheck, check_environment
from postmortem.capture.child import MAX_LOG_BYTES, ChildExit, run_child
from postmortem.capture.dumps import (
    MTIME_SLACK_S,
    crash_folder_dumps,
    dump_pid,
    expand,
    file_mtime,
    matching_files,
    matching_pipes,
    named_files,
    unique,
    wait_for_dump,
)
from postmortem.capture.environment import (
    DUMP_NAME,
    KERNEL_API_LEVELS,
    KERNEL_API_LOG_NAME,
    PIPE_NAME,
    CaptureSettings,
    EnvironmentPlan,
    plan_environment,
    sanitizer_warning,
)
from postmortem.capture.trigger import (
    check_fifo,
    cwd_of_pid,
    environ_of_pid,
    find_pipe,
    is_fifo,
    pid_of_pipe,
    process_cwd,
    process_environment,
    trigger,
)
from postmortem.capture.verdict import describe_check, problem_lines
from postmortem.capture.watch import (
    Activity,
    SilenceCondition,
    WatchSpec,
    arm,
    check_spec,
    process_alive,
    watch,
)
from postmortem.errors import (
    BadOption,
    ExitStatus,
    OutputUnwritable,
    PostmortemError,
    TriggerTimedOut,
)
from postmortem.report.formats import suffix_of
from postmortem.report.textsafe import escape_controls

if TYPE_CHECKING:
    from postmortem.analysis.analyze import AnalysisMode, AnalyzeOptions


@dataclass(frozen=True, slots=True)
class ReportSettings:
    """Whether and how each dump found is analyzed."""

    options: AnalyzeOptions
    """The tools and limits, as every command builds them (`commands.analyze_options`)."""
    fmt: str = "md"
    """The reports' format: md, html, json or text."""
    analyze: bool = True
    """False (`--no-analyze`): list the dumps only."""


def say(line: str) -> None:
    """One line on standard error, prefixed, with control characters escaped."""
    click.echo(escape_controls(f"postmortem: {line}"), err=True)


def print_env_command(settings: CaptureSettings) -> str:
    """The lines a job script needs for a capture's variables (`--print-env`): a `mkdir -p`
    of the dump folder, then the exports, with absolute paths (a script runs in another
    folder, and the driver writes no dump into a folder that does not exist). The problems
    left in the environment the exports make (this one, with them) come first, as shell
    comments. Kept values are said on standard error."""
    folder = settings.dump_dir.absolute()
    plan = _plan(replace(settings, dump_dir=folder))
    check = check_environment(plan.environment(os.environ), Path.cwd(), made=(folder,))
    comments = "".join(f"# {escape_controls(line)}\n" for line in problem_lines(check))
    return f"{comments}mkdir -p {shlex.quote(str(folder))}\n{plan.exports()}"


def check_command(settings: CaptureSettings, pid: int | None) -> int:
    """`--check`: say on standard output what a GPU exception and a hang would leave, then
    each problem, for the environment `capture` would run COMMAND with (this one with the
    plan), or the one process `pid` started with; the exit status: 2 when a dump that was
    asked for would not be written, else 0.

    Raises:
        UnreadableFile: process `pid` is gone, or its environment cannot be read.
    """
    if pid is not None:
        environ, cwd = environ_of_pid(pid), cwd_of_pid(pid)
        check = check_environment(environ, cwd)
        click.echo(
            f"process {pid}: the environment it started with (/proc/{pid}/environ; what it "
            f"set in itself since is not seen), in {escape_controls(str(cwd))}"
        )
    else:
        folder = settings.dump_dir.absolute()
        plan = _plan(replace(settings, dump_dir=folder))
        check = check_environment(plan.environment(os.environ), Path.cwd(), made=(folder,))
    for line in describe_check(check):
        click.echo(escape_controls(line))
    return ExitStatus.BAD_INPUT if check.errors else ExitStatus.OK


def capture_command(
    argv: tuple[str, ...],
    settings: CaptureSettings,
    report: ReportSettings,
    hang_after: float | None = None,
) -> int:
    """Run `argv` under the capture's variables; the command's exit status. With
    `hang_after`, once the command's output (both streams) has been silent that many
    seconds, a dump is triggered through every coredump pipe its processes made in the
    folder, once; it is analyzed as a hang when the command ends.

    Raises:
        BadOption: no command, an option value that cannot be used, or a variable that
            keeps a dump that was asked for from being written (the command is not started).
        OutputUnwritable: the dump folder cannot be made or written.
        CommandNotStarted: the command cannot be run.
    """
    from postmortem.analysis.analyze import AnalysisMode

    if not argv:
        raise BadOption("COMMAND", "missing: give the command to run after --")
    folder = settings.dump_dir.absolute()
    plan = _plan(replace(settings, dump_dir=folder))
    environment = plan.environment(os.environ)
    _refuse_or_warn(argv, check_environment(environment, Path.cwd(), made=(folder,)))
    _make_folder(folder)
    hang_watch = _HangWatch(hang_after, plan, folder) if hang_after is not None else None
    child = run_child(
        argv, environment, folder,
        stdout=sys.stdout.buffer, stderr=sys.stderr.buffer,
        activity=hang_watch.activity if hang_watch else None,
        on_start=hang_watch.start if hang_watch else None,
    )  # fmt: skip
    hang_pids = {*child.triggered, *(hang_watch.finish() if hang_watch else ())}
    dumps = _written_dumps(plan, child)
    say(f"{argv[0]} {_ended(child.returncode)}; {len(dumps)} dump(s) written; host log {child.log}")
    if child.rotations:
        say(
            f"the host log passed {MAX_LOG_BYTES >> 20} MiB and was rotated "
            f"{child.rotations} time(s): it holds the newest output, {child.log}.1 what came "
            "before; older output is gone"
        )
    logs = (child.log, *_kernel_api_logs(plan, folder, child.started))
    pattern = plan.value("CUDA_COREDUMP_FILE") or DUMP_NAME
    modes = {
        dump: AnalysisMode.HANG if dump_pid(dump, pattern) in hang_pids else report.options.mode
        for dump in dumps
    }
    reports = _reports(dumps, report, logs, modes)
    # What the on-call engineer reads first, then where the whole of it is.
    for _, summary in reports:
        click.echo(summary, err=True)
    for path, _ in reports:
        say(f"report: {path}")
    return child.exit_status


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
    return _report(dump, report, logs, AnalysisMode.HANG)[0]


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


class _HangWatch:
    """`capture --hang-after`: a thread that waits for the command's silence, then triggers
    a dump through each coredump pipe made in the folder since the capture started."""

    def __init__(self, seconds: float, plan: EnvironmentPlan, folder: Path) -> None:
        self.activity = Activity()
        self._seconds = seconds
        self._pipe = plan.value("CUDA_COREDUMP_PIPE") or str(folder / PIPE_NAME)
        self._since = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pids: set[int] = set()

    def start(self, pid: int) -> None:
        """Watch the command `pid` (called once it runs)."""
        self._thread = threading.Thread(target=self._run, args=(pid,), daemon=True)
        self._thread.start()

    def finish(self) -> set[int]:
        """Stop watching; the process ids whose dumps were triggered."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self._pids

    def _run(self, pid: int) -> None:
        condition = SilenceCondition(self.activity, self._seconds)
        fired = watch([condition], process_alive(pid), stop=self._stop)
        if fired is None:
            return
        say(f"hang watch fired after {fired.after_s:.1f} s: {fired.reason}")
        host = socket.gethostname()
        pipes = matching_pipes(self._pipe, host=host, base=Path.cwd(), since=self._since)
        if not pipes:
            say(f"no coredump pipe to write to ({self._pipe}): did the command start CUDA?")
        for pipe in pipes:
            try:
                trigger(pipe, 10.0)
            except PostmortemError as error:
                say(f"error: {error}")
                continue
            target = dump_pid(pipe, self._pipe) or pid_of_pipe(pipe)
            if target is not None:
                self._pids.add(target)
            say(f"triggered a dump through {pipe}; it is analyzed as a hang when the command ends")


def _plan(settings: CaptureSettings) -> EnvironmentPlan:
    level = settings.kernel_api_log
    if level is not None and level not in KERNEL_API_LEVELS:
        raise BadOption("--kernel-api-log", f"{level}: not one of {', '.join(KERNEL_API_LEVELS)}")
    plan = plan_environment(settings, os.environ)
    for note in plan.notes:
        say(note)
    return plan


def _refuse_or_warn(argv: tuple[str, ...], check: EnvironmentCheck) -> None:
    """Say each warning (compute-sanitizer's first); refuse to start the command when a dump
    it asks for would not be written.

    Raises:
        BadOption: an error is left in the environment COMMAND would get.
    """
    warning = sanitizer_warning(argv)
    if warning is not None:
        say(f"warning: {warning}")
    if check.errors:
        first, more = check.errors[0], len(check.errors) - 1
        also = f"; {more} more: `postmortem capture --check` lists them" if more else ""
        raise BadOption("COMMAND", f"not started: {first.message} (fix: {first.fix}){also}")
    for line in problem_lines(check):
        say(line)


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputUnwritable(folder, error.strerror or str(error)) from None


def _ended(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by signal {-returncode} (exit status {128 - returncode})"
    return f"exited with status {returncode}"


def _written_dumps(plan: EnvironmentPlan, child: ChildExit) -> list[Path]:
    pattern = plan.value("CUDA_COREDUMP_FILE") or DUMP_NAME
    host = socket.gethostname()
    base = Path.cwd()
    by_pattern = matching_files(pattern, host=host, pid=child.pid, base=base, since=child.started)
    # A path the command's output names is taken only inside the folder the dumps go to: any
    # line can say "coredump: Writing ELF file to /elsewhere", and capture writes a report
    # beside each dump it takes.
    folder = Path(os.path.abspath(base / expand(pattern, host=host, pid=child.pid))).parent
    # SGLang's crash folder may put dumps in a folder per host inside the capture folder.
    crash_folder = crash_folder_dumps(folder, child.started)
    inside = {folder, *(Path(os.path.abspath(path)).parent for path in crash_folder)}
    existing = named_files(child.named, base)
    named = [path for path in existing if Path(os.path.abspath(path)).parent in inside]
    if len(named) < len(existing):
        outside = len(existing) - len(named)
        say(f"{outside} dump path(s) named in the output lie outside {folder}: not analyzed")
    return unique([*by_pattern, *named, *crash_folder])


def _kernel_api_logs(plan: EnvironmentPlan, folder: Path, since: float) -> list[Path]:
    """SGLang's kernel API logs in the folder written during the capture (one per process)."""
    if plan.value("SGLANG_KERNEL_API_LOGDEST") != str(folder / KERNEL_API_LOG_NAME):
        return []
    found = sorted(folder.glob(KERNEL_API_LOG_NAME.replace("%i", "*")))
    # file_mtime: None for a folder, or for a log removed since the glob (no traceback).
    return [
        p for p in found if (mtime := file_mtime(p)) is not None and mtime >= since - MTIME_SLACK_S
    ]


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


def _reports(
    dumps: list[Path],
    report: ReportSettings,
    logs: tuple[Path, ...],
    modes: dict[Path, AnalysisMode],
) -> list[tuple[Path, str]]:
    """A report beside each dump that can be analyzed (the others said in one line each), in
    its mode (hang for a dump that was asked for); the reports written, each with its
    on-call summary."""
    if not report.analyze:
        for dump in dumps:
            say(f"dump: {dump}" + (" (a hang)" if modes[dump] == "hang" else ""))
        return []
    written = (_report_or_say(dump, report, logs, modes[dump]) for dump in dumps)
    return [path for path in written if path is not None]


def _report_or_say(
    dump: Path, report: ReportSettings, logs: tuple[Path, ...], mode: AnalysisMode
) -> tuple[Path, str] | None:
    try:
        return _report(dump, report, logs, mode)
    except PostmortemError as error:
        hint = f" (hint: {error.hint})" if error.hint else ""
        say(f"error: {error}{hint}")
    except Exception as error:  # a bug of ours: one line, and the other dumps still done
        say(f"internal error: {type(error).__name__}: {error} ({dump})")
    return None


def _report(
    dump: Path, report: ReportSettings, logs: tuple[Path, ...], mode: AnalysisMode
) -> tuple[Path, str]:
    """Analyze `dump` and write its report beside it; the report's path, and the on-call
    summary that opens its text form (the dump's path, then the summary's lines)."""
    from postmortem.analysis.analyze import analyze_dump
    from postmortem.report.render import report_text

    options = replace(report.options, host_logs=logs, mode=mode)
    analysis = analyze_dump(dump, options)
    text = report_text(analysis, report.fmt)
    target = dump.with_name(dump.name + suffix_of(report.fmt))
    _write(target, text)
    terminal = text if report.fmt == "text" else report_text(analysis, "text")
    return target, terminal.split("\n\n", 1)[0]


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise OutputUnwritable(path, error.strerror or str(error)) from None


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
