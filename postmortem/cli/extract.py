"""`postmortem extract`: every cubin of a dump into a folder."""

from __future__ import annotations

from pathlib import Path

import click

from postmortem.cli.common import check_core, core_argument, debug_option, guarded, storage_option
from postmortem.report.textsafe import escape_controls


@click.command()
@core_argument
@storage_option
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), required=True,
    help="Directory to write the cubins and index.json / index.txt into.",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite files that exist already.")
@debug_option
def extract(core: Path, out_dir: Path, force: bool, debug: bool) -> None:
    """Write every cubin in CORE (relocated and non-relocated) into a directory.

    Files are named by device, context, module handle and first kernel; index.txt and
    index.json list the functions each holds and mark the one that faulted.
    """

    check_core(core, debug)

    click.echo(guarded(debug, lambda: extract_text(core, out_dir, force)), nl=False)


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
