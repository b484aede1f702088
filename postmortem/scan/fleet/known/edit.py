"""Change one crash's table in a known-crashes file, keeping every comment and the order.

The file is reviewed like code, so an edit must read as a small diff: the lines of the other
tables, every comment, blank line and key order are left as they were. Within the edited
table a key that is set again keeps its line (and its trailing comment); a new key goes after
the table's last key; a key of a state left behind is removed. A crash not in the file is
appended as a new table. The result is parsed again and compared with what was meant: an
edit that a construct of the file defeats (a multi-line string that holds a ``[`` line) is
refused, and the file left alone, rather than written wrong.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

from postmortem.errors import KnownCrashesError, UnreadableFile
from postmortem.safefile import read_regular
from postmortem.scan.fleet.known.load import HEADER, MAX_FILE_BYTES, parse_known

Value = str | int | date | datetime | tuple[str, ...]
"""What a key of a crash's table holds."""

NEW_FILE = """\
# Known CUDA crashes of this repository, by signature id (`postmortem scan --known FILE`).
# Edited by `postmortem triage resolve|ignore|reopen`; comments and order are kept.
# Each [crash.ID] has a state: open, fixed (fixed_by, fixed_on, crashed_builds) or
# ignored (reason, until, until_count). See docs/ci.md.
"""
_TABLE_START = re.compile(r"[ \t]*\[")
_KEY_LINE = re.compile(r"([ \t]*)([A-Za-z0-9_-]+)[ \t]*=[ \t]*")


@dataclass(frozen=True, slots=True)
class Change:
    """What to do to one crash's table."""

    sid: str
    set: tuple[tuple[str, Value], ...]
    """Keys to set, in the order new ones are written."""
    remove: tuple[str, ...] = ()
    """Keys to drop (those of a state the crash leaves)."""


def apply_change(path: Path, change: Change) -> str:
    """Apply `change` to the file at `path` (created when missing); returns the new text.

    Raises:
        KnownCrashesError: the file cannot be read or written, is not a known-crashes file,
            or cannot be edited in place.
    """
    text = _read_text(path)
    parse_known(path, text.encode())  # a broken file is reported, not edited
    edited = edit_text(text, change)
    _check(path, text, edited, change)
    _write(path, edited)
    return edited


def edit_text(text: str, change: Change) -> str:
    """`text` with `change` made to its table (appended when it has none)."""
    lines = text.splitlines(keepends=True)
    start = _find_table(lines, change.sid)
    if start is None:
        return _appended(text, change)
    end = next(
        (i for i in range(start + 1, len(lines)) if _TABLE_START.match(lines[i])), len(lines)
    )
    body = _edited_body(lines[start + 1 : end], change)
    return "".join(lines[: start + 1] + body + lines[end:])


def _find_table(lines: list[str], sid: str) -> int | None:
    for number, line in enumerate(lines):
        match = HEADER.match(line)
        if match and next(g for g in match.groups() if g is not None) == sid:
            return number
    return None


def _edited_body(body: list[str], change: Change) -> list[str]:
    values = dict(change.set)
    kept: list[str] = []
    done: set[str] = set()
    for line in body:
        match = _KEY_LINE.match(line)
        key = match.group(2) if match else None
        if key in change.remove and key not in values:
            continue
        if match and key in values:
            rest = line[match.end() :]
            kept.append(f"{match.group(1)}{key} = {toml_value(values[key])}{_comment(rest)}\n")
            done.add(key)
            continue
        kept.append(line)
    last_key = max((i for i, line in enumerate(kept) if _KEY_LINE.match(line)), default=-1)
    added = [f"{key} = {toml_value(v)}\n" for key, v in change.set if key not in done]
    return kept[: last_key + 1] + added + kept[last_key + 1 :]


def _appended(text: str, change: Change) -> str:
    lines = [f"[crash.{change.sid}]\n"] + [f"{k} = {toml_value(v)}\n" for k, v in change.set]
    if text and not text.endswith("\n"):
        text += "\n"
    return text + ("\n" if text else "") + "".join(lines)


def _comment(rest: str) -> str:
    """The trailing comment of a value's text `rest` (with its spacing), or nothing."""
    quote: str | None = None
    escaped = False
    for index, char in enumerate(rest):
        if quote is not None:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "#":
            spaces = len(rest[:index]) - len(rest[:index].rstrip())
            return rest[index - spaces : index] + rest[index:].rstrip("\r\n")
    return ""


def toml_value(value: Value) -> str:
    """`value` written as TOML: a basic string, an integer, a date, or a list of strings."""
    if isinstance(value, bool):
        raise TypeError("no booleans in a known-crashes file")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return '"' + "".join(_char(c) for c in value) + '"'


def _char(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    if ord(char) < 0x20 or ord(char) == 0x7F:  # TOML forbids control characters in strings
        return f"\\u{ord(char):04x}"
    return char


def _read_text(path: Path) -> str:
    if not path.exists() and not path.is_symlink():
        return NEW_FILE
    try:
        data = read_regular(path, MAX_FILE_BYTES)
    except UnreadableFile as error:
        raise KnownCrashesError(path, f"cannot read: {error.reason}") from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise KnownCrashesError(path, "not UTF-8 text") from None


def _check(path: Path, before: str, after: str, change: Change) -> None:
    """Refuse an edit whose result does not read back as meant."""
    old = {c.id: c for c in parse_known(path, before.encode()).crashes}
    try:
        new = {c.id: c for c in parse_known(path, after.encode()).crashes}
    except KnownCrashesError as error:
        raise _not_in_place(path, str(error)) from None
    if set(new) != set(old) | {change.sid}:
        raise _not_in_place(path, "the tables did not read back the same")
    crash = new[change.sid]
    for key, value in change.set:
        if key in ("fixed_on", "until"):
            continue
        got = getattr(crash, key)
        if got != value and not (key == "state" and str(got) == value):
            raise _not_in_place(path, f"{key} did not read back as written")
    for key in change.remove:
        if key not in dict(change.set) and getattr(crash, key) not in (None, ()):
            raise _not_in_place(path, f"{key} is still set")


def _not_in_place(path: Path, why: str) -> KnownCrashesError:
    return KnownCrashesError(path, f"cannot edit in place ({why}); edit it by hand")


def _write(path: Path, text: str) -> None:
    """Write `text` over `path` in one step: a reader never sees half a file."""
    target = path.resolve()
    try:
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
        handle, scratch = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
                file.write(text)
            os.chmod(scratch, mode)
            os.replace(scratch, target)
        except BaseException:
            os.unlink(scratch)
            raise
    except OSError as error:
        raise KnownCrashesError(path, f"cannot write: {error.strerror or error}") from None
