"""The `postmortem` command line: arguments in, one library call, an exit code out.

Exit status (stable): 0 done; 2 the input could not be read as a CUDA coredump;
3 an external tool failed; 1 anything else.

One module per command (`info`, `analyze`, `extract`, `debug`, `signature`, `scan`,
`capture`, `trigger`, `triage`), what they share in `common.py` and the option types in
`options.py`. Each command imports what it needs when it runs (the reader, the analysis,
`postmortem.scan.request`): `--help` and shell completion load click and this package
only, never the reader, numpy, the analysis or jinja2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from postmortem._version import __version__
from postmortem.cli.analyze import analyze
from postmortem.cli.capture import capture
from postmortem.cli.common import guarded
from postmortem.cli.debug import debug
from postmortem.cli.extract import extract
from postmortem.cli.info import info
from postmortem.cli.options import SETTINGS
from postmortem.cli.scan import scan
from postmortem.cli.signature import signature
from postmortem.cli.triage import triage
from postmortem.cli.trigger import trigger
from postmortem.report.textsafe import escape_controls

__all__ = ["main"]


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

    settings = guarded(False, load_settings)
    ctx.meta[SETTINGS] = settings
    defaults = settings.defaults()
    ctx.default_map = defaults
    if ctx.invoked_subcommand in defaults or ctx.invoked_subcommand == "capture":
        for warning in settings.warnings:
            click.echo(escape_controls(f"warning: {warning}"), err=True)


for _command in (analyze, capture, debug, extract, info, scan, signature, trigger, triage):
    main.add_command(_command)
