"""The `postmortem` command line: arguments in, one library call, an exit code out.

Exit status (stable): 0 done; 2 the input could not be read as a CUDA coredump;
3 an external tool failed; 1 anything else.

Each command imports what it needs when it runs (`postmortem.commands`,
`postmortem.scan.command`): `--help` and shell completion load click and this module
only, never the reader, numpy, the analysis or jinja2.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from postmortem._version import __version__
from postmortem.cli_triage import triage
from postmortem.errors import BadOption, ExitStatus, PostmortemError
from postmortem.options import SETTINGS, cuda_gdb_option, source_options, tool_options
from postmortem.report.formats import ANALYZE_FORMATS, SCAN_FORMATS, format_of
from postmortem.report.textsafe import escape_controls

if TYPE_CHECKING:
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.fault.source import PathMap
    from postmortem.commands import ToolSettings

FAIL_ON = ("new", "regressed", "any", "never")
"""`scan --fail-on`: `postmortem.scan.outputs.ci.policy.FailOn`, spelled here so that --help
needs no import of the scan."""
CI_MODES = ("auto", "github", "none")
"""`scan --ci`: `postmortem.scan.outputs.ci.write.CiMode`."""

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def _run(debug: bool, action: Callable[[], T]) -> T:
    """Run `action`, turning our errors into one line on stderr and an exit status (a path
    or name the message quotes has its control characters escaped)."""
    try:
        return action()
    except PostmortemError as error:
        if debug:
            traceback.print_exc()
        hint = f" (hint: {error.hint})" if error.hint else ""
        click.echo(escape_controls(f"error: {error}{hint}"), err=True)
        sys.exit(error.exit_status)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # a bug of ours: say so in one line, details with --debug
        if debug:
            traceback.print_exc()
        line = f"internal error: {type(error).__name__}: {error} (rerun with --debug)"
        click.echo(escape_controls(line), err=True)
        sys.exit(ExitStatus.INTERNAL)


_debug_option = click.option("--debug", is_flag=True, help="Show the traceback of an error.")
_sentry_option = click.option(
    "--sentry-dsn", metavar="DSN", envvar="POSTMORTEM_SENTRY_DSN",
    help="Send one event per dump to this Sentry project, grouped by crash signature, with the "
    "Markdown report attached (needs the sentry extra; default: $POSTMORTEM_SENTRY_DSN).",
)  # fmt: skip


_NO_ARGS: tuple[type[click.UsageError], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ("NoArgsIsHelpError",)
    if hasattr(click.exceptions, name)
)


class _Commands(click.Group):
    """The command group, its usage errors said in one line like every other error."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except _NO_ARGS as error:
            # Since click 8.2, a group run with no arguments raises its help as a usage error
            # (one line of literal \n here): a first contact is shown the help, as before.
            click.echo(error.ctx.get_help() if error.ctx else self.get_help(click.Context(self)))
            sys.exit(0)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx else "postmortem"
            line = f"error: {error.format_message()} (see `{where} --help`)"
            click.echo(escape_controls(line), err=True)
            sys.exit(error.exit_code)
        except click.ClickException as error:
            click.echo(escape_controls(f"error: {error.format_message()}"), err=True)
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(130)
        sys.exit(result if isinstance(result, int) else 0)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="postmortem")
@click.pass_context
def main(ctx: click.Context) -> None:
    """postmortem: CUDA GPU coredumps turned into answers, on any machine.

    Exit status: 0 done; 1 internal error; 2 unreadable input (not a CUDA coredump,
    truncated, corrupt) or a bad option; 3 an external tool failed; 4 scan or several dumps:
    some were unreadable; 5 trigger: nothing read the pipe or no dump came in time; 126, 127
    capture: the command cannot be run or was not found; 130 interrupted.

    Settings (source dirs, path maps, tool paths, rules) may be kept in
    $XDG_CONFIG_HOME/postmortem/postmortem.toml or a project's pyproject.toml
    [tool.postmortem]; an option on the command line wins. A project's file may name
    tools only if your own file lists it in trusted-projects.
    """
    from postmortem.config import load_settings

    settings = _run(False, load_settings)
    ctx.meta[SETTINGS] = settings
    defaults = settings.defaults()
    ctx.default_map = defaults
    if ctx.invoked_subcommand in defaults or ctx.invoked_subcommand == "capture":
        for warning in settings.warnings:
            click.echo(escape_controls(f"warning: {warning}"), err=True)


_STORAGE = "postmortem.storage_options"


def _keep_storage_options(ctx: click.Context, _: click.Parameter, pairs: tuple[str, ...]) -> None:
    from postmortem.urls import parse_storage_options

    try:
        ctx.meta[_STORAGE] = parse_storage_options(pairs)
    except PostmortemError as error:
        raise click.BadParameter(str(error)) from None


# Eager, so that the options are known before the dumps' URLs are converted below.
_storage_option = click.option(
    "--storage-option", multiple=True, metavar="KEY=VALUE", is_eager=True, expose_value=False,
    callback=_keep_storage_options,
    help="An fsspec option for dumps given by URL (repeatable), e.g. endpoint_url=http://….",
)  # fmt: skip


def _dump_paths(ctx: click.Context, _: click.Parameter, value: Any) -> Any:
    """A dump's path, or its URL in an object store (`s3://bucket/core.nvcudmp`); a tuple
    of them for an argument that takes several."""
    from postmortem.urls import DumpUrl, as_dump_path, use_storage_options

    if value is None:
        return None
    paths = [as_dump_path(v) for v in (value if isinstance(value, tuple) else (value,))]
    protocols = [p.protocol for p in paths if isinstance(p, DumpUrl)]
    use_storage_options(protocols, ctx.meta.get(_STORAGE, {}))
    return tuple(paths) if isinstance(value, tuple) else paths[0]


_core_argument = click.argument("core", callback=_dump_paths)


def _scan_roots(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    from postmortem.urls import DumpUrl

    roots = _dump_paths(ctx, param, value)
    for root in roots:
        if not isinstance(root, DumpUrl) and not os.path.exists(root):
            raise click.BadParameter(f"Path '{root}' does not exist.", ctx, param)
    return roots


def _check_core(core: Path, debug: bool) -> None:
    from postmortem.urls import DumpUrl

    # A folder is a scan's job; say so in one line rather than click's usage block.
    if not isinstance(core, DumpUrl) and core.is_dir():
        _run(debug, _raise(BadOption("CORE", f"{core} is a folder: use `postmortem scan {core}`")))


def _raise(error: PostmortemError) -> Callable[[], None]:
    def action() -> None:
        raise error

    return action


def _text_or_json(command: F) -> F:
    """`--format text|json`, as analyze and scan spell it, and `--json` for it."""
    command = click.option("--json", "as_json", is_flag=True, help="The same as --format json.")(
        command
    )
    return click.option(
        "--format", "fmt", type=click.Choice(("text", "json")), default="text",
        show_default=True, help="text for a terminal, json for programs.",
    )(command)  # fmt: skip


@main.command()
@_core_argument
@_storage_option
@_text_or_json
@_debug_option
def info(core: Path, fmt: str, as_json: bool, debug: bool) -> None:
    """Print what the native reader finds in CORE: devices, grids, faults, modules.

    Needs no external tool. CORE may be gzip-, zstd- or xz-compressed.

    \b
    Examples:
      postmortem info core.nvcudmp
      postmortem info core.nvcudmp --format json
    """
    _check_core(core, debug)
    from postmortem.commands import info_text

    json_wanted = as_json or fmt == "json"
    click.echo(_run(debug, lambda: info_text(core, json_wanted)), nl=False)


@main.command()
@click.argument("cores", nargs=-1, required=True, metavar="CORE...", callback=_dump_paths)
@_storage_option
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
@_sentry_option
@_debug_option
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
        _check_core(core, debug)
    core = cores[0]
    output = _file_or_stdout(output)
    fmt = fmt or (format_of(output) if output is not None else None) or "text"
    from postmortem.commands import (
        analyze_options,
        analyze_text,
        check_host_logs,
        check_output,
        write_output,
    )

    if output is not None:
        _run(debug, lambda: check_output(output))
    if host_logs:
        _run(debug, lambda: check_host_logs(host_logs))
    tools = replace(tools, timeout=timeout, source_dirs=source_dirs, path_maps=path_maps)
    options = analyze_options(tools, window, mode, host_logs, redact=not no_redact)
    colored = fmt == "text" and output is None and _wants_color(color, sys.stdout)
    if len(cores) > 1:
        _incident(cores, options, fmt, output, colored, sentry_dsn, debug)
    text = _run(debug, lambda: analyze_text(core, options, fmt, color=colored, verbose=verbose,
                                            sentry_dsn=sentry_dsn, warn=_warn))  # fmt: skip
    if output is None:
        # click strips ANSI codes from a stream that is not a terminal, unless told
        click.echo(text, nl=False, color=colored)
    else:
        _run(debug, lambda: write_output(output, text))
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
        _run(debug, _raise(BadOption("--sentry-dsn", why)))
    text, status = _run(debug, lambda: incident_text(cores, options, fmt, color=colored))
    if output is None:
        click.echo(text, nl=False, color=colored)
    else:
        _run(debug, lambda: write_output(output, text))
        click.echo(f"report written to {escape_controls(str(output))}", err=True)
    sys.exit(status)


def _warn(line: str) -> None:
    click.echo(escape_controls(f"warning: {line}"), err=True)


def _file_or_stdout(output: Path | None) -> Path | None:
    """`-o -` is standard output, as for most commands that write files."""
    return None if output is not None and str(output) == "-" else output


def _wants_color(choice: str, stream: Any) -> bool:
    """--color always/never; auto: FORCE_COLOR, else not NO_COLOR, a terminal, and not one
    that says it cannot show colour (TERM=dumb) (https://no-color.org,
    https://force-color.org)."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    if os.environ.get("NO_COLOR", "") or os.environ.get("TERM") == "dumb":
        return False
    return bool(stream.isatty())


@main.command()
@_core_argument
@_storage_option
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), required=True,
    help="Directory to write the cubins and index.json / index.txt into.",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite files that exist already.")
@_debug_option
def extract(core: Path, out_dir: Path, force: bool, debug: bool) -> None:
    """Write every cubin in CORE (relocated and non-relocated) into a directory.

    Files are named by device, context, module handle and first kernel; index.txt and
    index.json list the functions each holds and mark the one that faulted.
    """

    _check_core(core, debug)
    from postmortem.commands import extract_text

    click.echo(_run(debug, lambda: extract_text(core, out_dir, force)), nl=False)


@main.command()
@click.argument("roots", nargs=-1, required=True, metavar="DIR...", callback=_scan_roots)
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
    type=click.Choice(("local", "dask", "ray")),
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
@_sentry_option
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
@_storage_option
@_debug_option
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
    path_maps: tuple[PathMap, ...],
    source_dirs: tuple[Path, ...],
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
    from postmortem.commands import analyze_options
    from postmortem.scan import command as scan_cli
    from postmortem.scan.outputs.ci.policy import FailOn
    from postmortem.scan.outputs.ci.write import CiMode

    fmt = fmt or (format_of(output) if output is not None else None) or "text"
    settings = scan_cli.ScanSettings(
        fmt=fmt, jobs=jobs, output=_file_or_stdout(output), reports_dir=reports_dir,
        report_format=report_format, jsonl=jsonl, since=since, timeout_s=timeout, rules=rules,
        name_patterns=name_patterns, follow_symlinks=follow_symlinks, cache_path=cache_path,
        use_cache=not no_cache, engine=engine, scheduler=scheduler, address=address,
        host_logs=host_logs, sentry_dsn=sentry_dsn, incident=incident, owners=owners,
        known=known, fail_on=FailOn(fail_on), ci=CiMode(ci_mode), junit=junit, tracker=tracker,
    )  # fmt: skip
    options = analyze_options(replace(tools, source_dirs=source_dirs, path_maps=path_maps))
    tty = sys.stderr.isatty()
    request = _run(debug, lambda: scan_cli.scan_request(roots, settings, options, tty))
    result, text = _run(debug, lambda: scan_cli.run(request))
    click.echo(text, nl=False)
    if request.outputs.output is not None:
        click.echo(scan_cli.summary_line(result, request.outputs.output), err=True)
    sys.exit(scan_cli.exit_status(result, settings.fail_on))


@main.command()
@_storage_option
@click.argument("cores", nargs=-1, required=True, metavar="CORE...", callback=_dump_paths)
@_text_or_json
@source_options(dirs=False)
@click.option(
    "--rules",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Signature rules (JSON); default: the packaged ones.",
)
@tool_options(gdb=False)
@_debug_option
def signature(
    cores: tuple[Path, ...],
    fmt: str,
    as_json: bool,
    path_maps: tuple[PathMap, ...],
    rules: Path | None,
    tools: ToolSettings,
    debug: bool,
) -> None:
    """Print the crash signature of each CORE and the components it is made of.

    The signature is what `postmortem scan` groups dumps by: exception, normalized kernel,
    offset of the fault in the kernel and the top in-app inline frames; see docs/scan.md.
    Exit status: 0 done, 2 a CORE could not be read (the others are still printed).

    \b
    Examples:
      postmortem signature core.nvcudmp
      postmortem signature dumps/*.nvcudmp --format json
    """
    from postmortem.commands import analyze_options
    from postmortem.scan import command as scan_cli

    options = analyze_options(replace(tools, path_maps=path_maps))
    request = scan_cli.SignatureRequest(options, rules, as_json or fmt == "json")
    text, errors = _run(debug, lambda: scan_cli.signature_texts(cores, request))
    click.echo(text, nl=False)
    for error in errors:
        click.echo(error, err=True)
    sys.exit(ExitStatus.BAD_INPUT if errors else ExitStatus.OK)


@main.command(context_settings={"ignore_unknown_options": True})
@_core_argument
@cuda_gdb_option
@click.argument("gdb_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- CUDA-GDB ARGS...]")
@_debug_option
def debug(core: Path, cuda_gdb: Path | None, gdb_args: tuple[str, ...], debug: bool) -> None:
    """Open CORE in cuda-gdb, interactively, as coredumpctl debug does.

    cuda-gdb starts with safe flags (-nx, no auto-loaded scripts), cuobjdump on its PATH
    and, for a build whose Python unwinder fails, an empty data directory; then `target
    cudacore CORE`. Arguments after -- go to cuda-gdb. Exits with cuda-gdb's status.
    """
    _check_core(core, debug)
    from postmortem.urls import DumpUrl

    if isinstance(core, DumpUrl):
        reason = f"{core} is a URL: cuda-gdb reads local files (copy the dump here first)"
        _run(debug, _raise(BadOption("CORE", reason)))
    from postmortem.commands import debug_dump

    def warn(line: str) -> None:
        click.echo(escape_controls(f"warning: {line}"), err=True)

    sys.exit(_run(debug, lambda: debug_dump(core, gdb_args, cuda_gdb, warn)))


_dump_dir_option = click.option(
    "--dir", "dump_dir", type=click.Path(path_type=Path, file_okay=False),
    default=Path("postmortem-dumps"), show_default=True,
    help="Where the dumps, the trigger pipes and the host logs go.",
)  # fmt: skip
_report_format_option = click.option(
    "--format", "fmt", type=click.Choice(ANALYZE_FORMATS), default="md", show_default=True,
    help="Format of the report written beside each dump (core_….nvcudmp.md).",
)  # fmt: skip
_no_analyze_option = click.option(
    "--no-analyze", is_flag=True, help="Only list the dumps; write no report."
)


@main.command(context_settings={"allow_interspersed_args": False})
@_dump_dir_option
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
@_report_format_option
@_no_analyze_option
@tool_options()
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND [ARGS...]")
@_debug_option
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
    from postmortem.capture.command import (
        ReportSettings,
        capture_command,
        check_command,
        print_env_command,
    )
    from postmortem.capture.environment import CaptureSettings
    from postmortem.commands import analyze_options

    settings = CaptureSettings(
        dump_dir, full, hang or hang_after is not None, sglang, kernel_api_log
    )
    if pid is not None and not check:
        _run(debug, _raise(BadOption("--pid", "goes with --check")))
    if check:
        sys.exit(_run(debug, lambda: check_command(settings, pid)))
    if print_env:
        click.echo(_run(debug, lambda: print_env_command(settings)), nl=False)
        return
    report = ReportSettings(analyze_options(tools), fmt, not no_analyze)
    sys.exit(_run(debug, lambda: capture_command(command, settings, report, hang_after)))


@main.command()
@click.argument("pipe", required=False, type=click.Path(path_type=Path))
@click.option("--pid", type=click.IntRange(min=1), help="Find the pipe of this process.")
@_dump_dir_option
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
@_report_format_option
@_no_analyze_option
@tool_options()
@_debug_option
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
    from postmortem.capture.command import ReportSettings, TriggerRequest, trigger_dump
    from postmortem.capture.watch import WatchSpec
    from postmortem.commands import analyze_options

    spec = WatchSpec(on_line, log, metrics, quiet_for, deadline)
    watching = watch or spec.armed  # a condition given arms the watch by itself
    request = TriggerRequest(
        pipe, pid, dump_dir, dump_glob, timeout, wait, spec if watching else None
    )
    report = ReportSettings(analyze_options(tools), fmt, not no_analyze)
    path = _run(debug, lambda: trigger_dump(request, report))
    click.echo(escape_controls(str(path)))


main.add_command(triage)

if __name__ == "__main__":  # pragma: no cover
    main()
