"""Every `postmortem …` command of the README and the manual (docs/) runs as written.

The commands of their ```sh and ```console blocks are collected (a console block's lines
that start with `$ `; a line ending in a backslash goes on), run in-process from a folder
where `fixtures` is the checkout's, and must exit as the command line says it does (0 unless
listed below). A console block also shows what the command prints: its first lines must
come out of the command in order (a line ending in `…` is a prefix, a time in seconds is any
time, a line of `...` stands for lines left out, lines naming cuda-gdb are not compared:
they depend on the machine's cuda-gdb).

A command that cannot run here is listed in NOT_HERE with the reason; a new one that is
neither runnable nor listed fails `test_every_example_is_run_or_said_why_not`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.tooling import invoke, require_tool

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NOT_HERE = {
    # The install blocks run in a fresh venv: tests/tools/test_packaging.py (the slow tier).
    ".venv-postmortem/bin/postmortem": "an install block, run by test_packaging.py",
    ".venv-build/bin/postmortem": "an install block, run by test_packaging.py",
    # A live process is what these act on.
    "postmortem trigger --pid": "needs a live process that holds a coredump pipe",
    "postmortem capture --dir dumps --": "runs a serving engine on a GPU",
    # Written with the user's own names (DIR, PID) in place of paths.
    "postmortem analyze DIR/": "a placeholder for the user's own dump folder",
    "postmortem scan DIR ": "a placeholder for the user's own dump folder",
    # docs/ci.md's lifecycle, with the ids a scan of CI artifacts gave: test_scan_ci.py runs
    # it step by step against a folder laid out as download-artifact leaves it.
    "postmortem scan artifacts/": "CI artifacts: run by test_scan_ci.py",
    "postmortem triage resolve 3f2a9c": "an id from a scan of CI artifacts (test_scan_ci.py)",
    "postmortem triage ignore 77c0de": "an id from a scan of CI artifacts (test_scan_ci.py)",
    "postmortem triage reopen 3f2a9c": "an id from a scan of CI artifacts (test_scan_ci.py)",
}
EXIT_STATUS: dict[str, int] = {}
"""Examples that exit otherwise than 0, and their status."""
SHOWN_LINES = 12
"""How many lines of a console block's output are compared."""


@dataclass(frozen=True)
class Example:
    page: str
    line: str
    shown: tuple[str, ...]
    """The output the page shows under it (console blocks only)."""

    @property
    def id(self) -> str:
        return f"{self.page}: {self.line[:70]}"


def _examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for kind, body in re.findall(r"^```(sh|console)\n(.*?)^```", text, flags=re.S | re.M):
            lines = re.sub(r"\\\n\s*", " ", body).splitlines()
            for at, raw in enumerate(lines):
                line = raw.strip()
                if kind == "console":
                    if not line.startswith("$ "):
                        continue
                    line = line[2:]
                if not re.match(r"^(\S*/)?postmortem\s", line):
                    continue
                shown: tuple[str, ...] = ()
                if kind == "console":
                    rest = lines[at + 1 :]
                    end = next((i for i, x in enumerate(rest) if x.startswith("$ ")), len(rest))
                    shown = tuple(rest[:end])
                found.append(Example(page.name, line, shown))
    return found


EXAMPLES = _examples()


def _reason_not_run(example: Example) -> str | None:
    return next((why for start, why in NOT_HERE.items() if example.line.startswith(start)), None)


RUNNABLE = [e for e in EXAMPLES if _reason_not_run(e) is None]


def test_every_example_is_run_or_said_why_not():
    # The pages hold examples, and each one runs below unless NOT_HERE says why not.
    assert len(RUNNABLE) >= 10
    assert all(_reason_not_run(e) or e in RUNNABLE for e in EXAMPLES)
    unused = [start for start in NOT_HERE if not any(e.line.startswith(start) for e in EXAMPLES)]
    assert not unused, f"NOT_HERE names examples no page has any more: {unused}"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the checkout's fixtures, and a cache and settings of its own."""
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in [n for n in __import__("os").environ if n.startswith("CUDA_")]:
        monkeypatch.delenv(name)
    return tmp_path


def _argv(line: str) -> tuple[list[str], str | None]:
    """The arguments after `postmortem`, and the file a `>` sends standard output to."""
    words = shlex.split(line, comments=True)
    target = None
    if ">" in words:
        at = words.index(">")
        words, target = words[:at], words[at + 1]
    return words[1:], target


def _pattern(shown: str) -> re.Pattern[str]:
    text = shown.rstrip()
    prefix = text.endswith("…")
    escaped = re.escape(text.removesuffix("…").rstrip())
    escaped = re.sub(r"\d+(?:\\\.\d+)?\\ s\b", r"[0-9.]+\\ s", escaped)  # any time
    return re.compile("^" + escaped + ("" if prefix else "$"))


@pytest.mark.parametrize("example", RUNNABLE, ids=lambda e: e.id)
def test_an_example_runs_as_written(example, workdir):
    require_tool("nvdisasm")
    args, target = _argv(example.line)
    ran = invoke(*args, cwd=workdir)
    assert ran.returncode == EXIT_STATUS.get(example.line, 0), ran.stderr
    if target is not None:
        (workdir / target).write_text(ran.stdout, encoding="utf-8")
        assert ran.stdout
    out = iter(ran.stdout.splitlines())
    wanted = [
        s for s in example.shown[:SHOWN_LINES]
        if s.strip() not in ("", "...", "…") and "cuda-gdb" not in s
    ]  # fmt: skip
    for shown in wanted:
        pattern = _pattern(shown)
        assert any(pattern.match(line) for line in out), f"not printed (in order): {shown!r}"
