"""Shared test fixtures: where the committed fixtures live and what each dump planted."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest

from postmortem.errors import ToolFailed, ToolNotFound
from postmortem.tools import find_tool
from tests.schemacheck import (  # noqa: F401  (hooks: each JSON output checked by its schema)
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_sessionfinish,
)
from tests.tooling import (
    DUMPS,
    HYPOTHESIS_PROFILES,
    hypothesis_profile,
    made_once,
    session_folder,
)

for _name, _examples in HYPOTHESIS_PROFILES.items():
    # No deadline: a property test's examples share the machine with the other workers.
    hypothesis.settings.register_profile(_name, max_examples=_examples, deadline=None)
hypothesis.settings.load_profile(hypothesis_profile())

# Run inside a GitHub Actions job, `scan` would write to that job's summary and print
# annotations into every test's output: the tests that want them set these variables.
for _variable in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
    os.environ.pop(_variable, None)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def dump_paths() -> list[Path]:
    """Every committed fixture dump (plain and gzip)."""
    return sorted(
        p for p in DUMPS.iterdir() if ".nvcudmp" in p.name and not p.name.endswith(".json")
    )


def truth_of(dump: Path) -> dict[str, Any]:
    """The builder's record of what it planted in `dump`."""
    name = dump.name.split(".nvcudmp")[0]
    return json.loads((DUMPS / f"{name}.truth.json").read_text())


@pytest.fixture(params=dump_paths(), ids=lambda p: p.name)
def dump(request: pytest.FixtureRequest) -> Path:
    return request.param


CONVENTIONS = ("code", "alloc")
"""Relocated-image conventions (fixtures/builder/relocate.py): the committed dumps address
only code sections; "alloc" dumps address every SHF_ALLOC section, as other producers do."""


def build_corpus(out: Path, convention: str) -> Path:
    """Build every fixture dump into `out` under a relocation convention (under a second)."""
    builder = FIXTURES / "builder" / "build_dumps.py"
    subprocess.run(
        [sys.executable, str(builder), "--out", str(out), "--convention", convention],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def alloc_dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole fixture corpus built with `--convention alloc`, once for the session's
    workers; its truth files are the committed ones."""
    folder = session_folder(tmp_path_factory) / "dumps-alloc"
    with made_once(folder) as made:
        if not made:
            build_corpus(folder, "alloc")
    return folder


@pytest.fixture(
    params=[c if c == "code" else pytest.param(c, marks=pytest.mark.slow) for c in CONVENTIONS]
)
def corpus(request: pytest.FixtureRequest) -> Path:
    """The directory of the fixture dumps under each relocation convention in turn: the
    committed ("code") dumps in the default run, the others in the slow tier, which CI runs
    (tests/tools/test_disasm_fallback.py compares the two conventions in the default run)."""
    if request.param == "code":
        return DUMPS
    return request.getfixturevalue("alloc_dumps")  # type: ignore[no-any-return]


@pytest.fixture(params=["small", "bulk"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test with dumps read both ways: as small dumps (Python lists) and in bulk
    (numpy columns), whatever their size."""
    if request.param == "bulk":
        monkeypatch.setattr("postmortem.elf.SMALL_TABLE", 0)
    return str(request.param)


@pytest.fixture(scope="session", autouse=True)
def own_cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's own $XDG_CACHE_HOME, shared by its workers: what the commands keep
    (scan caches, nvdisasm listings, compiled templates) never comes from, nor goes to, the
    cache of the user running the tests."""
    folder = session_folder(tmp_path_factory) / "xdg-cache"
    folder.mkdir(exist_ok=True)
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(folder))
    yield folder
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def one_nvdisasm_run_per_function(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The analysis's nvdisasm runs remembered for the whole session: each (cubin, function,
    nvdisasm) is disassembled by the real tool once, the first time a test asks, and later
    tests get that run's result; a refusal is remembered like a listing. What a run gave is
    kept in memory and in a folder the session's processes share (the xdist workers, and
    the scan workers they fork), so one process's run serves them all.

    Only the nvdisasm found on the PATH is remembered: a test that names a tool of its own (a
    wrapper that counts, refuses or stalls) runs it every time. The adapter itself
    (`postmortem.cubin.nvdisasm.disassemble`, which tests/tools/test_nvdisasm_run.py and the
    store tests call directly) is untouched.
    """
    from postmortem.analysis.fault import disassembly

    real = disassembly.disassemble
    folder = session_folder(tmp_path_factory) / "nvdisasm-runs"
    folder.mkdir(exist_ok=True)
    memo: dict[str, Any] = {}
    try:
        found_on_path = find_tool("nvdisasm")
    except ToolNotFound:
        found_on_path = None

    def remembered(cubin: bytes, symbol_index: int | None, **options: Any) -> Any:
        named = options.get("nvdisasm")
        if named is not None and Path(named) != found_on_path:
            return real(cubin, symbol_index, **options)  # a test's own nvdisasm runs always
        # One tool (the PATH's, named or not), so the key need not name it.
        digest = hashlib.blake2b(cubin, digest_size=16)
        digest.update(repr((symbol_index, float(options.get("timeout", 0.0)))).encode())
        key = digest.hexdigest()
        found = memo.get(key) or _read_run(folder / key)
        if found is None:
            try:
                found = ("ran", real(cubin, symbol_index, **options))
            except ToolFailed as error:
                if error.returncode is None or error.returncode < 0:
                    raise  # a timeout or a kill says nothing about the next run
                found = ("refused", error)
            _write_run(folder / key, found)
        memo[key] = found
        if found[0] == "refused":
            raise found[1]
        return found[1]

    patch = pytest.MonkeyPatch()
    patch.setattr(disassembly, "disassemble", remembered)
    yield
    patch.undo()


def _read_run(path: Path) -> tuple[str, Any] | None:
    try:
        kind, value = pickle.loads(path.read_bytes())
    except (OSError, EOFError, pickle.UnpicklingError):
        return None
    # An error's dataclass fields, not the error: exceptions pickle by their args.
    return (kind, ToolFailed(**value)) if kind == "refused" else (kind, value)


def _write_run(path: Path, found: tuple[str, Any]) -> None:
    kind, value = found
    record = (kind, dataclasses.asdict(value) if kind == "refused" else value)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(pickle.dumps(record))
    partial.replace(path)
