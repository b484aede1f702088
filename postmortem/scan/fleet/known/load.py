"""Read a known-crashes file (`postmortem.scan.fleet.known.model`), bounded and strictly.

The file is data from a repository: read through the bounded reader, at most
`MAX_FILE_BYTES`, parsed as TOML, and every table checked: a misspelt key or a state that is
not one of three is an error naming the line, never a crash silently left unmatched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any

from postmortem.config import parse_toml
from postmortem.errors import ConfigError, KnownCrashesError, UnreadableFile
from postmortem.safefile import read_regular
from postmortem.scan.fleet.known.model import CrashState, KnownCrash, KnownCrashes

MAX_FILE_BYTES = 4 << 20
"""A file of a few thousand crashes is a few hundred KiB."""
MAX_CRASHES = 20_000
ID = re.compile(r"[0-9a-f]{6,64}\Z")
"""A signature id: lowercase hex (12 digits today)."""
HEADER = re.compile(
    r"[ \t]*\[[ \t]*crash[ \t]*\.[ \t]*(?:\"([^\"\n]*)\"|'([^'\n]*)'|([A-Za-z0-9_-]+))[ \t]*\]"
)
"""A ``[crash.ID]`` table header, the id bare or quoted."""
_STRINGS = ("title", "key", "fixed_by", "reason")
_KEYS = frozenset(
    {"state", *_STRINGS, "fixed_on", "crashed_builds", "until", "until_count", "note"}
)


def load_known(path: Path) -> KnownCrashes:
    """The known-crashes file at `path`; raises KnownCrashesError."""
    try:
        data = read_regular(path, MAX_FILE_BYTES)
    except UnreadableFile as error:
        raise KnownCrashesError(path, f"cannot read: {error.reason}") from None
    return parse_known(path, data)


def parse_known(path: Path, data: bytes) -> KnownCrashes:
    """The known-crashes file `path` holding `data`; raises KnownCrashesError."""
    try:
        table = parse_toml(path, data)
    except ConfigError as error:
        raise KnownCrashesError(path, error.reason) from None
    unknown = sorted(set(table) - {"crash"})
    if unknown:
        raise KnownCrashesError(path, f"unknown top-level key {unknown[0]!r} (only [crash.ID])")
    crashes = table.get("crash", {})
    if not isinstance(crashes, dict):
        raise KnownCrashesError(path, "crash must be tables, one per signature: [crash.ID]")
    if len(crashes) > MAX_CRASHES:
        raise KnownCrashesError(path, f"{len(crashes):,} crashes; the most read is {MAX_CRASHES:,}")
    lines = header_lines(data.decode("utf-8", "replace"))
    return KnownCrashes(
        path, tuple(_crash(path, sid, entry, lines.get(sid, 0)) for sid, entry in crashes.items())
    )


def header_lines(text: str) -> dict[str, int]:
    """The line (from 1) of each ``[crash.ID]`` header in `text`, by id."""
    found: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = HEADER.match(line)
        if match:
            found.setdefault(next(g for g in match.groups() if g is not None), number)
    return found


def _crash(path: Path, sid: str, entry: Any, line: int) -> KnownCrash:
    where = f"[crash.{sid}] (line {line})" if line else f"[crash.{sid}]"

    def fail(reason: str) -> KnownCrashesError:
        return KnownCrashesError(path, f"{where}: {reason}")

    if not ID.match(sid):
        raise fail("the id is not a signature id (hex digits, as the scan index prints it)")
    if not isinstance(entry, dict):
        raise fail("not a table")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    try:
        state = CrashState(entry.get("state"))
    except ValueError:
        raise fail("state must be one of open, fixed, ignored") from None
    fields = {name: _string(entry, name, fail) for name in _STRINGS}
    if state is CrashState.IGNORED and not fields["reason"]:
        raise fail("an ignored crash needs a reason")
    return KnownCrash(
        sid, state, line, **fields,
        fixed_on=_moment(entry, "fixed_on", fail), crashed_builds=_builds(entry, fail),
        until=_moment(entry, "until", fail), until_count=_count(entry, fail),
    )  # fmt: skip


Fail = Callable[[str], KnownCrashesError]


def _string(entry: dict[str, Any], name: str, fail: Fail) -> str | None:
    value = entry.get(name)
    if value is not None and not isinstance(value, str):
        raise fail(f"{name} must be a string")
    return value


def _moment(entry: dict[str, Any], name: str, fail: Fail) -> datetime | None:
    """A TOML date (the end of that day, UTC) or date-time (UTC when it names no zone)."""
    value = entry.get(name)
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, date):
        return datetime.combine(value + timedelta(days=1), time(), timezone.utc)
    raise fail(f"{name} must be a date (2026-11-20) or a date-time")


def _builds(entry: dict[str, Any], fail: Fail) -> tuple[str, ...]:
    value = entry.get("crashed_builds", [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail("crashed_builds must be a list of build keys")
    return tuple(value)


def _count(entry: dict[str, Any], fail: Fail) -> int | None:
    value = entry.get("until_count")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail("until_count must be a whole number, 0 or more")
    return value
