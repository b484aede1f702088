"""`postmortem debug`: the dump opened in cuda-gdb, interactively."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from postmortem.cli.common import check_core, core_argument, debug_option, guarded, raiser
from postmortem.cli.options import cuda_gdb_option
from postmortem.errors import BadOption
from postmortem.report.textsafe import escape_controls


@click.command(context_settings={"ignore_unknown_options": True})
@core_argument
@cuda_gdb_option
@click.argument("gdb_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- CUDA-GDB ARGS...]")
@debug_option
def debug(core: Path, cuda_gdb: Path | None, gdb_args: tuple[str, ...], debug: bool) -> None:
    """Open CORE in cuda-gdb, interactively, as coredumpctl debug does.

    cuda-gdb starts with safe flags (-nx, no auto-loaded scripts), cuobjdump on its PATH
    and, for a build whose Python unwinder fails, an empty data directory; then `target
    cudacore CORE`. Arguments after -- go to cuda-gdb. Exits with cuda-gdb's status.
    """
    check_core(core, debug)
    from postmortem.urls import DumpUrl

    if isinstance(core, DumpUrl):
        reason = f"{core} is a URL: cuda-gdb reads local files (copy the dump here first)"
        guarded(debug, raiser(BadOption("CORE", reason)))

    def warn(line: str) -> None:
        click.echo(escape_controls(f"warning: {line}"), err=True)

    sys.exit(guarded(debug, lambda: debug_dump(core, gdb_args, cuda_gdb, warn)))


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
