"""What `postmortem capture` does: plan the variables, check the environment the command
would get, run it with its output kept (and, with --hang-after, a watch that triggers a dump
once its output falls silent), find the dumps it wrote, and analyze each with the host log
attached. `--print-env` and `--check` print the plan and the verdict instead.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import threading
import time
from dataclasses import replace
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
    cwd_of_pid,
    environ_of_pid,
    pid_of_pipe,
    trigger,
)
from postmortem.capture.verdict import describe_check, problem_lines
from postmortem.capture.watch import (
    Activity,
    SilenceCondition,
    process_alive,
    watch,
)
from postmortem.errors import (
    BadOption,
    ExitStatus,
    OutputUnwritable,
    PostmortemError,
)
from postmortem.report.textsafe import escape_controls

if TYPE_CHECKING:
    pass

from postmortem.capture.reporting import ReportSettings, report_dumps, say


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
    reports = report_dumps(dumps, report, logs, modes)
    # What the on-call engineer reads first, then where the whole of it is.
    for _, summary in reports:
        click.echo(summary, err=True)
    for path, _ in reports:
        say(f"report: {path}")
    return child.exit_status


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
