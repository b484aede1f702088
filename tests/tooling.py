"""Helpers for tests that need external tools or recorded transcripts.

`require_tool` is drgn's switch: a missing tool skips the test with the reason, except under
``CI=true``, where it fails (CI promises the tools are installed).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import termios
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from postmortem.errors import ToolNotFound
from postmortem.tools import find_tool

REPO = Path(__file__).resolve().parent.parent
TRANSCRIPTS = REPO / "fixtures" / "transcripts"
# POSTMORTEM_FIXTURE_DUMPS: a private build of the fixture dumps (build_dumps.py --out DIR).
DUMPS = Path(os.environ.get("POSTMORTEM_FIXTURE_DUMPS") or REPO / "fixtures" / "dumps")
_META_KEYS = ("# source:", "# tool-version:", "# note:")


def in_ci() -> bool:
    """True when the environment says this is CI (``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() == "true"


HYPOTHESIS_PROFILES = {"dev": 100, "ci": 300, "deep": 3000}
"""Hypothesis's examples per property test in each profile: "dev" for the test command on a
developer's machine, "ci" under CI=true, "deep" for a long search (HYPOTHESIS_PROFILE=deep).
tests/conftest.py loads one; a test whose examples cost more or less than most asks for a
share of it (`examples`)."""


def hypothesis_profile() -> str:
    """The profile HYPOTHESIS_PROFILE names, else "ci" under CI=true, else "dev"."""
    return os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if in_ci() else "dev")


def examples(share: float) -> int:
    """A share of the loaded profile's examples per test (at least 10)."""
    from hypothesis import settings  # noqa: PLC0415 (the profile is loaded by then)

    return max(10, round(settings.default.max_examples * share))


def session_folder(factory: pytest.TempPathFactory) -> Path:
    """A folder of this session's, shared by its xdist workers: their base temporary folders
    sit side by side in the session's own."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def made_once(folder: Path) -> Iterator[bool]:
    """Held while `folder` is being made by one process of the session: yields False to the
    first, which makes it (and marks it made when its block ends without an error), and True
    to those that come after, once it is made."""
    folder.mkdir(parents=True, exist_ok=True)
    # Beside the folder, not in it: a corpus folder holds its dumps only.
    done = folder.with_name(f"{folder.name}.made")
    with open(folder.with_name(f"{folder.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            yield True
            return
        yield False
        done.touch()


def require_tool(name: str) -> Path:
    """Returns the path of an external tool, or skips the test (fails under CI=true)."""
    try:
        return find_tool(name)
    except ToolNotFound as exc:
        message = f"{exc}; hint: {exc.hint}"
        if in_ci():
            pytest.fail(f"CI=true and a required tool is missing: {message}")
        pytest.skip(message)


def require_nvcc() -> Path:
    """The nvcc of the fixtures extra (the `nvidia-cuda-nvcc` wheel, as `make fixtures` finds
    it), or a skip (a failure under CI=true)."""
    sys.path.insert(0, str(REPO / "fixtures" / "builder"))
    import sites  # noqa: PLC0415 (the fixture builder is not a package)

    try:
        return Path(sites.find_wheel_tool("nvcc", "cu13", "PM_NVCC"))
    except FileNotFoundError as error:
        if in_ci():
            pytest.fail(f"CI=true and nvcc is missing: {error}")
        pytest.skip(str(error))


def require_module(name: str, why: str) -> types.ModuleType:
    """Imports a test-only package, or skips the test (fails under CI=true, whose setup
    installs the dev extra)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        if in_ci():
            pytest.fail(f"CI=true and {name} is missing: {why}")
        pytest.skip(f"{name} is missing: {why}")


def require_files(paths: list[Path], what: str) -> list[Path]:
    """Returns `paths` when there are any; otherwise skips (fails under CI=true)."""
    if paths:
        return paths
    if in_ci():
        pytest.fail(f"CI=true and there are no {what}")
    pytest.skip(f"no {what} yet")


def load_transcript(path: Path) -> tuple[dict[str, str], str]:
    """Splits a transcript file into its ``# key:`` header lines and the raw tool output."""
    meta: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").split("\n")
    while lines and lines[0].startswith(_META_KEYS):
        key, _, value = lines.pop(0)[2:].partition(":")
        meta[key.strip()] = value.strip()
    return meta, "\n".join(lines)


def run_on_terminal(
    argv: list[str],
    *,
    stream: str = "stdout",
    env: dict[str, str] | None = None,
    raw_newlines: bool = False,
    timeout: float = 300,
) -> tuple[int, bytes]:
    """Run `argv` with its `stream` ("stdout" or "stderr") on a pseudo-terminal, the other
    discarded; returns its exit status and everything it wrote to the terminal.

    `raw_newlines` turns off the terminal's newline translation (ONLCR), so that what the
    program wrote comes back byte for byte.
    """
    leader, follower = os.openpty()
    if raw_newlines:
        attributes = termios.tcgetattr(follower)
        attributes[1] &= ~termios.ONLCR
        termios.tcsetattr(follower, termios.TCSANOW, attributes)
    streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: follower}
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, **streams)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the program
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return process.wait(timeout=timeout), seen


def invoke(
    *args: object,
    env: dict[str, str | None] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | bytes | None = None,
) -> types.SimpleNamespace:
    """Runs the `postmortem` command line in this process (click's runner), as a user would
    from the current folder (or from `cwd`): the exit status, stdout and stderr apart.

    `env` sets (a value of None: removes) environment variables for the run only; `input` is
    what standard input holds. An exception that escapes the command is raised here, not
    caught, so that it fails the test as a traceback on stderr would. stdout and stderr are
    the bytes written, decoded as UTF-8 as they are: no newline is translated (a raw CR stays
    in sight) and a byte that is not UTF-8 raises.
    """
    from click.testing import CliRunner

    from postmortem.cli import main

    runner = CliRunner()
    previous = os.getcwd() if cwd is not None else None
    try:
        if cwd is not None:
            os.chdir(cwd)
        result = runner.invoke(
            main, [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in args],
            input=input, env=env, catch_exceptions=False,
        )  # fmt: skip
    finally:
        if previous is not None:
            os.chdir(previous)
    return types.SimpleNamespace(
        returncode=result.exit_code,
        stdout=result.stdout_bytes.decode("utf-8"),
        stderr=result.stderr_bytes.decode("utf-8"),
    )
