"""An environment check said in words: what a crash and a hang would leave, then the problems.

`postmortem capture --check` prints `describe_check`; `--print-env` and a capture that starts
print `problem_lines`. The facts are `checks.EnvironmentCheck`'s; only the words are here.
"""

from __future__ import annotations

import os

from postmortem.capture.checks import (
    USER_TRIGGER,
    DumpContents,
    DumpPlace,
    EnvironmentCheck,
)


def describe_check(check: EnvironmentCheck) -> list[str]:
    """The verdict in lines: what a crash and a hang would leave, then each problem."""
    lines = [f"on a GPU exception: {_crash_text(check)}", f"on a hang: {_hang_text(check)}"]
    if check.on_exception or check.on_demand:
        lines.append(f"dump contents: {_contents_text(check.contents)}")
    return lines + problem_lines(check)


def problem_lines(check: EnvironmentCheck) -> list[str]:
    """One line per problem: ``error: MESSAGE (fix: FIX)``."""
    return [f"{p.severity.value}: {p.message} (fix: {p.fix})" for p in check.problems]


def _crash_text(check: EnvironmentCheck) -> str:
    if not check.on_exception:
        return "no dump is written (see the errors below)"
    said = "its path logged" if check.shows_progress else "its path not logged"
    return f"a dump is written as {_where(check.dump)} ({said})"


def _hang_text(check: EnvironmentCheck) -> str:
    if check.on_demand:
        return (
            f"`postmortem trigger --pid PID` dumps it through the pipe {_where(check.pipe)}; "
            f"the dump is written as {_where(check.dump)}"
        )
    if check.hang_asked:
        return "no dump can be triggered (see the errors below)"
    return f"no dump can be triggered ({USER_TRIGGER} is not 1; `capture --hang` sets it)"


def _where(place: DumpPlace) -> str:
    name = os.path.basename(place.pattern)
    return f"{place.folder}/{name}" if place.folder is not None else place.pattern


def _contents_text(contents: DumpContents) -> str:
    text = f"{contents.kind.value}: keeps {', '.join(contents.kept)}"
    if contents.skipped:
        text += f"; leaves out {', '.join(contents.skipped)}"
    if contents.compressed:
        text += "; gzip-compressed (CUDA 13.1 or later)"
    if not contents.aborts:
        text += "; the process goes on after the dump (skip_abort)"
    return text
