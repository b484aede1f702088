"""The scan a command asks for, behind `postmortem scan`'s arguments.

`postmortem.cli.scan` hands the option values here as typed objects, the scan's as a
`ScanSettings`, the tools' as the `AnalyzeOptions` every command builds alike; this module
checks them into a `ScanRequest` before any work, runs it, writes its outputs, and gives
the exit status.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fleet.signature import (
    SignatureRules,
    load_rules,
)
from postmortem.dumpnames import DEFAULT_PATTERNS, compile_pattern
from postmortem.errors import (
    BadOption,
    ExitStatus,
    ScanOutputError,
    UnreadableFile,
)
from postmortem.host.reader import host_log_problem
from postmortem.report.render import formats, render
from postmortem.report.textsafe import escape_controls
from postmortem.scan.engines.choose import EngineName, check_engine, choose_engine
from postmortem.scan.events.sentry import sentry_target
from postmortem.scan.fleet.known.load import load_known
from postmortem.scan.fleet.owners import load_owners
from postmortem.scan.outputs.ci.github import github_run, github_run_of
from postmortem.scan.outputs.ci.policy import FailOn, failing
from postmortem.scan.outputs.ci.write import CiMode, CiOutputs, write_ci_outputs
from postmortem.scan.outputs.incident import incident_view
from postmortem.scan.outputs.index import build_index
from postmortem.scan.progress import ProgressBar
from postmortem.scan.run import ScanOptions, ScanResult, run_scan
from postmortem.scan.since import parse_since
from postmortem.scan.store.cache import default_cache_path
from postmortem.scan.work.worker import WorkOptions
from postmortem.tools import Tool

INDEX_FORMATS = formats("scan")


@dataclass(frozen=True, slots=True)
class ScanSettings:
    """The options of `postmortem scan`, as typed values (the tools' are an AnalyzeOptions)."""

    fmt: str = "text"
    """The index's format."""
    jobs: int | None = None
    """Worker processes; None: every usable CPU."""
    output: Path | None = None
    """Where the index goes; None: standard output."""
    reports_dir: Path | None = None
    report_format: str | None = None
    """Of the per-dump reports; None: the index's (text for a text index)."""
    jsonl: Path | None = None
    since: str | None = None
    """`--since` as given: a date, or an age such as 36h."""
    timeout_s: float = 300.0
    """Seconds one dump may take."""
    rules: Path | None = None
    """Signature rules; None: the packaged ones."""
    name_patterns: tuple[str, ...] = ()
    follow_symlinks: bool = False
    cache_path: Path | None = None
    """None: the default cache file."""
    use_cache: bool = True
    engine: EngineName = EngineName.LOCAL
    """Where the dumps are analyzed: "local" (worker processes), "dask" or "ray"."""
    scheduler: str | None = None
    """The Dask scheduler's address, for --engine dask."""
    address: str | None = None
    """The Ray cluster's address, for --engine ray (None: Ray's default)."""
    host_logs: tuple[Path, ...] = ()
    """Kernel logs whose Xid lines are joined to the GPUs that faulted (--host-log)."""
    sentry_dsn: str | None = None
    """Send one event per dump to this Sentry project."""
    incident: bool = False
    """Take the dumps as those of one job: add the incident block to the index."""
    owners: Path | None = None
    """A CODEOWNERS file: name each group's owners from its chain's source paths."""
    known: Path | None = None
    """The repository's known-crashes file: mark each group known, new or regressed."""
    fail_on: FailOn = FailOn.NEVER
    """Which groups end the scan with `ExitStatus.CRASHES`."""
    ci: CiMode = CiMode.AUTO
    """GitHub Actions output (job summary, annotations): when detected, always, or never."""
    junit: Path | None = None
    """Write a JUnit XML report here: one test case per group."""
    tracker: Path | None = None
    """Write a tracker issue's comment (Markdown) here."""


@dataclass(frozen=True, slots=True)
class ScanRequest:
    """A scan, ready to run: where, how, and where the results go."""

    roots: tuple[Path, ...]
    options: ScanOptions
    outputs: ScanOutputs


def _warn(line: str) -> None:
    """A settings file's pattern or rule over its cap: one line on stderr."""
    print(escape_controls(f"warning: {line}"), file=sys.stderr)


def rules_option(path: Path | None) -> SignatureRules:
    """The signature rules `--rules` names (None: the packaged ones); BadOption when they
    cannot be used."""
    try:
        return load_rules(path, _warn)
    except (UnreadableFile, ValueError) as error:
        raise BadOption("--rules", str(error)) from None


def _check_patterns(patterns: tuple[str, ...]) -> None:
    try:
        for pattern in patterns:
            compile_pattern(pattern)
    except ValueError as error:
        raise BadOption("--name-pattern", str(error)) from None


def _usable_cpus() -> int:
    # The CPUs this process may run on (taskset, cgroup cpusets), not all the machine has.
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _check_outputs(settings: ScanSettings) -> None:
    # Before the scan, not after it: a typo must not throw away an hour of work.
    targets = (
        ("-o", settings.output), ("--jsonl", settings.jsonl), ("--junit", settings.junit),
        ("--tracker-comment", settings.tracker),
    )  # fmt: skip
    for option, target in targets:
        if target is None:
            continue
        folder = Path(target).parent
        if not folder.is_dir():
            raise BadOption(option, f"{target}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise BadOption(option, f"{target}: the folder {folder} is not writable")


def scan_request(
    roots: tuple[Path, ...], settings: ScanSettings, analyze: AnalyzeOptions, tty: bool
) -> ScanRequest:
    """The scan `settings` ask for, each dump analyzed with `analyze`; raises BadOption.

    cuda-gdb runs only for the per-dump reports, and no tool longer than a dump may take.
    """
    _check_patterns(settings.name_patterns)
    engine = choose_engine(settings.engine, settings.scheduler, settings.address)
    check_engine(engine)
    sentry = sentry_target(settings.sentry_dsn) if settings.sentry_dsn else None
    since = None
    if settings.since:
        try:
            since = parse_since(settings.since, time.time())
        except ValueError as error:
            raise BadOption("--since", str(error)) from None
    fmt, reports = settings.fmt, settings.reports_dir
    report_format = settings.report_format or ("text" if fmt == "text" else fmt)
    _check_outputs(settings)
    for log in settings.host_logs:
        problem = host_log_problem(log)
        if problem is not None:
            raise BadOption("--host-log", f"{log}: {problem}")
    if reports is not None:
        try:
            reports.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise BadOption("--reports", f"{reports}: {error.strerror or error}") from None
    localize = replace(analyze.localize, timeout=min(settings.timeout_s, analyze.localize.timeout))
    cuda_gdb = analyze.cuda_gdb if reports is not None else Tool.OFF
    analyze = replace(analyze, localize=localize, cuda_gdb=cuda_gdb)
    work = WorkOptions(
        analyze, rules_option(settings.rules), settings.name_patterns + DEFAULT_PATTERNS, reports,
        report_format, triage=sentry is not None, full_analysis=settings.incident,
    )  # fmt: skip
    cache = (settings.cache_path or default_cache_path()) if settings.use_cache else None
    options = ScanOptions(
        work, jobs=settings.jobs or _usable_cpus(), timeout_s=settings.timeout_s,
        follow_symlinks=settings.follow_symlinks, since=since, cache_path=cache, engine=engine,
        sentry=sentry, owners=load_owners(settings.owners, _warn) if settings.owners else None,
        host_logs=settings.host_logs,
        known=load_known(settings.known) if settings.known else None,
    )  # fmt: skip
    outputs = ScanOutputs(
        fmt, settings.output, settings.jsonl, tty, settings.incident,
        ci=_ci_outputs(settings),
    )  # fmt: skip
    return ScanRequest(roots, options, outputs)


def _ci_outputs(settings: ScanSettings) -> CiOutputs:
    # The tracker comment names the run whenever the environment says which it is; the
    # summary and annotations are written unless --ci none.
    mode = settings.ci
    run = github_run_of(os.environ) if mode is CiMode.GITHUB else github_run(os.environ)
    github = None if mode is CiMode.NONE else run
    return CiOutputs(github, settings.fail_on, settings.junit, settings.tracker, run)


def run(request: ScanRequest) -> tuple[ScanResult, str]:
    """Run the scan and write its outputs (see `scan_command`)."""
    return scan_command(request.roots, request.options, request.outputs)


def summary_line(result: ScanResult, output: Path) -> str:
    """One line for standard error once the index is written to a file."""
    state = "interrupted; partial results" if result.interrupted else "done"
    errors = len(result.errors)
    return (
        f"scan {state}: {len(result.rows)} dumps, {len(result.groups)} signatures, "
        f"{errors} error{'' if errors == 1 else 's'}; "
        f"index written to {escape_controls(str(output))}"
    )


@dataclass(frozen=True, slots=True)
class ScanOutputs:
    """Where the scan's results go."""

    fmt: str
    """Index format: text, md, html, json (JSON lines)."""
    output: Path | None
    """The index file; None: standard output."""
    jsonl: Path | None
    """JSON lines written besides the index; None: none."""
    progress: bool
    """Draw a progress bar on standard error."""
    incident: bool = False
    """Add the incident block (`--incident`): the dumps taken as those of one job."""
    ci: CiOutputs = field(default_factory=lambda: CiOutputs(None, FailOn.NEVER, None, None, None))
    """What a CI system is given besides the index."""


def scan_command(
    roots: Sequence[Path], options: ScanOptions, outputs: ScanOutputs
) -> tuple[ScanResult, str]:
    """Run the scan and write its outputs; returns the result and the index text.

    The index goes to `outputs.output` (and the text is returned empty), or is returned
    for standard output. Partial results of an interrupted scan are written the same way.
    """
    bar = ProgressBar(sys.stderr) if outputs.progress else None
    try:
        result = run_scan(roots, options, bar)
    finally:
        if bar is not None:
            bar.close()
    for line in result.warnings:
        print(escape_controls(f"warning: {line}"), file=sys.stderr)
    base = outputs.output.parent if outputs.output else None
    index = build_index(result, base)
    if outputs.incident:
        index["incident"] = incident_view(result, options.work.analyze)
    text = render("scan", index, outputs.fmt)
    # surrogateescape: a file name that is not UTF-8 is written back as its own bytes.
    if outputs.jsonl is not None:
        jsonl_index = build_index(result, outputs.jsonl.parent)
        if outputs.incident:
            jsonl_index["incident"] = index["incident"]
        _write(outputs.jsonl, render("scan", jsonl_index, "json"))
    if outputs.output is not None:
        _write(outputs.output, text)
        text = ""
    return result, text + write_ci_outputs(result, outputs.ci)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
    except OSError as error:
        raise ScanOutputError(path, error.strerror or str(error)) from None


def scan_exit_status(result: ScanResult, fail_on: FailOn = FailOn.NEVER) -> ExitStatus:
    """INTERRUPTED when interrupted, CRASHES when a group fails under `fail_on`,
    SCAN_ERRORS when a dump is an error row, else OK."""
    if result.interrupted:
        return ExitStatus.INTERRUPTED
    if failing(result.groups, fail_on):
        return ExitStatus.CRASHES
    return ExitStatus.SCAN_ERRORS if result.errors else ExitStatus.OK
