"""`postmortem capture`: a command run so that a GPU fault or a hang is dumped, then analyzed."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from postmortem.cli.common import (
    debug_option,
    dump_dir_option,
    guarded,
    no_analyze_option,
    raiser,
    report_format_option,
)
from postmortem.cli.options import ToolSettings, analyze_options, tool_options
from postmortem.errors import BadOption


@click.command(context_settings={"allow_interspersed_args": False})
@dump_dir_option
@click.option("--full", is_flag=True, help="Dump memory too (no lightweight generation flags).")
@click.option("--hang", is_flag=True, help="Let `postmortem trigger` dump a hang on demand.")
@click.option("--sglang", is_flag=True, help="Also set SGLANG_CUDA_COREDUMP and its folder.")
@click.option(
    "--kernel-api-log", metavar="LEVEL",
    help="SGLang's kernel API log at LEVEL (1, 3, 5 or 10), written into DIR.",
)  # fmt: skip
@click.option("--print-env", is_flag=True, help="Print the exports (DIR as given); run nothing.")
@click.option(
    "--check", is_flag=True,
    help="Say what a GPU exception and a hang would leave, and what is wrong; run nothing.",
)  # fmt: skip
@click.option(
    "--pid", metavar="PID", type=click.IntRange(min=1),
    help="With --check: check the environment this running process started with.",
)  # fmt: skip
@click.option(
    "--hang-after", metavar="SECONDS", type=click.FloatRange(min=0, min_open=True),
    help="Dump a hang (implies --hang) once COMMAND's output has been silent SECONDS.",
)  # fmt: skip
@report_format_option
@no_analyze_option
@tool_options()
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND [ARGS...]")
@debug_option
def capture(
    dump_dir: Path,
    full: bool,
    hang: bool,
    sglang: bool,
    kernel_api_log: str | None,
    print_env: bool,
    check: bool,
    pid: int | None,
    hang_after: float | None,
    fmt: str,
    no_analyze: bool,
    tools: ToolSettings,
    command: tuple[str, ...],
    debug: bool,
) -> None:
    """Run COMMAND so that a GPU fault writes a coredump, then analyze every dump it wrote.

    Sets the CUDA_COREDUMP_* variables of the vLLM and SGLang crash guides (a value already
    exported wins), keeps COMMAND's output in DIR/host.PID.log while passing it through,
    forwards signals to it, and writes a report beside each dump. --print-env prints the
    exports instead, for a shell, a Slurm or a Kubernetes spec.

    --hang-after N watches COMMAND's output (both streams, as the host log keeps them): once
    it has been silent N seconds, a dump is triggered, once, through every coredump pipe
    COMMAND's processes made in DIR (no ptrace), and analyzed as a hang when COMMAND ends
    (stopped by its watchdog, or by you). Pick N below the engine's own watchdog (vLLM: 180).
    A dump a serving engine triggered itself (SGLang's "Triggered CUDA user coredump for PID
    N" line) is analyzed as a hang too.

    The environment COMMAND would get is checked first: a variable that keeps a dump from
    being written (CUDA_DEVICE_WAITS_ON_EXCEPTION=1, CUDA_ENABLE_COREDUMP_ON_EXCEPTION other
    than 1, a dump or pipe folder that does not exist or cannot be written) stops COMMAND from
    starting; one that loses part of it (the CUDA_ENABLE_LIGHTWEIGHT_COREDUMP that CUDA 13.0
    removed, a misspelled CUDA_COREDUMP_GENERATION_FLAGS name, progress lines off) is a
    warning. --check prints the verdict instead: where a GPU exception's dump would go and
    what it would hold, whether a hang can be dumped and through which pipe, then each
    problem with its fix; --check --pid PID does so for a running process (the environment
    it started with). --print-env prints the problems as comments above the exports.

    Exit status: COMMAND's (128+N when a signal N killed it), whatever the analysis found;
    127 or 126 when it cannot be run; 2 bad arguments, or an error left in the environment
    (with --check: a dump that was asked for would not be written).

    \b
    Examples:
      postmortem capture -- python serve.py --model m
      postmortem capture --hang --dir /scratch/dumps -- torchrun train.py
      postmortem capture --hang-after 120 -- python -m sglang.launch_server --model m
      postmortem capture --print-env --dir /scratch/dumps >> job.sh
      postmortem capture --check --hang
      postmortem capture --check --pid 12345
    """
    from postmortem.capture.environment import CaptureSettings
    from postmortem.capture.reporting import ReportSettings
    from postmortem.capture.session import capture_command, check_command, print_env_command

    settings = CaptureSettings(
        dump_dir, full, hang or hang_after is not None, sglang, kernel_api_log
    )
    if pid is not None and not check:
        guarded(debug, raiser(BadOption("--pid", "goes with --check")))
    if check:
        sys.exit(guarded(debug, lambda: check_command(settings, pid)))
    if print_env:
        click.echo(guarded(debug, lambda: print_env_command(settings)), nl=False)
        return
    report = ReportSettings(analyze_options(tools, kept=True), fmt, not no_analyze)
    sys.exit(guarded(debug, lambda: capture_command(command, settings, report, hang_after)))
