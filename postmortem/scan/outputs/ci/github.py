"""A scan inside GitHub Actions: the run it belongs to, its job summary and its annotations.

GitHub Actions sets ``GITHUB_ACTIONS=true`` and names the run in ``GITHUB_*`` variables
(docs.github.com, "Store information in variables", default environment variables). A step
appends Markdown to the file named by ``GITHUB_STEP_SUMMARY`` ("Adding a job summary", at
most 1 MiB per step), and annotates a file and line by printing a workflow command,
``::error file=F,line=L,title=T::message``, on standard output, where ``%``, CR and LF are
escaped in the message, and ``:`` and ``,`` too in a property ("Workflow commands"). A step
shows at most 10 error and 10 warning annotations; the rest are counted in the summary.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from postmortem.analysis.fleet.signature import Signature
from postmortem.demangle import brief_name
from postmortem.errors import ScanOutputError
from postmortem.report.textsafe import escape_controls
from postmortem.scan.events.triage import cut_report
from postmortem.scan.fleet.group import Group
from postmortem.scan.fleet.known.model import Mark
from postmortem.scan.outputs.ci.policy import FailOn, fails, mark_of

SUMMARY_LIMIT_BYTES = 1_000_000
"""A step's summary holds at most 1 MiB: ours stays under it with room for the note."""
ANNOTATIONS_PER_LEVEL = 10
_MAX_SUFFIX_PARTS = 32
MAX_CHECKOUT_FILES = 200_000
"""Files of the checkout looked through for a source named by its file name alone."""


@dataclass(frozen=True, slots=True)
class GithubRun:
    """The workflow run a scan is part of, from its environment."""

    workspace: Path | None
    """The checked-out repository (``GITHUB_WORKSPACE``)."""
    summary: Path | None
    """The step's summary file (``GITHUB_STEP_SUMMARY``)."""
    server_url: str = "https://github.com"
    repository: str | None = None
    run_id: str | None = None
    run_attempt: str | None = None
    job: str | None = None
    workflow: str | None = None
    sha: str | None = None
    event: str | None = None
    """What started the run (``pull_request``, ``schedule``, ``push``…)."""
    ref: str | None = None

    @property
    def pull_request(self) -> int | None:
        """The pull request the run tests (``refs/pull/N/merge``), or None."""
        parts = (self.ref or "").split("/")
        if len(parts) == 4 and parts[:2] == ["refs", "pull"] and parts[2].isdigit():
            return int(parts[2])
        return None

    @property
    def url(self) -> str | None:
        """The run's page (with its attempt), or None when the variables do not say."""
        if not (self.repository and self.run_id):
            return None
        attempt = f"/attempts/{self.run_attempt}" if self.run_attempt else ""
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}{attempt}"


def github_run(environ: Mapping[str, str]) -> GithubRun | None:
    """The run `environ` belongs to; None outside GitHub Actions."""
    if environ.get("GITHUB_ACTIONS") != "true":
        return None
    return github_run_of(environ)


def github_run_of(environ: Mapping[str, str]) -> GithubRun:
    """The run `environ` names, as far as it does (for `--ci github` outside Actions too)."""

    def path(name: str) -> Path | None:
        value = environ.get(name)
        return Path(value) if value else None

    return GithubRun(
        workspace=path("GITHUB_WORKSPACE"), summary=path("GITHUB_STEP_SUMMARY"),
        server_url=environ.get("GITHUB_SERVER_URL") or "https://github.com",
        repository=environ.get("GITHUB_REPOSITORY"), run_id=environ.get("GITHUB_RUN_ID"),
        run_attempt=environ.get("GITHUB_RUN_ATTEMPT"), job=environ.get("GITHUB_JOB"),
        workflow=environ.get("GITHUB_WORKFLOW"), sha=environ.get("GITHUB_SHA"),
        event=environ.get("GITHUB_EVENT_NAME"), ref=environ.get("GITHUB_REF"),
    )  # fmt: skip


def append_summary(run: GithubRun, markdown: str) -> None:
    """Append `markdown` (cut to the limit) to the step's summary, when the run has one."""
    if run.summary is None:
        return
    data = cut_report(
        markdown, SUMMARY_LIMIT_BYTES, "GitHub's job summary limit",
        "`scan -o index.md` writes it whole",
    )  # fmt: skip
    try:
        with open(run.summary, "ab") as file:
            file.write(data + b"\n")
    except OSError as error:
        raise ScanOutputError(run.summary, error.strerror or str(error)) from None


@dataclass(frozen=True, slots=True)
class Annotation:
    """One workflow command, and whether it had to be left out over the step's limit."""

    level: str
    """``error`` (the group fails the job) or ``warning``."""
    command: str


def workflow_annotations(
    groups: Sequence[Group], run: GithubRun, fail_on: FailOn
) -> tuple[tuple[str, ...], int]:
    """The workflow commands for the new and regressed groups (at most 10 per level), and
    how many were left out over that limit."""
    made = [
        _annotation(group, run, fails(group, fail_on))
        for group in groups
        if mark_of(group) in (Mark.NEW, Mark.REGRESSED)
    ]
    kept: list[str] = []
    left = 0
    for level in ("error", "warning"):
        commands = [a.command for a in made if a.level == level]
        kept += commands[:ANNOTATIONS_PER_LEVEL]
        left += max(0, len(commands) - ANNOTATIONS_PER_LEVEL)
    return tuple(kept), left


def _annotation(group: Group, run: GithubRun, failing: bool) -> Annotation:
    signature = group.signature
    mark = mark_of(group)
    title = f"{mark} CUDA crash {signature.id}: {signature.exception}"
    lines = [
        f"{signature.exception} in {brief_name(group.kernel or signature.kernel)}",
        f"{group.count} dump(s); first: {group.earliest}",
    ]
    if group.lifecycle is not None:
        lines.append(group.lifecycle.detail)
    source = source_in_checkout(signature, run.workspace)
    properties = [f"title={_property(title)}"]
    if source is not None:
        properties = [f"file={_property(source[0])}", f"line={source[1]}", *properties]
    level = "error" if failing else "warning"
    message = _data("\n".join(escape_controls(line) for line in lines))
    return Annotation(level, f"::{level} {','.join(properties)}::{message}")


def source_in_checkout(signature: Signature, workspace: Path | None) -> tuple[str, int] | None:
    """The innermost frame of the signature whose file is in the checked-out repository, as
    a path relative to it and a line; None when no frame's file is there.

    A dump's paths are those of the machine that built the code, so a file is looked for by
    its path's tails (``/build/src/kernels/attn.cu`` as ``src/kernels/attn.cu``, then
    ``kernels/attn.cu``…), longest first, and only ever inside the repository; a name that
    no tail finds (``attn.cu``, as a compiler run in its folder records it) is taken when
    exactly one file of the checkout has it.
    """
    if workspace is None or not workspace.is_dir():
        return None
    root = workspace.resolve()
    for frame in signature.all_frames:
        if frame.library or frame.line <= 0:
            continue
        found = _in_checkout(frame.file, root) or _only_one_named(frame.file, root)
        if found is not None:
            return found, frame.line
    return None


def _only_one_named(file: str, root: Path) -> str | None:
    found = _files_by_name(root).get(PurePosixPath(file).name, ())
    return found[0] if len(found) == 1 else None


@functools.cache
def _files_by_name(root: Path) -> dict[str, tuple[str, ...]]:
    """The checkout's files by name (hidden folders left out), at most `MAX_CHECKOUT_FILES`."""
    found: dict[str, list[str]] = {}
    seen = 0
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in files:
            found.setdefault(name, []).append(Path(folder, name).relative_to(root).as_posix())
            seen += 1
        if seen >= MAX_CHECKOUT_FILES:
            break
    return {name: tuple(paths) for name, paths in found.items()}


def _in_checkout(file: str, root: Path) -> str | None:
    parts = [p for p in PurePosixPath(file).parts if p not in ("/", "")]
    if ".." in parts:
        return None
    for start in range(max(0, len(parts) - _MAX_SUFFIX_PARTS), len(parts)):
        candidate = root.joinpath(*parts[start:])
        try:
            if candidate.is_file() and candidate.resolve().is_relative_to(root):
                return candidate.relative_to(root).as_posix()
        except (OSError, ValueError):
            continue
    return None


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(escape_controls(text)).replace(":", "%3A").replace(",", "%2C")
