"""Each dump a capture or a trigger found, analyzed and its report written beside it; what
they say on standard error, one line at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from postmortem.errors import (
    OutputUnwritable,
    PostmortemError,
)
from postmortem.report.formats import suffix_of
from postmortem.report.textsafe import escape_controls

if TYPE_CHECKING:
    from postmortem.analysis.analyze import AnalysisMode, AnalyzeOptions


@dataclass(frozen=True, slots=True)
class ReportSettings:
    """Whether and how each dump found is analyzed."""

    options: AnalyzeOptions
    """The tools and limits, as every command builds them
    (`postmortem.cli.options.analyze_options`)."""
    fmt: str = "md"
    """The reports' format: md, html, json or text."""
    analyze: bool = True
    """False (`--no-analyze`): list the dumps only."""


def say(line: str) -> None:
    """One line on standard error, prefixed, with control characters escaped."""
    click.echo(escape_controls(f"postmortem: {line}"), err=True)


def report_dumps(
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
        return report_dump(dump, report, logs, mode)
    except PostmortemError as error:
        hint = f" (hint: {error.hint})" if error.hint else ""
        say(f"error: {error}{hint}")
    except Exception as error:  # a bug of ours: one line, and the other dumps still done
        say(f"internal error: {type(error).__name__}: {error} ({dump})")
    return None


def report_dump(
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
