"""Which CI run, attempt and job a dump came from, read off the folders of a CI artifact.

A CI system keeps the dumps of each failing job as an artifact, and a downloaded artifact
is a folder named after it: GitHub's ``gh run download RUN`` writes one folder per artifact
name, and workflows name their coredump artifacts with the run id and attempt
(``${{ github.run_id }}-${{ github.run_attempt }}``) so that a re-run does not collide
with the first attempt. Folders laid out by run and attempt (``123456789/2/``,
``run-123456789/attempt-2/``) are read too. A run id is a number of six digits or more; an
attempt, of one to three. What the folder name holds before the run id, less a leading
``cuda-coredump(s)`` word, is the job's name.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePath

from postmortem.scan.group import Group
from postmortem.scan.row import DumpRow
from postmortem.urls import absolute_path

_IN_ONE = re.compile(
    r"(?P<job>.*?)[-_.]?(?:run[-_]?)?(?P<run>\d{6,20})[-_.](?:attempt[-_]?)?(?P<attempt>\d{1,3})",
    re.IGNORECASE,
)
_RUN = re.compile(r"(?:run[-_]?)?(?P<run>\d{6,20})", re.IGNORECASE)
_ATTEMPT = re.compile(r"(?:attempt[-_]?)?(?P<attempt>\d{1,3})", re.IGNORECASE)
_ARTIFACT_WORD = re.compile(r"(?:cuda[-_]?)?core[-_]?dumps?[-_]*", re.IGNORECASE)
_MAX_PARTS = 16


@dataclass(frozen=True, slots=True)
class CiRun:
    """One attempt of one CI run."""

    run_id: str
    attempt: int
    job: str | None
    """The job's name as the artifact's folder gives it; None when it gives none."""

    @property
    def label(self) -> str:
        job = f" {self.job}" if self.job else ""
        return f"run {self.run_id} attempt {self.attempt}{job}"


def ci_run(relative: PurePath) -> CiRun | None:
    """The run a dump at `relative` (its path under the scanned folder) came from, by its
    folders; None when they name none."""
    folders = relative.parts[:-1][-_MAX_PARTS:]
    for index, name in enumerate(folders):
        match = _IN_ONE.fullmatch(name)
        if match:
            return CiRun(match["run"], int(match["attempt"]), _job(match["job"]))
        run = _RUN.fullmatch(name)
        attempt = _ATTEMPT.fullmatch(folders[index + 1]) if index + 1 < len(folders) else None
        if run and attempt:
            job = _job(folders[index - 1]) if index > 0 else None
            return CiRun(run["run"], int(attempt["attempt"]), job)
    return None


def _job(text: str) -> str | None:
    job = _ARTIFACT_WORD.sub("", text, count=1).strip("-_. ")
    return job or None


def with_runs(
    groups: Sequence[Group], rows: Sequence[DumpRow], roots: Sequence[Path | str]
) -> tuple[Group, ...]:
    """`groups` with the CI runs their dumps came from, where the folders say."""
    bases = sorted((absolute_path(root) for root in roots), key=len, reverse=True)
    runs: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row.signature is None or row.failed:
            continue
        found = ci_run(_under(absolute_path(row.path), bases))
        if found is not None:
            runs[row.signature.id].add(found.label)
    return tuple(replace(g, runs=tuple(sorted(runs.get(g.signature.id, ())))) for g in groups)


def _under(path: str, bases: Sequence[str]) -> PurePath:
    for base in bases:
        if path.startswith(base.rstrip("/") + "/"):
            return PurePath(path[len(base.rstrip("/")) + 1 :])
    return PurePath(path)
