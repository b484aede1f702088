"""What `info`, `analyze` and `extract` do, one function each, for `postmortem.cli`.

The command line imports this module only when one of those commands runs, so that
`postmortem --help`, shell completion and `scan` never pay for the reader, numpy, the
analysis or jinja2 (tests/unit/test_cli_imports.py holds it to that).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from postmortem.errors import BadOption
from postmortem.report.textsafe import escape_controls

if TYPE_CHECKING:
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.source import PathMap

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


def analyze_options(
    tools: ToolSettings, window: int | None = None, mode: str = "auto"
) -> AnalyzeOptions:
    """The `AnalyzeOptions` of a command's tool settings (built here once, for every command)."""
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.fault import LocalizeOptions

    localize = LocalizeOptions(
        source_dirs=tools.source_dirs, path_maps=tools.path_maps,
        disassemble=not tools.no_disasm, nvdisasm=tools.nvdisasm,
    )  # fmt: skip
    if window is not None:
        localize = replace(localize, window=window)
    if tools.timeout is not None:
        localize = replace(localize, timeout=tools.timeout)
    return AnalyzeOptions(
        localize, mode=mode, cuda_gdb=not tools.no_gdb, cuda_gdb_path=tools.cuda_gdb
    )


def info_text(core: Path, as_json: bool) -> str:
    """What `postmortem info` prints."""
    from postmortem.coredump import open_coredump
    from postmortem.report.info import build_info
    from postmortem.report.render import render
    from postmortem.summary import summarize

    with open_coredump(core) as dump:
        summary = summarize(dump)
    return render("info", build_info(summary), "json" if as_json else "text")


def analyze_text(
    core: Path, options: AnalyzeOptions, fmt: str, *, color: bool, verbose: bool
) -> str:
    """The report `postmortem analyze` writes."""
    from postmortem.analysis.analyze import analyze_dump
    from postmortem.report.context import build_report
    from postmortem.report.render import render

    report = build_report(analyze_dump(core, options))
    return render("analyze", report, fmt, color=color, verbose=verbose)


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
