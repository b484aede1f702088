"""`postmortem trigger`: a hung process dumped through its coredump pipe."""

from __future__ import annotations

from pathlib import Path

import click

from postmortem.cli.common import (
    debug_option,
    dump_dir_option,
    guarded,
    no_analyze_option,
    report_format_option,
)
from postmortem.cli.options import ToolSettings, analyze_options, tool_options
from postmortem.report.textsafe import escape_controls


@click.command()
@click.argument("pipe", required=False, type=click.Path(path_type=Path))
@click.option("--pid", type=click.IntRange(min=1), help="Find the pipe of this process.")
@dump_dir_option
@click.option(
    "--dump", "dump_glob", metavar="GLOB",
    help="Where the dump will appear (default: the process's CUDA_COREDUMP_FILE, then DIR).",
)  # fmt: skip
@click.option(
    "--timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.01),
    help="Seconds to wait for the process to read the pipe.",
)  # fmt: skip
@click.option(
    "--wait", default=300.0, show_default=True, type=click.FloatRange(min=0.1),
    help="Seconds to wait for the dump to be written.",
)  # fmt: skip
@click.option("--watch", is_flag=True, help="Trigger only when a condition below holds.")
@click.option(
    "--on-line", metavar="REGEX",
    help="Fire on a new line of --log matching REGEX (Python syntax).",
)  # fmt: skip
@click.option(
    "--log", "log", metavar="FILE", type=click.Path(path_type=Path),
    help="The log to follow (as tail -F: rotation and truncation survived).",
)  # fmt: skip
@click.option(
    "--metrics", metavar="FILE", type=click.Path(path_type=Path),
    help="A metrics or heartbeat file, for --quiet-for.",
)  # fmt: skip
@click.option(
    "--quiet-for", metavar="SECONDS", type=click.FloatRange(min=0, min_open=True),
    help="Fire when --log or --metrics has not changed for SECONDS.",
)  # fmt: skip
@click.option(
    "--deadline", metavar="SECONDS", type=click.FloatRange(min=0, min_open=True),
    help="Fire SECONDS after the watch starts.",
)  # fmt: skip
@report_format_option
@no_analyze_option
@tool_options()
@debug_option
def trigger(
    pipe: Path | None,
    pid: int | None,
    dump_dir: Path,
    dump_glob: str | None,
    timeout: float,
    wait: float,
    watch: bool,
    on_line: str | None,
    log: Path | None,
    metrics: Path | None,
    quiet_for: float | None,
    deadline: float | None,
    fmt: str,
    no_analyze: bool,
    tools: ToolSettings,
    debug: bool,
) -> None:
    """Dump a hung process's GPU through its coredump PIPE (or --pid's), then analyze it.

    The process must have started with CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1 (`postmortem
    capture --hang`). Writes 1 MiB of zeros into the pipe, waits for the dump, analyzes it
    as a hang and prints the report's path.

    --watch waits first, polling every 0.2 s without ptrace, until any condition given holds:
    a new line of --log matches --on-line, --log or --metrics has not changed for
    --quiet-for seconds, or --deadline seconds have passed. Then it triggers one dump, says
    what fired it, and goes on as above. It ends with status 5, and no dump, when the
    process ends first.

    Exit status: 0 report written; 2 no pipe, not a pipe, an unreadable dump, or watch
    options that do not go together; 5 nobody read the pipe, no dump was written in time,
    or the watched process ended before the watch fired.

    \b
    Examples:
      postmortem trigger --pid 12345
      postmortem trigger postmortem-dumps/corepipe.myhost.12345
      postmortem trigger --pid 12345 --watch --log train.log \\
          --on-line 'Watchdog caught collective operation timeout'
      postmortem trigger --pid 12345 --watch --log serve.log \\
          --on-line 'Scheduler watchdog timeout|EngineDeadError'
      postmortem trigger --pid 12345 --watch --metrics heartbeat --quiet-for 60
      postmortem trigger --pid 12345 --watch --deadline 3600
    """
    from postmortem.capture.on_demand import TriggerRequest, trigger_dump
    from postmortem.capture.reporting import ReportSettings
    from postmortem.capture.watch import WatchSpec

    spec = WatchSpec(on_line, log, metrics, quiet_for, deadline)
    watching = watch or spec.armed  # a condition given arms the watch by itself
    request = TriggerRequest(
        pipe, pid, dump_dir, dump_glob, timeout, wait, spec if watching else None
    )
    report = ReportSettings(analyze_options(tools, kept=True), fmt, not no_analyze)
    path = guarded(debug, lambda: trigger_dump(request, report))
    click.echo(escape_controls(str(path)))
