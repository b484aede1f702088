"""What `info`, `analyze` and `extract` do, one function each, for `postmortem.cli`.

The command line imports this module only when one of those commands runs, so that
`postmortem --help`, shell completion and `scan` never pay for the reader, numpy, the
analysis or jinja2 (tests/unit/test_cli_imports.py holds it to that).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from postmortem.errors import BadOption, ExitStatus
from postmortem.report.textsafe import escape_controls

if TYPE_CHECKING:
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.fault.source import PathMap

# Each function imports its own modules: `info` needs the reader and the renderer, never the
# analysis or the tool adapters.


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """The external tools' options, as every command takes them."""

    no_disasm: bool = False
    nvdisasm: Path | None = None
    no_gdb: bool = False
    cuda_gdb: Path | None = None
    timeout: float | None = None
    """Seconds each tool may run; None: the library's default."""
    source_dirs: tuple[Path, ...] = ()
    path_maps: tuple[PathMap, ...] = ()
    nvdisasm_origin: str | None = None
    """What chose `nvdisasm`: ``--nvdisasm``, or the settings file that named it."""
    cuda_gdb_origin: str | None = None


def analyze_options(
    tools: ToolSettings,
    window: int | None = None,
    mode: str = "auto",
    host_logs: Sequence[Path] = (),
    redact: bool = True,
) -> AnalyzeOptions:
    """The `AnalyzeOptions` of a command's tool settings (built here once, for every command);
    `host_logs` are joined to every dump analyzed, their secrets hidden unless not `redact`."""
    from postmortem.analysis.analyze import AnalysisMode, AnalyzeOptions
    from postmortem.analysis.fault.fault import LocalizeOptions

    # A relative path in a line table is looked up in --source-dir, then in the folder the
    # command runs in, named here: a Dask worker runs elsewhere but looks in the same place.
    localize = LocalizeOptions(
        source_dirs=(*tools.source_dirs, *_here()), path_maps=tools.path_maps,
        disassemble=not tools.no_disasm, nvdisasm=tools.nvdisasm,
        nvdisasm_origin=tools.nvdisasm_origin,
    )  # fmt: skip
    if window is not None:
        localize = replace(localize, window=window)
    if tools.timeout is not None:
        localize = replace(localize, timeout=tools.timeout)
    return AnalyzeOptions(
        localize, mode=AnalysisMode(mode), cuda_gdb=not tools.no_gdb, cuda_gdb_path=tools.cuda_gdb,
        cuda_gdb_origin=tools.cuda_gdb_origin, host_logs=tuple(host_logs), redact=redact,
    )  # fmt: skip


def _here() -> tuple[Path, ...]:
    # The folder the command runs in; none when it was deleted under it.
    try:
        return (Path.cwd(),)
    except OSError:
        return ()


def info_text(core: Path, as_json: bool) -> str:
    """What `postmortem info` prints."""
    from postmortem.coredump import open_coredump
    from postmortem.report.info import build_info
    from postmortem.report.render import render
    from postmortem.summary import summarize

    with open_coredump(core) as dump:
        summary = summarize(dump)
        dump.file.check_unchanged()  # an object replaced while read: no summary
    return render("info", build_info(summary), "json" if as_json else "text")


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


def debug_dump(
    core: Path, gdb_args: Sequence[str], cuda_gdb: Path | None, warn: Callable[[str], None]
) -> int:
    """Open `core` in cuda-gdb for the user; a compressed dump as its decompressed copy, which
    lives as long as cuda-gdb runs; `warn` is told first when this cuda-gdb is known not to
    read the dump. Returns cuda-gdb's exit status."""
    from postmortem.analysis.crosscheck import gdb_cannot_read
    from postmortem.coredump import open_coredump
    from postmortem.coredump.elf import MappedFile
    from postmortem.errors import PostmortemError
    from postmortem.gdb.run import debug_interactively
    from postmortem.summary import summarize
    from postmortem.tools import find_tool, tool_version

    with open_coredump(core) as dump:
        try:
            summary = summarize(dump)
        except PostmortemError:  # nothing to hold cuda-gdb's version against: let it try
            summary = None
        version = tool_version(find_tool("cuda-gdb", cuda_gdb))
        cannot = gdb_cannot_read(version, summary) if summary is not None else None
        if cannot is not None:
            # The user asked for it: say what to expect, then open it all the same.
            warn(cannot.replace(" not run: ", " may not read this dump: ", 1))
        local = dump.file.child_path() if isinstance(dump.file, MappedFile) else core
        return debug_interactively(local, gdb_args, cuda_gdb=cuda_gdb)


def extract_text(core: Path, out_dir: Path, force: bool) -> str:
    """Write the cubins of `core` into `out_dir`; what `postmortem extract` prints."""
    from postmortem.coredump import open_coredump
    from postmortem.extract import extract_cubins, index_entries
    from postmortem.report.render import render

    with open_coredump(core) as dump:
        written = extract_cubins(dump, out_dir, force=force)
    where = escape_controls(str(out_dir))
    index = render("extract", index_entries(written), "text")
    return index + f"{len(written)} cubin(s) written to {where}\n"


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
