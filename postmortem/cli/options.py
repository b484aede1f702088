"""The option groups several commands share, declared once with one help text each.

`tool_options` gives a command the external tools (--no-disasm, --nvdisasm, --no-gdb,
--cuda-gdb) as one `tools` argument, a `ToolSettings` of one `Tool` each; `source_options`
gives it --source-dir and --map-path as one `sources` argument, a `SourcePaths`. Nothing
here imports more than click: `--help` stays as cheap as `postmortem.cli`
(tests/unit/test_cli_imports.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.fault.source import PathMap, SourcePaths
    from postmortem.tools import Tool

F = TypeVar("F", bound=Callable[..., Any])

SETTINGS = "postmortem.settings"
"""Where the root context keeps the settings file that filled in option defaults."""

_NO_DISASM_HELP = "Do not run nvdisasm: no SASS, no inline frames."
_NO_GDB_HELP = "Do not ask cuda-gdb for a second opinion."
_NVDISASM_HELP = "The nvdisasm to use (default: $POSTMORTEM_NVDISASM, PATH, CUDA, the wheel)."
_CUDA_GDB_HELP = "The cuda-gdb to use (default: $POSTMORTEM_CUDA_GDB, PATH, CUDA)."


def tool_options(*, gdb: bool = True) -> Callable[[F], F]:
    """--no-disasm and --nvdisasm, and with `gdb` --no-gdb and --cuda-gdb, handed to the
    command as one `tools` argument (without `gdb`, cuda-gdb is not run)."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_tools(*args: Any, **values: Any) -> Any:

            nvdisasm = _tool(values.pop("no_disasm"), "nvdisasm", values.pop("nvdisasm"))
            cuda_gdb = _tool(values.pop("no_gdb", True), "cuda_gdb", values.pop("cuda_gdb", None))
            return command(*args, tools=ToolSettings(nvdisasm, cuda_gdb), **values)

        options = [
            click.option("--no-disasm", is_flag=True, help=_NO_DISASM_HELP),
            _path_option("--nvdisasm", "nvdisasm", _NVDISASM_HELP),
        ]
        if gdb:
            options += [
                click.option("--no-gdb", is_flag=True, help=_NO_GDB_HELP),
                _path_option("--cuda-gdb", "cuda_gdb", _CUDA_GDB_HELP),
            ]
        wrapped: Any = with_tools
        for option in reversed(options):
            wrapped = option(wrapped)
        return wrapped  # type: ignore[no-any-return]

    return decorate


def cuda_gdb_option(command: F) -> F:
    """--cuda-gdb alone, for a command that runs nothing but cuda-gdb (`debug`)."""
    return _path_option("--cuda-gdb", "cuda_gdb", _CUDA_GDB_HELP)(command)


def source_options(*, dirs: bool = True) -> Callable[[F], F]:
    """--source-dir (with `dirs`) and --map-path: where the sources a line table names are,
    handed to the command as one `sources` argument."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_sources(*args: Any, **values: Any) -> Any:
            from postmortem.analysis.fault.source import SourcePaths

            found = SourcePaths(values.pop("source_dirs", ()), values.pop("path_maps"))
            return command(*args, sources=found, **values)

        wrapped: Any = click.option(
            "--map-path", "path_maps", multiple=True, callback=_path_maps, metavar="OLD=NEW",
            help="Rewrite a build-machine path prefix in source paths (repeatable).",
        )(with_sources)  # fmt: skip
        if dirs:
            wrapped = click.option(
                "--source-dir", "source_dirs", multiple=True,
                type=click.Path(path_type=Path, file_okay=False),
                help="Where to look for the sources the line table names (repeatable).",
            )(wrapped)  # fmt: skip
        return wrapped  # type: ignore[no-any-return]

    return decorate


def _path_option(flag: str, name: str, help_text: str) -> Callable[[F], F]:
    return click.option(flag, name, type=click.Path(path_type=Path, dir_okay=False), help=help_text)


def _path_maps(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[PathMap, ...]:
    from postmortem.analysis.fault.source import PathMap

    try:
        return tuple(PathMap.parse(value) for value in values)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _tool(off: bool, param: str, value: Path | None) -> Tool:
    """One tool as its two options set it: off, or the path named and what named it."""
    from postmortem.tools import Tool

    return Tool.OFF if off else Tool(path=value, origin=_tool_origin(param, value))


def _tool_origin(param: str, value: Path | None) -> str | None:
    """What chose a tool path option's value: the option itself, or the settings file whose
    value click filled in (provenance names it)."""
    ctx = click.get_current_context(silent=True)
    if value is None or ctx is None:
        return None
    from click.core import ParameterSource

    flag = "--" + param.replace("_", "-")
    if ctx.get_parameter_source(param) is ParameterSource.DEFAULT_MAP:
        settings = ctx.find_root().meta.get(SETTINGS)
        origin = settings.origin(param.replace("_", "-")) if settings is not None else None
        return origin or flag
    return flag


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """The external tools' options, as every command takes them."""

    nvdisasm: Tool
    cuda_gdb: Tool
    timeout: float | None = None
    """Seconds each tool may run; None: the library's default."""


def analyze_options(
    tools: ToolSettings,
    sources: SourcePaths | None = None,
    window: int | None = None,
    mode: str = "auto",
    host_logs: Sequence[Path] = (),
    redact: bool = True,
    kept: bool = False,
) -> AnalyzeOptions:
    """The `AnalyzeOptions` of a command's tool settings (built here once, for every command);
    `host_logs` are joined to every dump analyzed, their secrets hidden unless not `redact`.
    With `kept`, disassemblies are kept for the next command (`disassembly_folder`)."""
    from postmortem.analysis.analyze import AnalysisMode, AnalyzeOptions
    from postmortem.analysis.fault.options import LocalizeOptions
    from postmortem.analysis.fault.source import SourcePaths

    # A relative path in a line table is looked up in --source-dir, then in the folder the
    # command runs in, named here: a Dask worker runs elsewhere but looks in the same place.
    sources = sources or SourcePaths()
    localize = LocalizeOptions(
        sources=replace(sources, dirs=(*sources.dirs, *_here())), nvdisasm=tools.nvdisasm
    )
    if kept:
        from postmortem.cubin.disasm_files import DisassemblyFiles

        localize = replace(localize, store=DisassemblyFiles(disassembly_folder()))
    if window is not None:
        localize = replace(localize, window=window)
    if tools.timeout is not None:
        localize = replace(localize, timeout=tools.timeout)
    return AnalyzeOptions(
        localize, mode=AnalysisMode(mode), cuda_gdb=tools.cuda_gdb, host_logs=tuple(host_logs),
        redact=redact,
    )  # fmt: skip


def disassembly_folder() -> Path:
    """Where `analyze` keeps nvdisasm's listings: ``$XDG_CACHE_HOME/postmortem/disassembly``."""
    from postmortem.config import cache_folder

    return cache_folder() / "disassembly"


def _here() -> tuple[Path, ...]:
    # The folder the command runs in; none when it was deleted under it.
    try:
        return (Path.cwd(),)
    except OSError:
        return ()
