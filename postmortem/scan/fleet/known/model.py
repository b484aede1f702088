"""The known-crashes file as typed data: each crash group a repository knows, and its state.

The file is TOML kept in the repository and reviewed like code (`docs/ci.md`). One table per
signature id, in any order, commented as the team likes:

    [crash.3f2a9c1e0b7d]
    title = "illegal address in flash_fwd_kernel"   # for readers; never matched
    state = "fixed"
    fixed_by = "#4512"
    fixed_on = 2026-11-20
    crashed_builds = ["a1b2c3d4e5f60718"]

A state is *open* (known, not fixed), *fixed* (by a PR, commit or build, on a date), or
*ignored* (with a reason, optionally until a date or while a scan finds at most a count of
dumps). `postmortem.scan.fleet.known.judge` marks each group of a scan against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from postmortem.model import TextEnum


class CrashState(TextEnum):
    """What a repository says of a crash group."""

    OPEN = "open"
    """Known and not fixed: a bug filed, a fix under way."""
    FIXED = "fixed"
    """Fixed by a change: its dumps from a later build are a regression."""
    IGNORED = "ignored"
    """Not to be acted on (a flaky GPU, a test that crashes on purpose), for a while or for
    good."""


class Mark(TextEnum):
    """A scan's word for a group, against the known-crashes file."""

    NEW = "new"
    """Its signature is not in the file."""
    KNOWN = "known"
    """In the file, open or ignored, or fixed and seen only in builds from before the fix."""
    REGRESSED = "regressed"
    """Fixed, and seen again in a build after the fix."""


@dataclass(frozen=True, slots=True)
class KnownCrash:
    """One table of the file."""

    id: str
    """The signature id (`postmortem signature`, the scan index)."""
    state: CrashState
    line: int
    """The line of its table header, counted from 1."""
    title: str | None = None
    """What readers call it; never used to match."""
    key: str | None = None
    """The signature key, for readers of the file."""
    fixed_by: str | None = None
    """The PR, commit or build that fixed it (`#4512`, a commit hash, a version)."""
    fixed_on: datetime | None = None
    """When the fix landed (UTC). A dump written after it, in a build that had not crashed
    before it, is a regression. A date alone is taken as the end of that day."""
    crashed_builds: tuple[str, ...] = ()
    """Build keys (`postmortem.scan.build`) that crashed before the fix: their dumps, however
    late, are old code still running, not a regression."""
    reason: str | None = None
    """Why it is ignored."""
    until: datetime | None = None
    """An ignored crash is ignored up to then (UTC; a date: the end of that day)."""
    until_count: int | None = None
    """An ignored crash is ignored while a scan finds at most this many of its dumps."""


@dataclass(frozen=True, slots=True)
class KnownCrashes:
    """The whole file, read."""

    path: Path
    crashes: tuple[KnownCrash, ...]
    """In the file's order."""

    def find(self, sid: str) -> KnownCrash | None:
        """The entry of signature id `sid`; None when the file has none."""
        return next((crash for crash in self.crashes if crash.id == sid), None)


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """A group's mark against the known-crashes file, with the facts behind it."""

    mark: Mark
    state: CrashState | None
    """The file's state; None for a new group."""
    detail: str
    """One line: why the mark (the fix and the dumps after it, the ignore's reason)."""
    line: int | None = None
    """The line of the group's table in the file."""
    after_fix: int = 0
    """For a fixed crash: its dumps from after the fix, in builds that had not crashed before."""
    expired: bool = False
    """An ignored crash whose date or count has run out: it is acted on again."""

    @property
    def acted_on(self) -> bool:
        """Whether a reader should act on it: new, regressed, open, or an ignore run out."""
        if self.mark is not Mark.KNOWN:
            return True
        if self.state is CrashState.IGNORED:
            return self.expired
        return self.state is CrashState.OPEN
