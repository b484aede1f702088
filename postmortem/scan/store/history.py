"""A signature's history across scans of the same roots: first and last seen, dumps per day,
and what changed since the previous scan.

The scan cache keeps, per scanned roots (their absolute spellings, sorted, hashed) and
signature, the first and last time a dump of it was written and its dumps per UTC day, and
numbers the scans of those roots. A day's count is the most dumps any scan has found for that
day: scanning the same dumps again counts nothing twice, and dumps deleted since (a retention
policy) are not forgotten. Against the previous scan of the same roots, a group is

- **new** when no earlier scan of these roots found its signature (never on the first scan
  of the roots: everything would be new);
- **regressed** when it had been seen, and a dump of it written at least `QUIET_DAYS` days
  after its last one until now came back.

With ``--since`` the group's count is that of the window and its history holds the totals.
Nothing is recorded by an interrupted scan; its groups are still marked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from postmortem.scan.fleet.group import Group, History, rows_by_signature
from postmortem.scan.row import DumpRow
from postmortem.urls import absolute_path

QUIET_DAYS = 7
"""A signature with no dump for this many days, then a new one, has regressed."""
_DAY_S = 86400

_CREATE = (
    """create table if not exists history_scans (
        roots text primary key, number integer not null, finished_ns integer not null)""",
    """create table if not exists history_signatures (
        roots text not null, signature text not null, first_seen real not null,
        last_seen real not null, first_scan integer not null, last_scan integer not null,
        primary key (roots, signature))""",
    """create table if not exists history_days (
        roots text not null, signature text not null, day text not null,
        count integer not null, primary key (roots, signature, day))""",
)


@dataclass(frozen=True, slots=True)
class ScanHistory:
    """The scans of these roots: this one's number and when the previous one finished."""

    number: int
    previous_ns: int | None


def roots_key(roots: Sequence[Path]) -> str:
    """The key of a set of roots, however they were spelled or ordered."""
    spelled = sorted({absolute_path(root) for root in roots})
    return hashlib.sha256(json.dumps(spelled).encode()).hexdigest()[:16]


def _day(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d")


def apply_history(
    database: Path,
    roots: Sequence[Path],
    groups: Sequence[Group],
    rows: Sequence[DumpRow],
    record: bool,
) -> tuple[tuple[Group, ...], ScanHistory | None]:
    """`groups` with their history in the cache at `database`; the scan recorded there when
    `record`. A cache that cannot be read or written leaves the groups as they are."""
    try:
        with contextlib.closing(sqlite3.connect(database, timeout=30)) as db:
            with db:
                for statement in _CREATE:
                    db.execute(statement)
            key = roots_key(roots)
            found = db.execute(
                "select number, finished_ns from history_scans where roots = ?", (key,)
            ).fetchone()
            scan = ScanHistory((found[0] if found else 0) + 1, found[1] if found else None)
            by_signature = rows_by_signature(rows)
            judged = tuple(
                _judged(db, key, scan, g, by_signature.get(g.signature.id, [])) for g in groups
            )
            if record:
                with db:
                    _record(db, key, scan, groups, by_signature)
    except sqlite3.Error:
        return tuple(groups), None
    return judged, scan


def _judged(
    db: sqlite3.Connection, key: str, scan: ScanHistory, group: Group, members: list[DumpRow]
) -> Group:
    sid = group.signature.id
    before = db.execute(
        "select first_seen, last_seen from history_signatures where roots = ? and signature = ?",
        (key, sid),
    ).fetchone()
    stored = dict(
        db.execute(
            "select day, count from history_days where roots = ? and signature = ?", (key, sid)
        ).fetchall()
    )
    days = Counter(_day(r.time) for r in members)
    merged = {day: max(stored.get(day, 0), days.get(day, 0)) for day in {*stored, *days}}
    first, last = group.first_seen, group.last_seen
    new = before is None and scan.previous_ns is not None
    regressed, quiet = False, None
    if before is not None:
        first, last = min(first, before[0]), max(last, before[1])
        later = [r.time for r in members if r.time > before[1]]
        if later and min(later) - before[1] >= QUIET_DAYS * _DAY_S:
            regressed, quiet = True, int((min(later) - before[1]) // _DAY_S)
    history = History(
        first, last, sum(merged.values()), tuple(sorted(merged.items())), new, regressed, quiet
    )
    return replace(group, history=history)


def _record(
    db: sqlite3.Connection,
    key: str,
    scan: ScanHistory,
    groups: Sequence[Group],
    by_signature: dict[str, list[DumpRow]],
) -> None:
    db.execute(
        "insert or replace into history_scans values (?, ?, ?)", (key, scan.number, time.time_ns())
    )
    for group in groups:
        sid = group.signature.id
        db.execute(
            "insert into history_signatures values (?, ?, ?, ?, ?, ?) "
            "on conflict (roots, signature) do update set "
            "first_seen = min(first_seen, excluded.first_seen), "
            "last_seen = max(last_seen, excluded.last_seen), last_scan = excluded.last_scan",
            (key, sid, group.first_seen, group.last_seen, scan.number, scan.number),
        )
        for day, count in Counter(_day(r.time) for r in by_signature.get(sid, [])).items():
            db.execute(
                "insert into history_days values (?, ?, ?, ?) "
                "on conflict (roots, signature, day) do update set "
                "count = max(count, excluded.count)",
                (key, sid, day, count),
            )
