"""The `postmortem` command line: arguments in, one library call, an exit code out.

Exit status (stable): 0 done; 2 the input could not be read as a CUDA coredump;
3 an external tool failed; 1 anything else.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from postmortem import __version__
from postmortem.coredump import open_coredump
from postmortem.errors import PostmortemError, ToolFailed, ToolNotFound
from postmortem.report.info import render_info_json, render_info_text
from postmortem.summary import summarize

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_TOOL = 3

T = TypeVar("T")


def _run(debug: bool, action: Callable[[], T]) -> T:
    """Run `action`, turning our errors into one line on stderr and an exit status."""
    try:
        return action()
    except PostmortemError as error:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {error}", err=True)
        if error.hint:
            click.echo(f"hint: {error.hint}", err=True)
        code = EXIT_TOOL if isinstance(error, ToolFailed | ToolNotFound) else EXIT_BAD_INPUT
        sys.exit(code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # a bug of ours: say so in one line, details with --debug
        if debug:
            traceback.print_exc()
        click.echo(
            f"internal error: {type(error).__name__}: {error} (rerun with --debug)", err=True
        )
        sys.exit(EXIT_INTERNAL)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="postmortem")
def main() -> None:
    """postmortem: CUDA GPU coredumps turned into answers, on any machine.

    Exit status: 0 done, 1 internal error, 2 unreadable input (not a CUDA coredump,
    truncated, corrupt), 3 an external tool failed.
    """


@main.command()
@click.argument("core", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--debug", is_flag=True, help="Show the traceback of an error.")
def info(core: Path, as_json: bool, debug: bool) -> None:
    """Print what the native reader finds in CORE: devices, grids, faults, modules.

    Needs no external tool. CORE may be gzip-compressed.
    """

    def action() -> str:
        with open_coredump(core) as dump:
            summary = summarize(dump)
        return render_info_json(summary) if as_json else render_info_text(summary)

    click.echo(_run(debug, action), nl=False)


if __name__ == "__main__":  # pragma: no cover
    main()
