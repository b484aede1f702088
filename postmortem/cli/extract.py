"""`postmortem extract`: every cubin of a dump into a folder."""

from __future__ import annotations

from pathlib import Path

import click

from postmortem.cli.common import check_core, core_argument, debug_option, guarded, storage_option


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
    from postmortem.commands import extract_text

    click.echo(guarded(debug, lambda: extract_text(core, out_dir, force)), nl=False)
