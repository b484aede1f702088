"""A tracker comment: one run's crash groups as Markdown, for an issue that tracks crashes.

Teams keep a "CUDA coredump tracker" issue by hand, one comment per failed run; this writes
that comment (`scan --tracker-comment FILE`, posted with ``gh issue comment N --body-file
FILE``). Regressed and new groups first, each with its signature id, the crash, its source
line, its dumps and the runs they came from; known groups folded away. GitHub takes at most
65,536 characters in a comment, so the groups listed are cut (the rest counted) until the
comment fits in `COMMENT_LIMIT`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from postmortem.demangle import brief_name
from postmortem.report.render import render
from postmortem.scan.fleet.group import Group
from postmortem.scan.fleet.known.model import Mark
from postmortem.scan.outputs.ci.github import GithubRun, source_in_checkout
from postmortem.scan.outputs.ci.policy import FailOn, fails, mark_counts, mark_of, state_of

COMMENT_LIMIT = 60_000
"""Characters: under GitHub's 65,536 with room for a reply's quote."""
_ORDER = {Mark.REGRESSED: 0, Mark.NEW: 1, Mark.KNOWN: 2}


def tracker_comment(
    groups: Sequence[Group], dumps: int, errors: int, run: GithubRun | None, fail_on: FailOn
) -> str:
    """The comment's Markdown, at most `COMMENT_LIMIT` characters."""
    ordered = sorted(groups, key=lambda g: (_ORDER[mark_of(g)], -g.count))
    listed = len(ordered)
    while True:
        view = _view(ordered, listed, dumps, errors, run, fail_on)
        text = render("tracker", view, "md")
        if len(text) <= COMMENT_LIMIT or listed == 0:
            return text[:COMMENT_LIMIT]
        listed //= 2


def _view(
    groups: Sequence[Group],
    listed: int,
    dumps: int,
    errors: int,
    run: GithubRun | None,
    fail_on: FailOn,
) -> dict[str, Any]:
    rows = [_row(g, run, fail_on) for g in groups[:listed]]
    return {
        "run": None if run is None else {
            "url": run.url, "run_id": run.run_id, "job": run.job, "workflow": run.workflow,
            "sha": run.sha, "pull_request": run.pull_request, "event": run.event,
            "attempt": run.run_attempt, "repository": run.repository,
        },
        "dumps": dumps, "errors": errors, "groups": len(groups),
        "marks": mark_counts(groups),
        "acted": [row for row in rows if row["mark"] != "known"],
        "known": [row for row in rows if row["mark"] == "known"],
        "left_out": len(groups) - listed, "fail_on": str(fail_on),
        "failing": sum(1 for g in groups if fails(g, fail_on)),
    }  # fmt: skip


def _row(group: Group, run: GithubRun | None, fail_on: FailOn) -> dict[str, Any]:
    signature = group.signature
    source = source_in_checkout(signature, run.workspace) if run is not None else None
    frame = next((f for f in signature.all_frames if not f.library), None)
    state = state_of(group)
    return {
        "id": signature.id, "mark": str(mark_of(group)),
        "state": None if state is None else str(state),
        "exception": signature.exception,
        "kernel": brief_name(group.kernel or signature.kernel),
        "source": f"{source[0]}:{source[1]}" if source else (frame.label if frame else None),
        "count": group.count, "runs": list(group.runs[:5]),
        "runs_more": max(0, len(group.runs) - 5),
        "detail": None if group.lifecycle is None else group.lifecycle.detail,
        "fails": fails(group, fail_on), "earliest": group.earliest,
    }  # fmt: skip
