"""Which groups fail a CI job (`scan --fail-on`), from their marks.

A group's mark comes from the repository's known-crashes file when the scan was given one
(`postmortem.scan.fleet.known`), else from the scan cache's history of the same folders; with
neither, nothing is known, so every group is new.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from postmortem.model import TextEnum
from postmortem.scan.fleet.group import Group
from postmortem.scan.fleet.known.model import CrashState, Mark


class FailOn(TextEnum):
    """What makes `scan` end with `ExitStatus.CRASHES`."""

    NEW = "new"
    """A group that is new."""
    REGRESSED = "regressed"
    """A group that is regressed."""
    ANY = "any"
    """A group a reader should act on: new, regressed, open, or ignored past its limit (a
    group ignored, or fixed and seen only in builds from before the fix, does not count)."""
    NEVER = "never"
    """Nothing: the exit status says only whether every dump was read."""


def mark_of(group: Group) -> Mark:
    """The group's mark: the known-crashes file's, else its history's, else new."""
    if group.lifecycle is not None:
        return group.lifecycle.mark
    history = group.history
    if history is None:
        return Mark.NEW
    if history.regressed:
        return Mark.REGRESSED
    return Mark.NEW if history.new else Mark.KNOWN


def state_of(group: Group) -> CrashState | None:
    """The known-crashes file's state of the group; None when it has none."""
    return group.lifecycle.state if group.lifecycle is not None else None


def fails(group: Group, fail_on: FailOn) -> bool:
    """Whether `group` fails the job under `fail_on`."""
    mark = mark_of(group)
    if fail_on is FailOn.NEW:
        return mark is Mark.NEW
    if fail_on is FailOn.REGRESSED:
        return mark is Mark.REGRESSED
    if fail_on is FailOn.ANY:
        return group.lifecycle.acted_on if group.lifecycle is not None else True
    return False


def mark_counts(groups: Sequence[Group]) -> dict[str, int]:
    """How many groups have each mark, regressed first."""
    marks = Counter(str(mark_of(g)) for g in groups)
    return {mark: marks.get(mark, 0) for mark in ("regressed", "new", "known")}


def failing(groups: Sequence[Group], fail_on: FailOn) -> tuple[Group, ...]:
    """The groups that fail the job, in the scan's order."""
    return tuple(group for group in groups if fails(group, fail_on))
