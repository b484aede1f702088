"""Each group of a scan marked known, new or regressed against the known-crashes file.

The file is the repository's memory, so the marks are the same on any machine, with or
without a scan cache (a CI runner throws its cache away after each job). A fixed crash has
*regressed* when one of its dumps was written after the fix, in a build that had not crashed
before it: a dump of a build listed in ``crashed_builds`` is old code still running
somewhere, however late it was written. A dump's time is its metadata timestamp, else the
%t of its name, else its file's modification time (which a downloaded artifact resets: the
detail line says when a regression rests on that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone

from postmortem.model import TimeSource
from postmortem.scan.fleet.group import Group, rows_by_signature
from postmortem.scan.fleet.known.model import CrashState, KnownCrash, KnownCrashes, Lifecycle, Mark
from postmortem.scan.row import DumpRow


def mark_groups(
    groups: Sequence[Group], rows: Sequence[DumpRow], known: KnownCrashes, now: float
) -> tuple[Group, ...]:
    """`groups` with their `lifecycle` set from `known`; `rows` are the scan's dumps and
    `now` the scan's time (Unix seconds), for an ignore that runs until a date."""
    members = rows_by_signature(rows)
    return tuple(
        replace(g, lifecycle=judge(g, members.get(sid, []), known.find(sid), now))
        for g in groups
        for sid in (g.signature.id,)
    )


def judge(group: Group, rows: Sequence[DumpRow], entry: KnownCrash | None, now: float) -> Lifecycle:
    """The mark of one group whose dumps are `rows`, given its entry in the file (or none)."""
    if entry is None:
        return Lifecycle(Mark.NEW, None, "not in the known-crashes file")
    if entry.state is CrashState.OPEN:
        return Lifecycle(Mark.KNOWN, entry.state, _named("open", entry), entry.line)
    if entry.state is CrashState.IGNORED:
        return _ignored(group, entry, now)
    return _fixed(rows, entry)


def _named(what: str, entry: KnownCrash) -> str:
    return f"{what} in the known-crashes file (line {entry.line})"


def _ignored(group: Group, entry: KnownCrash, now: float) -> Lifecycle:
    reason = f": {entry.reason}" if entry.reason else ""
    if entry.until is not None and now > entry.until.timestamp():
        detail = f"ignored until {_day(entry.until)}, which has passed{reason}"
        return Lifecycle(Mark.KNOWN, entry.state, detail, entry.line, expired=True)
    if entry.until_count is not None and group.count > entry.until_count:
        detail = (
            f"ignored while a scan finds at most {entry.until_count} dumps; this one found "
            f"{group.count}{reason}"
        )
        return Lifecycle(Mark.KNOWN, entry.state, detail, entry.line, expired=True)
    return Lifecycle(Mark.KNOWN, entry.state, f"ignored{reason}", entry.line)


def _fixed(rows: Sequence[DumpRow], entry: KnownCrash) -> Lifecycle:
    fix = "fixed" + (f" by {entry.fixed_by}" if entry.fixed_by else "")
    if entry.fixed_on is not None:
        fix += f" on {_day(entry.fixed_on)}"
    after = [row for row in rows if _after_fix(row, entry)]
    if not after:
        detail = f"{fix}; its {len(rows)} dump(s) predate the fix"
        if entry.crashed_builds:
            detail += " (written before it, or from builds that crashed before it)"
        return Lifecycle(Mark.KNOWN, entry.state, detail, entry.line)
    builds = sorted({row.build_key for row in after if row.build_key})
    detail = f"{fix}; {len(after)} dump(s) since"
    if builds:
        detail += f", in build {', '.join(builds[:3])}{', …' if len(builds) > 3 else ''}"
    if entry.fixed_on is not None and all(r.time_source == TimeSource.MTIME for r in after):
        detail += " (dated by file times only, which a copy or a download resets)"
    return Lifecycle(Mark.REGRESSED, entry.state, detail, entry.line, after_fix=len(after))


def _after_fix(row: DumpRow, entry: KnownCrash) -> bool:
    if row.build_key is not None and row.build_key in entry.crashed_builds:
        return False
    return entry.fixed_on is None or row.time > entry.fixed_on.timestamp()


def _day(moment: datetime) -> str:
    utc = moment.astimezone(timezone.utc)
    if (utc.hour, utc.minute, utc.second) == (0, 0, 0):  # a date: the end of the day before
        return datetime.fromtimestamp(utc.timestamp() - 1, timezone.utc).strftime("%Y-%m-%d")
    return utc.strftime("%Y-%m-%d %H:%M UTC")
