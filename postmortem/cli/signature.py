"""`postmortem signature`: each dump's crash signature and what it is made of."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from postmortem.cli.common import debug_option, dump_paths, guarded, storage_option, text_or_json
from postmortem.cli.options import ToolSettings, analyze_options, source_options, tool_options
from postmortem.errors import ExitStatus

if TYPE_CHECKING:
    from postmortem.analysis.fault.source import SourcePaths


@click.command()
@storage_option
@click.argument("cores", nargs=-1, required=True, metavar="CORE...", callback=dump_paths)
@text_or_json
@source_options(dirs=False)
@click.option(
    "--rules",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Signature rules (JSON); default: the packaged ones.",
)
@tool_options(gdb=False)
@debug_option
def signature(
    cores: tuple[Path, ...],
    fmt: str,
    as_json: bool,
    sources: SourcePaths,
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
    from postmortem.scan import command as scan_cli

    options = analyze_options(tools, sources)
    request = scan_cli.SignatureRequest(options, rules, as_json or fmt == "json")
    text, errors = guarded(debug, lambda: scan_cli.signature_texts(cores, request))
    click.echo(text, nl=False)
    for error in errors:
        click.echo(error, err=True)
    sys.exit(ExitStatus.BAD_INPUT if errors else ExitStatus.OK)
