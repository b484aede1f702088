"""`postmortem analyze`: one dump's report, or the incident of several."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from postmortem.cli.options import source_options, tool_options
from postmortem.errors import BadOption
from postmortem.report.formats import ANALYZE_FORMATS, format_of
from postmortem.report.textsafe import escape_controls

if TYPE_CHECKING:
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.fault.source import PathMap
    from postmortem.commands import ToolSettings

from postmortem.cli.common import (
    check_core,
    debug_option,
    dump_paths,
    file_or_stdout,
    guarded,
    raiser,
    sentry_option,
    storage_option,
    wants_color,
    warn,
)


@click.command()
@click.argument("cores", nargs=-1, required=True, metavar="CORE...", callback=dump_paths)
@storage_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(ANALYZE_FORMATS),
    default=None,
    help="text for a terminal, md for an issue tracker, html for a browser, json for programs "
    "(default: as the -o file's name says, .html .md .json; else text).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, allow_dash=True),
    help="Write the report to this file instead of standard output (- for standard output).",
)
@click.option(
    "--color",
    type=click.Choice(("auto", "always", "never")),
    default="auto",
    show_default=True,
    help="Color the text report (auto: on a terminal, unless NO_COLOR is set; FORCE_COLOR "
    "forces it).",
)
@click.option(
    "--window",
    default=8,
    show_default=True,
    type=click.IntRange(0, 1000),
    help="Instructions shown before and after the faulting one.",
)
@source_options()
@click.option(
    "--mode",
    type=click.Choice(("auto", "fault", "hang")),
    default="auto",
    show_default=True,
    help="hang: where every warp is stuck and why (auto: when the dump records no exception).",
)
@tool_options()
@click.option(
    "--timeout",
    default=120.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds each external tool may run.",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="List every faulting lane's address (else the first 8 in text, 32 in md, 1024 in html).",
)
@click.option(
    "--host-log", "host_logs", multiple=True, metavar="FILE", type=click.Path(path_type=Path),
    help="What the host printed around the crash (a server's stderr with vLLM's input dump, "
    "dmesg, a compute-sanitizer report, an SGLang kernel API log), or SGLang's crash_dump_*.pkl "
    "(read without unpickling it), joined to the dump (repeatable).",
)  # fmt: skip
@click.option(
    "--no-redact", is_flag=True,
    help="Quote the host logs as written: no hiding of tokens, passwords, keys, credentials "
    "in URLs and home folders (hidden by default: reports go to tickets and Sentry).",
)  # fmt: skip
@sentry_option
@debug_option
def analyze(
    cores: tuple[Path, ...],
    fmt: str | None,
    output: Path | None,
    color: str,
    window: int,
    source_dirs: tuple[Path, ...],
    path_maps: tuple[PathMap, ...],
    mode: str,
    tools: ToolSettings,
    timeout: float,
    verbose: bool,
    host_logs: tuple[Path, ...],
    no_redact: bool,
    sentry_dsn: str | None,
    debug: bool,
) -> None:
    """Say where CORE faulted: kernel, SASS instruction, inline chain, source lines.

    Exit status: 0 report written, 2 unreadable input, 1 internal error. A missing or
    failing tool is not an error: the report says what it could not do and why.

    Several COREs, the dumps of one job: one incident report, each dump with its role
    (first fault, fault, collateral, stuck, unreadable) in the order the dumps were
    written, and one verdict. Exit status 4 when some dumps are unreadable, 2 when all are.

    Runs with no external tool at all (native facts only); with nvdisasm it shows the
    faulting instruction, the instructions around it and the inline chain; with cuda-gdb
    it checks the native facts against cuda-gdb's and lists any disagreement.

    \b
    Examples:
      postmortem analyze core.nvcudmp --source-dir ~/src/proj
      postmortem analyze core.nvcudmp -o report.md        # format from the name
      postmortem analyze core.nvcudmp --host-log job.log  # what the host printed, joined
      postmortem analyze dumps/core_*.nvcudmp            # one incident of many ranks
    """  # fmt: skip
    for core in cores:
        check_core(core, debug)
    core = cores[0]
    output = file_or_stdout(output)
    fmt = fmt or (format_of(output) if output is not None else None) or "text"
    from postmortem.commands import (
        analyze_options,
        analyze_text,
        check_host_logs,
        check_output,
        write_output,
    )

    if output is not None:
        guarded(debug, lambda: check_output(output))
    if host_logs:
        guarded(debug, lambda: check_host_logs(host_logs))
    tools = replace(tools, timeout=timeout, source_dirs=source_dirs, path_maps=path_maps)
    options = analyze_options(tools, window, mode, host_logs, redact=not no_redact)
    colored = fmt == "text" and output is None and wants_color(color, sys.stdout)
    if len(cores) > 1:
        _incident(cores, options, fmt, output, colored, sentry_dsn, debug)
    text = guarded(debug, lambda: analyze_text(core, options, fmt, color=colored, verbose=verbose,
                                            sentry_dsn=sentry_dsn, warn=warn))  # fmt: skip
    if output is None:
        # click strips ANSI codes from a stream that is not a terminal, unless told
        click.echo(text, nl=False, color=colored)
    else:
        guarded(debug, lambda: write_output(output, text))
        click.echo(f"report written to {escape_controls(str(output))}", err=True)


def _incident(
    cores: tuple[Path, ...],
    options: AnalyzeOptions,
    fmt: str,
    output: Path | None,
    colored: bool,
    sentry_dsn: str | None,
    debug: bool,
) -> NoReturn:
    """`analyze` of several dumps: the incident report, then the exit status it asks for."""
    from postmortem.commands import incident_text, write_output

    if sentry_dsn:
        why = "sends one dump's event; for several, use `postmortem scan --sentry-dsn`"
        guarded(debug, raiser(BadOption("--sentry-dsn", why)))
    text, status = guarded(debug, lambda: incident_text(cores, options, fmt, color=colored))
    if output is None:
        click.echo(text, nl=False, color=colored)
    else:
        guarded(debug, lambda: write_output(output, text))
        click.echo(f"report written to {escape_controls(str(output))}", err=True)
    sys.exit(status)
