"""`postmortem triage resolve|ignore|reopen|list`: change a crash's state in the file.

A crash is named by its signature id as the scan index prints it, or by a prefix of it that
names one crash of the file or of the scan given with ``--scan`` (the JSON lines of `scan
--jsonl` or `scan --format json`). From that scan a new table takes its title and key, and a
fix takes the builds its dumps crashed in, so that those builds' later dumps are not called a
regression.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from postmortem.demangle import brief_name
from postmortem.errors import BadOption, KnownCrashesError, UnreadableFile
from postmortem.safefile import open_regular
from postmortem.scan.fleet.known.edit import Change, Value, apply_change
from postmortem.scan.fleet.known.load import ID, load_known
from postmortem.scan.fleet.known.model import CrashState, KnownCrash, KnownCrashes

MAX_SCAN_BYTES = 1 << 30
"""The most of a scan's JSON lines read (a scan of 100,000 dumps is some 200 MiB)."""
MAX_LINE_BYTES = 32 << 20
"""The longest line read: a group of 100,000 dumps lists their paths in some 10 MiB."""
_FIX_KEYS = ("fixed_by", "fixed_on", "crashed_builds")
_IGNORE_KEYS = ("reason", "until", "until_count")


@dataclass(slots=True)
class ScanGroup:
    """What a scan's JSON lines say of one group."""

    title: str | None = None
    key: str | None = None
    builds: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Verb:
    """One triage command: which file, which crash, and the scan that names it."""

    file: Path
    crash: str
    """A signature id or a prefix of one."""
    scan: Path | None = None
    title: str | None = None
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


def resolve(verb: Verb, by: str | None, on: date | datetime | None, builds: tuple[str, ...]) -> str:
    """Mark the crash fixed; returns the line to print."""
    known, sid, found, group = _target(verb)
    old = found.crashed_builds if found else ()
    crashed = tuple(sorted({*old, *builds, *(group.builds if group else ())}))
    fields: list[tuple[str, Value]] = [("state", CrashState.FIXED.value)]
    fields += [("fixed_by", by)] if by else []
    fields.append(("fixed_on", on or verb.now.replace(microsecond=0)))
    fields += [("crashed_builds", crashed)] if crashed else []
    _apply(verb, sid, found, group, fields, _IGNORE_KEYS)
    return f"{sid}: fixed{f' by {by}' if by else ''}, in {known.path}"


def ignore(verb: Verb, reason: str, until: date | datetime | None, count: int | None) -> str:
    """Mark the crash ignored; returns the line to print."""
    if not reason.strip():
        raise BadOption("--reason", "say why the crash is ignored")
    known, sid, found, group = _target(verb)
    fields: list[tuple[str, Value]] = [("state", CrashState.IGNORED.value), ("reason", reason)]
    fields += [("until", until)] if until is not None else []
    fields += [("until_count", count)] if count is not None else []
    _apply(verb, sid, found, group, fields, _FIX_KEYS + _IGNORE_KEYS)
    return f"{sid}: ignored, in {known.path}"


def reopen(verb: Verb) -> str:
    """Mark the crash open (known, not fixed); returns the line to print."""
    known, sid, found, group = _target(verb)
    _apply(verb, sid, found, group, [("state", CrashState.OPEN.value)], _FIX_KEYS + _IGNORE_KEYS)
    return f"{sid}: open, in {known.path}"


def list_text(path: Path) -> str:
    """The file's crashes, one line each: id, state, title."""
    known = _load(path)
    lines = [f"{c.id}  {c.state:<7}  {c.title or c.fixed_by or ''}".rstrip() for c in known.crashes]
    return "".join(f"{line}\n" for line in lines) or f"{path}: no crashes\n"


def _apply(
    verb: Verb,
    sid: str,
    found: KnownCrash | None,
    group: ScanGroup | None,
    fields: list[tuple[str, Value]],
    remove: tuple[str, ...],
) -> None:
    title = verb.title or (None if found and found.title else group.title if group else None)
    named: list[tuple[str, Value]] = [("title", title)] if title else []
    if group and group.key and not (found and found.key):
        named.append(("key", group.key))
    kept = tuple(key for key in remove if key not in dict(fields))
    apply_change(verb.file, Change(sid, tuple(named + fields), kept))


def _target(verb: Verb) -> tuple[KnownCrashes, str, KnownCrash | None, ScanGroup | None]:
    known = _load(verb.file)
    groups = read_scan_groups(verb.scan) if verb.scan else {}
    sid = _crash_id(verb.crash, [c.id for c in known.crashes], list(groups))
    return known, sid, known.find(sid), groups.get(sid)


def _load(path: Path) -> KnownCrashes:
    if not path.exists() and not path.is_symlink():
        return KnownCrashes(path, ())
    return load_known(path)


def _crash_id(given: str, known: list[str], scanned: list[str]) -> str:
    wanted = given.strip().lower()
    if wanted in known or wanted in scanned:
        return wanted
    matches = sorted({sid for sid in (*known, *scanned) if sid.startswith(wanted)})
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise BadOption("CRASH", f"{given} names {len(matches)} crashes: give more digits")
    if ID.match(wanted) and len(wanted) >= 12:
        return wanted  # a crash neither the file nor a scan names yet
    raise BadOption(
        "CRASH", f"{given}: no crash of the file or of --scan has this id; give the whole id"
    )


def read_scan_groups(path: Path) -> dict[str, ScanGroup]:
    """The groups of a scan's JSON lines, by signature id, with the builds of their dumps."""
    groups: dict[str, ScanGroup] = {}
    for record in _records(path):
        signature = record.get("signature")
        if not isinstance(signature, dict) or not isinstance(signature.get("id"), str):
            continue
        group = groups.setdefault(signature["id"], ScanGroup())
        if record.get("type") == "group":
            kernel, exception = record.get("kernel"), signature.get("exception")
            if isinstance(kernel, str) and isinstance(exception, str):
                group.title = f"{exception} in {brief_name(kernel)}"
            if isinstance(signature.get("key"), str):
                group.key = signature["key"]
        elif record.get("type") == "dump" and isinstance(record.get("build_key"), str):
            group.builds.add(record["build_key"])
    return groups


def _records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with open_regular(path) as file:
            read = 0
            while raw := file.readline(MAX_LINE_BYTES + 1):
                read += len(raw)
                if read > MAX_SCAN_BYTES:
                    raise BadOption("--scan", f"{path}: larger than {MAX_SCAN_BYTES:,} bytes")
                if len(raw) > MAX_LINE_BYTES:
                    raise BadOption(
                        "--scan", f"{path}: a line longer than {MAX_LINE_BYTES:,} bytes"
                    )
                try:
                    record = json.loads(raw)
                except ValueError:
                    raise BadOption("--scan", f"{path}: not a scan's JSON lines") from None
                if isinstance(record, dict):
                    yield record
    except UnreadableFile as error:
        raise BadOption("--scan", f"{path}: cannot read: {error.reason}") from None
    except OSError as error:
        raise KnownCrashesError(path, f"cannot read: {error.strerror or error}") from None
