"""`postmortem debug`: the dump opened in cuda-gdb, interactively."""

from __future__ import annotations

import sys
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
    from postmortem.commands import debug_dump

    def warn(line: str) -> None:
        click.echo(escape_controls(f"warning: {line}"), err=True)

    sys.exit(guarded(debug, lambda: debug_dump(core, gdb_args, cuda_gdb, warn)))
