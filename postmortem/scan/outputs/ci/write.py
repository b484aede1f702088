"""What `scan` writes for a CI system besides its index: the GitHub job summary and
annotations, the JUnit XML report, and the tracker comment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from postmortem.errors import ScanOutputError
from postmortem.model import TextEnum
from postmortem.report.render import render
from postmortem.scan.outputs.ci.github import GithubRun, append_summary, workflow_annotations
from postmortem.scan.outputs.ci.junit import junit_xml
from postmortem.scan.outputs.ci.policy import FailOn
from postmortem.scan.outputs.ci.tracker import tracker_comment
from postmortem.scan.outputs.index import build_index
from postmortem.scan.run import ScanResult


class CiMode(TextEnum):
    """When `scan` writes GitHub Actions output (`--ci`)."""

    AUTO = "auto"
    """When the environment says the scan runs in GitHub Actions."""
    GITHUB = "github"
    """Always, from whatever ``GITHUB_*`` variables are set."""
    NONE = "none"
    """Never."""


@dataclass(frozen=True, slots=True)
class CiOutputs:
    """Where a scan's CI outputs go."""

    github: GithubRun | None
    """The GitHub Actions run to write a summary and annotations for; None: none."""
    fail_on: FailOn
    junit: Path | None
    """The JUnit XML file; None: none."""
    tracker: Path | None
    """The tracker comment's Markdown file; None: none."""
    run: GithubRun | None
    """The run the scan is part of, named in the tracker comment (even with `--ci none`)."""


def write_ci_outputs(result: ScanResult, ci: CiOutputs) -> str:
    """Write the files `ci` asks for; returns what goes to standard output (the workflow
    commands of GitHub's annotations, one per line)."""
    if ci.junit is not None:
        errors = result.errors
        _write(ci.junit, junit_xml(result.groups, errors, ci.fail_on, result.seconds))
    if ci.tracker is not None:
        comment = tracker_comment(
            result.groups, len(result.rows), len(result.errors), ci.run, ci.fail_on
        )
        _write(ci.tracker, comment.encode())
    if ci.github is None:
        return ""
    commands, left_out = workflow_annotations(result.groups, ci.github, ci.fail_on)
    summary = render("scan", build_index(result, None), "md")
    if left_out:
        summary += f"\n\n{left_out} more new or regressed groups than a step can annotate.\n"
    append_summary(ci.github, summary)
    return "".join(f"{command}\n" for command in commands)


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as error:
        raise ScanOutputError(path, error.strerror or str(error)) from None
