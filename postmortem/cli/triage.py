"""`postmortem triage`: resolve, ignore or reopen a crash group in the known-crashes file.

The file is the repository's (`scan --known`); each verb edits one table and keeps every
comment and the order, so that the change reads as a small diff in review. The work is in
`postmortem.scan.fleet.known.verbs`, imported when a verb runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from postmortem.errors import PostmortemError
from postmortem.report.textsafe import escape_controls

DEFAULT_FILE = Path("known-crashes.toml")
F = TypeVar("F", bound=Callable[..., Any])


def _common(command: F) -> F:
    """The known-crashes file, the scan that names the crash, and a title."""
    for option in reversed((
        click.argument("crash", metavar="CRASH"),
        click.option(
            "--file", "path", type=click.Path(path_type=Path, dir_okay=False),
            default=DEFAULT_FILE, show_default=True,
            help="The known-crashes file (created when missing).",
        ),
        click.option(
            "--scan", type=click.Path(path_type=Path, dir_okay=False, exists=True),
            help="A scan's JSON lines (scan --jsonl): the crash's title, key and builds.",
        ),
        click.option("--title", help="What readers call the crash (default: from --scan)."),
    )):  # fmt: skip
        command = option(command)
    return command


def _moment(ctx: click.Context, param: click.Parameter, value: str | None) -> date | None:
    """A date or date-time option (2026-11-20, 2026-11-20T14:00Z)."""
    if value is None:
        return None
    try:
        if "T" in value or " " in value.strip():
            return datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        return date.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter("a date (2026-11-20) or a date-time (2026-11-20T14:00Z)") from None


def _done(action: Callable[[], str]) -> None:
    try:
        click.echo("\n".join(escape_controls(line) for line in action().split("\n")))
    except PostmortemError as error:
        click.echo(escape_controls(f"error: {error}"), err=True)
        if error.hint:
            click.echo(escape_controls(f"hint: {error.hint}"), err=True)
        sys.exit(error.exit_status)


@click.group()
def triage() -> None:
    """Mark a crash group fixed, ignored or open in the repository's known-crashes file.

    CRASH is a signature id as `scan` prints it, or a prefix that names one crash of the
    file or of --scan. `scan --known FILE` then marks each group known, new, or regressed
    (a fixed crash seen again in a build after the fix). Commit the file with the fix.

    \b
    Examples:
      postmortem triage resolve 3f2a9c1e0b7d --by '#4512' --scan rows.jsonl
      postmortem triage ignore 3f2a --reason 'flaky GPU on node 7' --until 2026-12-31
      postmortem triage reopen 3f2a9c1e0b7d
    """


@triage.command()
@_common
@click.option("--by", help="The PR, commit or build that fixed it (#4512, a hash, v1.2.3).")
@click.option(
    "--on", "on", callback=_moment, metavar="DATE",
    help="When the fix landed (default: now, UTC).",
)  # fmt: skip
@click.option(
    "--build", "builds", multiple=True, metavar="KEY",
    help="A build key that crashed before the fix (repeatable; --scan adds its builds).",
)  # fmt: skip
def resolve(
    crash: str, path: Path, scan: Path | None, title: str | None,
    by: str | None, on: date | None, builds: tuple[str, ...],
) -> None:  # fmt: skip
    """Mark CRASH fixed: a later dump of it, in a build that had not crashed before, is a
    regression."""
    from postmortem.scan.fleet.known import verbs

    _done(lambda: verbs.resolve(verbs.Verb(path, crash, scan, title), by, on, builds))


@triage.command()
@_common
@click.option("--reason", required=True, help="Why it is ignored.")
@click.option("--until", callback=_moment, metavar="DATE", help="Ignore it until then only.")
@click.option(
    "--count", type=click.IntRange(min=0), metavar="N",
    help="Ignore it while a scan finds at most N of its dumps.",
)  # fmt: skip
def ignore(
    crash: str, path: Path, scan: Path | None, title: str | None,
    reason: str, until: date | None, count: int | None,
) -> None:  # fmt: skip
    """Mark CRASH ignored: known, not acted on (a flaky node, a test that crashes on purpose)."""
    from postmortem.scan.fleet.known import verbs

    _done(lambda: verbs.ignore(verbs.Verb(path, crash, scan, title), reason, until, count))


@triage.command()
@_common
def reopen(crash: str, path: Path, scan: Path | None, title: str | None) -> None:
    """Mark CRASH open again: known, not fixed, not ignored."""
    from postmortem.scan.fleet.known import verbs

    _done(lambda: verbs.reopen(verbs.Verb(path, crash, scan, title)))


@triage.command("list")
@click.option(
    "--file", "path", type=click.Path(path_type=Path, dir_okay=False),
    default=DEFAULT_FILE, show_default=True, help="The known-crashes file.",
)  # fmt: skip
def list_crashes(path: Path) -> None:
    """List the crashes of the known-crashes file: id, state, title."""
    from postmortem.scan.fleet.known import verbs

    _done(lambda: verbs.list_text(path).rstrip("\n"))
