"""`postmortem info`: what the native reader finds in a dump, no tool needed."""

from __future__ import annotations

from pathlib import Path

import click

from postmortem.cli.common import (
    check_core,
    core_argument,
    debug_option,
    guarded,
    storage_option,
    text_or_json,
)


@click.command()
@core_argument
@storage_option
@text_or_json
@debug_option
def info(core: Path, fmt: str, as_json: bool, debug: bool) -> None:
    """Print what the native reader finds in CORE: devices, grids, faults, modules.

    Needs no external tool. CORE may be gzip-, zstd- or xz-compressed.

    \b
    Examples:
      postmortem info core.nvcudmp
      postmortem info core.nvcudmp --format json
    """
    check_core(core, debug)

    json_wanted = as_json or fmt == "json"
    click.echo(guarded(debug, lambda: info_text(core, json_wanted)), nl=False)


def info_text(core: Path, as_json: bool) -> str:
    """What `postmortem info` prints."""
    from postmortem.coredump import open_coredump
    from postmortem.report.info import build_info
    from postmortem.report.render import render
    from postmortem.summary import summarize

    with open_coredump(core) as dump:
        summary = summarize(dump)
        dump.file.check_unchanged()  # an object replaced while read: no summary
    return render("info", build_info(summary, every_fault=as_json), "json" if as_json else "text")
