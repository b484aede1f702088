"""Every `postmortem …` command of the README and the manual (docs/) runs as written.

The commands of their shell blocks (```sh, and ```console's lines that start with `$ `; a line
ending in a backslash goes on) are collected and run in-process, from a folder where
`fixtures` is the checkout's and each placeholder file the pages name (PLACEHOLDERS:
`core.nvcudmp`, `DIR/…`) is a copy of a bundled fixture. Each must exit as the pages promise
(0 unless EXIT_STATUS says otherwise). A console block also shows what the command prints:
its first lines must come out of the command in order (a line ending in `…` is a prefix, a
time in seconds is any time, a line of `...` stands for lines left out, lines naming cuda-gdb
are not compared: they depend on the machine's cuda-gdb). The ```python blocks run too, from
the same folder.

A command that cannot run here is listed in NOT_HERE with the reason; a new one that is
neither runnable nor listed fails `test_every_example_is_run_or_said_why_not`. A command
line is run once, however many pages show it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.tooling import invoke, require_tool

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PLACEHOLDERS = {
    # docs/python.md's dump
    "core.nvcudmp": "fixtures/dumps/oob_store.nvcudmp",
    # docs/agent-skill.md's capture folder: a dump as `capture` names it, and its host log
    "DIR/core_HOST.PID.TIME.nvcudmp": "fixtures/dumps/oob_store.nvcudmp",
    "DIR/host.PID.log": "fixtures/real/oob_store_real.host.log",
}
"""The files the pages name in place of the reader's own, and the fixture each one is."""
NOT_HERE = {
    # The install blocks run in a fresh venv: tests/tools/test_packaging.py (the slow tier).
    ".venv-postmortem/bin/postmortem": "an install block, run by test_packaging.py",
    ".venv-build/bin/postmortem": "an install block, run by test_packaging.py",
    # A live process is what these act on.
    "postmortem trigger --pid": "needs a live process that holds a coredump pipe",
    "postmortem capture --dir dumps --": "runs a serving engine on a GPU",
    # docs/ci.md's lifecycle, with the ids a scan of CI artifacts gave: test_scan_ci.py runs
    # it step by step against a folder laid out as download-artifact leaves it.
    "postmortem scan artifacts/": "CI artifacts: run by test_scan_ci.py",
    "postmortem triage resolve 3f2a9c": "an id from a scan of CI artifacts (test_scan_ci.py)",
    "postmortem triage ignore 77c0de": "an id from a scan of CI artifacts (test_scan_ci.py)",
    "postmortem triage reopen 3f2a9c": "an id from a scan of CI artifacts (test_scan_ci.py)",
}
"""The starts of the command lines that cannot run here, each with the reason."""
EXIT_STATUS: dict[str, int] = {}
"""Examples that exit otherwise than 0 (by their argument list, joined), and their status."""
SHOWN_LINES = 12
"""How many lines of a console block's output are compared."""
DATA_BLOCKS = ("python", "toml", "yaml", "json")
"""Blocks that are not a shell's (docs/ci.md's workflow step is run by test_scan_ci.py)."""


@dataclass(frozen=True)
class Example:
    page: str
    kind: str
    """The block's language: sh or console (anything else fails a test)."""
    line: str
    shown: tuple[str, ...]
    """The output the page shows under it (console blocks only)."""

    @property
    def id(self) -> str:
        return f"{self.page}: {self.line[:70]}"


def _blocks(page: Path) -> list[tuple[str, str]]:
    """The fenced blocks of a page: (language, body)."""
    text = page.read_text(encoding="utf-8")
    return re.findall(r"^```(\S*)\n(.*?)^```", text, flags=re.S | re.M)


def _examples() -> list[Example]:
    found = []
    for page in PAGES:
        for kind, body in _blocks(page):
            if kind in DATA_BLOCKS:
                continue
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
                found.append(Example(page.name, kind, line, shown))
    return found


EXAMPLES = _examples()
PYTHON = [
    (page.name, at, body)
    for page in PAGES
    for at, (kind, body) in enumerate(b for b in _blocks(page) if b[0] == "python")
]


def _reason_not_run(example: Example) -> str | None:
    return next((why for start, why in NOT_HERE.items() if example.line.startswith(start)), None)


RUNNABLE = [e for e in EXAMPLES if _reason_not_run(e) is None]


def test_every_example_is_run_or_said_why_not():
    # The pages hold examples, and each one runs below unless NOT_HERE says why not.
    assert len(RUNNABLE) >= 15
    assert all(_reason_not_run(e) or e in RUNNABLE for e in EXAMPLES)
    unused = [start for start in NOT_HERE if not any(e.line.startswith(start) for e in EXAMPLES)]
    assert not unused, f"NOT_HERE names examples no page has any more: {unused}"
    unlabelled = [e.id for e in EXAMPLES if e.kind not in ("sh", "console")]
    assert not unlabelled, (
        f"label these blocks ```sh (or ```console, with its output): {unlabelled}"
    )


def test_every_placeholder_is_a_file_the_pages_name():
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    assert [name for name in PLACEHOLDERS if name not in text] == []
    assert [f for f in PLACEHOLDERS.values() if not (ROOT / f).is_file()] == []


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder with the checkout's fixtures, the placeholder files, and a cache and settings
    of its own; no coredump variable of the machine's."""
    folder = tmp_path_factory.mktemp("docs-examples")
    (folder / "fixtures").symlink_to(ROOT / "fixtures")
    for name, fixture in PLACEHOLDERS.items():
        # Copies, not links: scan does not follow a link out of the folder it scans.
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / fixture, folder / name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder / "cache"))
        patch.setenv("XDG_CONFIG_HOME", str(folder / "config"))
        for name in [n for n in os.environ if n.startswith("CUDA_")]:
            patch.delenv(name)
        yield folder


def _argv(line: str) -> tuple[list[str], str | None]:
    """The arguments after `postmortem`, and the file a `>` sends standard output to."""
    words = shlex.split(line, comments=True)
    target = None
    if ">" in words:
        at = words.index(">")
        words, target = words[:at], words[at + 1]
    return words[1:], target


_RUNS: dict[tuple[Path, str], types.SimpleNamespace] = {}


def _run(args: list[str], target: str | None, workdir: Path) -> types.SimpleNamespace:
    """The command's run, made once per command line (several pages show the same one)."""
    key = (workdir, shlex.join([*args, *([">", target] if target else [])]))
    if key not in _RUNS:
        ran = invoke(*args, cwd=workdir)
        if target is not None:
            (workdir / target).write_text(ran.stdout, encoding="utf-8")
        _RUNS[key] = ran
    return _RUNS[key]


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
    ran = _run(args, target, workdir)
    assert ran.returncode == EXIT_STATUS.get(shlex.join(args), 0), ran.stderr
    if target is not None:
        assert ran.stdout
    out = iter(ran.stdout.splitlines())
    wanted = [
        s for s in example.shown[:SHOWN_LINES]
        if s.strip() not in ("", "...", "…") and "cuda-gdb" not in s
    ]  # fmt: skip
    for shown in wanted:
        pattern = _pattern(shown)
        assert any(pattern.match(line) for line in out), f"not printed (in order): {shown!r}"


@pytest.mark.parametrize(
    ("page", "at", "body"), PYTHON, ids=[f"{page}: block {at + 1}" for page, at, _ in PYTHON]
)
def test_a_python_example_runs_as_written(page, at, body, workdir, monkeypatch, capsys):
    require_tool("nvdisasm")
    monkeypatch.chdir(workdir)
    exec(compile(body, f"{page} (python block {at + 1})", "exec"), {"__name__": "__docs__"})
    assert capsys.readouterr().out or "print(" not in body
