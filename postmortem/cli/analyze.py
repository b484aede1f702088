"""`postmortem analyze`: one dump's report, or the incident of several."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from postmortem.cli.common import (
    ColorMode,
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
from postmortem.cli.options import ToolSettings, analyze_options, source_options, tool_options
from postmortem.errors import BadOption, ExitStatus
from postmortem.report.formats import ANALYZE_FORMATS, format_of
from postmortem.report.textsafe import escape_controls

if TYPE_CHECKING:
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.fault.source import SourcePaths


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
    type=click.Choice([m.value for m in ColorMode]),
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
    "--no-cache", is_flag=True,
    help="Run nvdisasm again: do not use the listings kept under "
    "$XDG_CACHE_HOME/postmortem/disassembly, nor keep new ones.",
)  # fmt: skip
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Show every fault site and every faulting lane's address (else the 16 sites with the "
    "most lanes, and the first 8 lanes of each in text, 32 in md, 1024 in html).",
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
    sources: SourcePaths,
    mode: str,
    tools: ToolSettings,
    timeout: float,
    no_cache: bool,
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
    if output is not None:
        guarded(debug, lambda: check_output(output))
    if host_logs:
        guarded(debug, lambda: check_host_logs(host_logs))
    tools = replace(tools, timeout=timeout)
    options = analyze_options(
        tools, sources, window, mode, host_logs, redact=not no_redact, kept=not no_cache
    )
    colored = fmt == "text" and output is None and wants_color(ColorMode(color), sys.stdout)
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


def analyze_text(
    core: Path,
    options: AnalyzeOptions,
    fmt: str,
    *,
    color: bool,
    verbose: bool,
    sentry_dsn: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> str:
    """The report `postmortem analyze` writes; with `sentry_dsn`, the dump's event is sent
    there too, and `warn` is told when Sentry did not take it."""
    from postmortem.analysis.analyze import analyze_dump
    from postmortem.report.render import report_text

    target = None
    if sentry_dsn:
        from postmortem.scan.events.sentry import sentry_target

        target = sentry_target(sentry_dsn)  # before the work: a bad DSN is an error
    analysis = analyze_dump(core, options)
    if target is not None:
        from postmortem.scan.events.sentry import send_analysis

        warning = send_analysis(core, analysis, options, target)
        if warning is not None and warn is not None:
            warn(warning)
    return report_text(analysis, fmt, color=color, verbose=verbose)


def incident_text(
    cores: Sequence[Path], options: AnalyzeOptions, fmt: str, *, color: bool
) -> tuple[str, ExitStatus]:
    """The incident report `postmortem analyze CORE...` writes for several dumps, and its exit
    status: OK; SCAN_ERRORS when some dumps could not be read; BAD_INPUT when none could."""
    from postmortem.analysis.fleet.analyze import analyze_incident
    from postmortem.analysis.fleet.incident import Role
    from postmortem.report.incident import build_incident_report
    from postmortem.report.render import render

    incident = analyze_incident(cores, options)
    text = render("incident", build_incident_report(incident), fmt, color=color)
    unreadable = sum(1 for row in incident.rows if row.role is Role.UNREADABLE)
    if not unreadable:
        return text, ExitStatus.OK
    all_failed = unreadable == len(incident.rows)
    return text, ExitStatus.BAD_INPUT if all_failed else ExitStatus.SCAN_ERRORS


def check_output(path: Path) -> None:
    """Refuse, before any work, an output file that cannot be written.

    Raises:
        BadOption: `path` is a folder, or its folder is missing or not writable.
    """
    if path.is_dir():
        raise BadOption("-o", f"{path} is a folder")
    folder = path.parent
    if not folder.is_dir():
        raise BadOption("-o", f"{path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) and not os.access(path, os.W_OK):
        raise BadOption("-o", f"{path}: the folder {folder} is not writable")


def check_host_logs(paths: Sequence[Path]) -> None:
    """Refuse, before any work, a host log that cannot be read.

    Raises:
        BadOption: a log is missing, a folder, not a file or a pipe, or not readable.
    """
    from postmortem.host.reader import host_log_problem

    for path in paths:
        problem = host_log_problem(path)
        if problem is not None:
            raise BadOption("--host-log", f"{path}: {problem}")


def write_output(path: Path, text: str) -> None:
    """Write a report to `path`.

    Raises:
        BadOption: the file cannot be written (a device that is full, a read-only file).
    """
    try:
        with path.open("w", encoding="utf-8") as file:
            file.write(text)
    except OSError as error:
        raise BadOption("-o", f"{path}: cannot write: {error.strerror or error}") from None
