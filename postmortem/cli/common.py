"""What the commands share: the error handling every command runs in, the options and arguments
several of them take, and where output goes."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import click

from postmortem.errors import BadOption, ExitStatus, PostmortemError
from postmortem.report.formats import ANALYZE_FORMATS
from postmortem.report.textsafe import escape_controls

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def guarded(debug: bool, action: Callable[[], T]) -> T:
    """Run `action`, turning our errors into one line on stderr and an exit status (a path
    or name the message quotes has its control characters escaped)."""
    try:
        return action()
    except PostmortemError as error:
        if debug:
            traceback.print_exc()
        hint = f" (hint: {error.hint})" if error.hint else ""
        click.echo(escape_controls(f"error: {error}{hint}"), err=True)
        sys.exit(error.exit_status)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # a bug of ours: say so in one line, details with --debug
        if debug:
            traceback.print_exc()
        line = f"internal error: {type(error).__name__}: {error} (rerun with --debug)"
        click.echo(escape_controls(line), err=True)
        sys.exit(ExitStatus.INTERNAL)


debug_option = click.option("--debug", is_flag=True, help="Show the traceback of an error.")


sentry_option = click.option(
    "--sentry-dsn", metavar="DSN", envvar="POSTMORTEM_SENTRY_DSN",
    help="Send one event per dump to this Sentry project, grouped by crash signature, with the "
    "Markdown report attached (needs the sentry extra; default: $POSTMORTEM_SENTRY_DSN).",
)  # fmt: skip


STORAGE = "postmortem.storage_options"


def keep_storage_options(ctx: click.Context, _: click.Parameter, pairs: tuple[str, ...]) -> None:
    from postmortem.urls import parse_storage_options

    try:
        ctx.meta[STORAGE] = parse_storage_options(pairs)
    except PostmortemError as error:
        raise click.BadParameter(str(error)) from None


storage_option = click.option(
    "--storage-option", multiple=True, metavar="KEY=VALUE", is_eager=True, expose_value=False,
    callback=keep_storage_options,
    help="An fsspec option for dumps given by URL (repeatable), e.g. endpoint_url=http://….",
)  # fmt: skip


def dump_paths(ctx: click.Context, _: click.Parameter, value: Any) -> Any:
    """A dump's path, or its URL in an object store (`s3://bucket/core.nvcudmp`); a tuple
    of them for an argument that takes several."""
    from postmortem.urls import DumpUrl, as_dump_path, use_storage_options

    if value is None:
        return None
    paths = [as_dump_path(v) for v in (value if isinstance(value, tuple) else (value,))]
    protocols = [p.protocol for p in paths if isinstance(p, DumpUrl)]
    use_storage_options(protocols, ctx.meta.get(STORAGE, {}))
    return tuple(paths) if isinstance(value, tuple) else paths[0]


core_argument = click.argument("core", callback=dump_paths)


def scan_roots(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    from postmortem.urls import DumpUrl

    roots = dump_paths(ctx, param, value)
    for root in roots:
        if not isinstance(root, DumpUrl) and not os.path.exists(root):
            raise click.BadParameter(f"Path '{root}' does not exist.", ctx, param)
    return roots


def check_core(core: Path, debug: bool) -> None:
    from postmortem.urls import DumpUrl

    # A folder is a scan's job; say so in one line rather than click's usage block.
    if not isinstance(core, DumpUrl) and core.is_dir():
        guarded(
            debug, raiser(BadOption("CORE", f"{core} is a folder: use `postmortem scan {core}`"))
        )


def raiser(error: PostmortemError) -> Callable[[], None]:
    def action() -> None:
        raise error

    return action


def text_or_json(command: F) -> F:
    """`--format text|json`, as analyze and scan spell it, and `--json` for it."""
    command = click.option("--json", "as_json", is_flag=True, help="The same as --format json.")(
        command
    )
    return click.option(
        "--format", "fmt", type=click.Choice(("text", "json")), default="text",
        show_default=True, help="text for a terminal, json for programs.",
    )(command)  # fmt: skip


def warn(line: str) -> None:
    click.echo(escape_controls(f"warning: {line}"), err=True)


def file_or_stdout(output: Path | None) -> Path | None:
    """`-o -` is standard output, as for most commands that write files."""
    return None if output is not None and str(output) == "-" else output


class ColorMode(str, Enum):
    """`--color`."""

    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


def wants_color(choice: ColorMode, stream: Any) -> bool:
    """--color always/never; auto: FORCE_COLOR, else not NO_COLOR, a terminal, and not one
    that says it cannot show colour (TERM=dumb) (https://no-color.org,
    https://force-color.org)."""
    if choice is not ColorMode.AUTO:
        return choice is ColorMode.ALWAYS
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    if os.environ.get("NO_COLOR", "") or os.environ.get("TERM") == "dumb":
        return False
    return bool(stream.isatty())


dump_dir_option = click.option(
    "--dir", "dump_dir", type=click.Path(path_type=Path, file_okay=False),
    default=Path("postmortem-dumps"), show_default=True,
    help="Where the dumps, the trigger pipes and the host logs go.",
)  # fmt: skip


report_format_option = click.option(
    "--format", "fmt", type=click.Choice(ANALYZE_FORMATS), default="md", show_default=True,
    help="Format of the report written beside each dump (core_….nvcudmp.md).",
)  # fmt: skip


no_analyze_option = click.option(
    "--no-analyze", is_flag=True, help="Only list the dumps; write no report."
)
