"""Which CI run, attempt and job a dump came from, read off the folders it was found in.

Two layouts are read, from the folder names alone:

- **The runner's dump folder**, as SGLang's CI makes it
  (`python/sglang/srt/debug_utils/cuda_coredump.py`, `.github/actions/upload-cuda-coredumps`):
  ``<run id>-<attempt>/cuda_coredump_<host>.<pid>.<time>``; also ``<run id>/<attempt>/`` and
  ``run-<run id>/attempt-<attempt>/``, and a name that holds both after the job's
  (``cuda-coredumps-<job>-<run id>-<attempt>``, the artifact name docs/ci.md suggests).
- **A downloaded artifact**: ``gh run download RUN`` writes one folder per artifact name, and
  SGLang names its coredump artifacts ``cuda-coredumps-<job>[-<partition>]``: the folder names
  the job; the run is that of a folder above it named by its number, when there is one.

A run id is a number of six digits or more (GitHub's are ten and more); an attempt, of one to
three digits. A group lists every run, attempt and job its dumps came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePath

from postmortem.scan.fleet.group import Group, rows_by_signature
from postmortem.scan.row import DumpRow
from postmortem.urls import absolute_path

_RUN_ATTEMPT = re.compile(
    r"(?:(?P<job>.*?)[-_.])?(?:run[-_]?)?(?P<run>\d{6,20})[-_.](?:attempt[-_]?)?(?P<attempt>\d{1,3})",
    re.IGNORECASE,
)
_RUN = re.compile(r"(?:run[-_]?)?(?P<run>\d{6,20})", re.IGNORECASE)
_ATTEMPT = re.compile(r"(?:attempt[-_]?)?(?P<attempt>\d{1,3})", re.IGNORECASE)
_ARTIFACT = re.compile(r"cuda[-_]?core[-_]?dumps?[-_]+(?P<job>.+)", re.IGNORECASE)
_ARTIFACT_WORD = re.compile(r"(?:cuda[-_]?)?core[-_]?dumps?[-_]*", re.IGNORECASE)
_MAX_PARTS = 16


@dataclass(frozen=True, slots=True)
class CiRun:
    """Where a dump came from, as far as its folders say."""

    run_id: str | None
    attempt: int | None
    job: str | None
    """The job's name (with SGLang's partition) as the artifact's folder gives it."""

    @property
    def label(self) -> str:
        parts = [f"run {self.run_id}"] if self.run_id else []
        parts += [f"attempt {self.attempt}"] if self.attempt is not None else []
        parts += [f"job {self.job}"] if self.job else []
        return " ".join(parts)


def ci_run(relative: PurePath) -> CiRun | None:
    """The run a dump at `relative` (its path under the scanned folder) came from, by its
    folders; None when they name none."""
    folders = relative.parts[:-1][-_MAX_PARTS:]
    run: str | None = None
    attempt: int | None = None
    job: str | None = None
    for index, name in enumerate(folders):
        artifact = _ARTIFACT.fullmatch(name)
        both = _RUN_ATTEMPT.fullmatch(name)
        alone = _RUN.fullmatch(name)
        if both:
            run, attempt = both["run"], int(both["attempt"])
            job = _job(both["job"] or "") or job
        elif artifact:
            job = _job(artifact["job"])
        elif alone:
            run = alone["run"]
            after = folders[index + 1] if index + 1 < len(folders) else ""
            found = _ATTEMPT.fullmatch(after)
            attempt = int(found["attempt"]) if found else attempt
    if run is None and job is None:
        return None
    return CiRun(run, attempt, job)


def _job(text: str) -> str | None:
    job = _ARTIFACT_WORD.sub("", text, count=1).strip("-_. ")
    return job or None


def with_runs(
    groups: Sequence[Group], rows: Sequence[DumpRow], roots: Sequence[Path | str]
) -> tuple[Group, ...]:
    """`groups` with the CI runs their dumps came from, where the folders say."""
    bases = sorted((absolute_path(root) for root in roots), key=len, reverse=True)
    runs = {
        sid: sorted({found.label for row in members if (found := _run_of(row.path, bases))})
        for sid, members in rows_by_signature(rows).items()
    }
    return tuple(replace(g, runs=tuple(runs.get(g.signature.id, ()))) for g in groups)


def _run_of(path: str, bases: Sequence[str]) -> CiRun | None:
    return ci_run(_under(absolute_path(path), bases))


def _under(path: str, bases: Sequence[str]) -> PurePath:
    for base in bases:
        if path.startswith(base.rstrip("/") + "/"):
            return PurePath(path[len(base.rstrip("/")) + 1 :])
    return PurePath(path)
