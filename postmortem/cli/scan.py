"""`postmortem scan`: many dumps found, analyzed and grouped by crash signature."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from postmortem.cli.common import (
    debug_option,
    file_or_stdout,
    guarded,
    scan_roots,
    sentry_option,
    storage_option,
)
from postmortem.cli.options import ToolSettings, analyze_options, source_options, tool_options
from postmortem.report.formats import ANALYZE_FORMATS, SCAN_FORMATS, format_of

if TYPE_CHECKING:
    from postmortem.analysis.fault.source import SourcePaths


FAIL_ON = ("new", "regressed", "any", "never")
"""`scan --fail-on`: `postmortem.scan.outputs.ci.policy.FailOn`, spelled here so that --help
needs no import of the scan."""


CI_MODES = ("auto", "github", "none")
"""`scan --ci`: `postmortem.scan.outputs.ci.write.CiMode`."""

ENGINES = ("local", "dask", "ray")
"""`scan --engine`: `postmortem.scan.engines.choose.EngineName`."""


@click.command()
@click.argument("roots", nargs=-1, required=True, metavar="DIR...", callback=scan_roots)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: all cores).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(SCAN_FORMATS),
    default=None,
    help="Index format; json writes JSON lines (one object per dump and group) "
    "[default: from -o's name (index.html), else text].",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the index to this file instead of standard output.",
)
@click.option(
    "--reports",
    "reports_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Write a report per dump into this directory, linked from the index.",
)
@click.option(
    "--report-format",
    type=click.Choice(ANALYZE_FORMATS),
    default=None,
    help="Format of the per-dump reports (default: the index's; html for an html index).",
)
@click.option(
    "--jsonl",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write JSON lines (one object per dump, one per group) to this file.",
)
@click.option(
    "--since", metavar="DATE",
    help="Only dumps written since: 2026-11-20 (UTC unless a zone is given), 36h, 7d.",
)  # fmt: skip
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=0.01),
    help="Seconds one dump may take; past it, it becomes a timeout row.",
)
@source_options()
@click.option(
    "--rules",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Signature rules (JSON: library_paths, top_frames); default: the packaged ones.",
)
@click.option(
    "--name-pattern",
    "name_patterns",
    multiple=True,
    metavar="PATTERN",
    help="The CUDA_COREDUMP_FILE pattern the dumps were written with (%h, %p, %t), tried first.",
)
@click.option("--follow-symlinks", is_flag=True, help="Follow links that lead out of DIR.")
@click.option(
    "--cache",
    "cache_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The scan cache file (default: one under $XDG_CACHE_HOME/postmortem/).",
)
@click.option("--no-cache", is_flag=True, help="Analyze every dump again; do not use the cache.")
@click.option(
    "--incident", is_flag=True,
    help="The dumps are those of one job: add which faulted first (by metadata timestamp), "
    "which are collateral, and one verdict to the index.",
)  # fmt: skip
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="local",
    show_default=True,
    help="Where the dumps are analyzed: worker processes here, or the workers of an existing "
    "Dask or Ray cluster, which read the dumps at the same paths (needs the dask or ray extra).",
)
@click.option("--scheduler", metavar="tcp://HOST:PORT", help="The Dask scheduler (--engine dask).")
@click.option(
    "--address", metavar="HOST:PORT",
    help="The Ray cluster (--engine ray; default: RAY_ADDRESS, else a Ray started here).",
)  # fmt: skip
@click.option(
    "--host-log", "host_logs", multiple=True, metavar="FILE", type=click.Path(path_type=Path),
    help="A kernel log (dmesg, journalctl -k): its Xid 13/31/43/79 lines are joined to the "
    "GPUs that faulted, by PCI address. Repeatable.",
)  # fmt: skip
@sentry_option
@click.option(
    "--owners",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A CODEOWNERS file: name each group's owners from its inline chain's source paths.",
)
@click.option(
    "--known", type=click.Path(path_type=Path, dir_okay=False),
    help="The repository's known-crashes file (TOML): mark each group known, new or "
    "regressed against it (`postmortem triage` edits it).",
)  # fmt: skip
@click.option(
    "--fail-on", type=click.Choice(FAIL_ON), default="never", show_default=True,
    help="Exit 6 when a group is new, regressed, or any group to act on (any).",
)  # fmt: skip
@click.option(
    "--ci", "ci_mode", type=click.Choice(CI_MODES), default="auto",
    show_default=True,
    help="GitHub Actions output (job summary, one annotation per new or regressed group): "
    "auto when GITHUB_ACTIONS=true.",
)  # fmt: skip
@click.option(
    "--junit", type=click.Path(path_type=Path, dir_okay=False),
    help="Also write a JUnit XML report: one test case per group, failing as --fail-on says.",
)  # fmt: skip
@click.option(
    "--tracker-comment", "tracker", type=click.Path(path_type=Path, dir_okay=False),
    help="Also write a tracker issue's comment (Markdown, for gh issue comment --body-file).",
)  # fmt: skip
@tool_options()
@storage_option
@debug_option
def scan(
    roots: tuple[Path, ...],
    jobs: int | None,
    fmt: str | None,
    output: Path | None,
    reports_dir: Path | None,
    report_format: str | None,
    jsonl: Path | None,
    since: str | None,
    timeout: float,
    sources: SourcePaths,
    rules: Path | None,
    name_patterns: tuple[str, ...],
    follow_symlinks: bool,
    cache_path: Path | None,
    no_cache: bool,
    incident: bool,
    engine: str,
    scheduler: str | None,
    address: str | None,
    host_logs: tuple[Path, ...],
    sentry_dsn: str | None,
    owners: Path | None,
    known: Path | None,
    fail_on: str,
    ci_mode: str,
    junit: Path | None,
    tracker: Path | None,
    tools: ToolSettings,
    debug: bool,
) -> None:
    """Find every CUDA coredump under DIR... and group them by crash signature.

    Dumps are found by content (ELF, ET_CORE, EM_CUDA; gzip too), whatever their names.
    Nothing under DIR is modified. Unchanged dumps come from the cache. cuda-gdb runs only
    for the per-dump reports (--reports), never for signatures.

    Exit status: 0 every dump analyzed; 6 a group that --fail-on counts; 4 the scan
    finished but some dumps are error rows (unreadable, truncated, corrupt, timed out);
    130 interrupted (Ctrl-C), with the partial results written; 2 bad arguments or cache;
    1 internal error.

    \b
    Examples:
      postmortem scan /shared/dumps -o index.html --reports reports/
      postmortem scan /shared/dumps --format json --jsonl rows.jsonl
      postmortem scan s3://bucket/dumps/ --since 24h
      postmortem scan artifacts/ --known known-crashes.toml --fail-on new --junit crashes.xml
    """
    from postmortem.scan import request as scan_cli
    from postmortem.scan.engines.choose import EngineName
    from postmortem.scan.outputs.ci.policy import FailOn
    from postmortem.scan.outputs.ci.write import CiMode

    fmt = fmt or (format_of(output) if output is not None else None) or "text"
    settings = scan_cli.ScanSettings(
        fmt=fmt, jobs=jobs, output=file_or_stdout(output), reports_dir=reports_dir,
        report_format=report_format, jsonl=jsonl, since=since, timeout_s=timeout, rules=rules,
        name_patterns=name_patterns, follow_symlinks=follow_symlinks, cache_path=cache_path,
        use_cache=not no_cache, engine=EngineName(engine), scheduler=scheduler, address=address,
        host_logs=host_logs, sentry_dsn=sentry_dsn, incident=incident, owners=owners,
        known=known, fail_on=FailOn(fail_on), ci=CiMode(ci_mode), junit=junit, tracker=tracker,
    )  # fmt: skip
    options = analyze_options(tools, sources)
    tty = sys.stderr.isatty()
    request = guarded(debug, lambda: scan_cli.scan_request(roots, settings, options, tty))
    result, text = guarded(debug, lambda: scan_cli.run(request))
    click.echo(text, nl=False)
    if request.outputs.output is not None:
        click.echo(scan_cli.summary_line(result, request.outputs.output), err=True)
    sys.exit(scan_cli.scan_exit_status(result, settings.fail_on))
