"""The cross-check as the product runs it: agreement where cuda-gdb can read the dump,
a plain explanation where it cannot, never a false disagreement."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from postmortem import open_coredump
from postmortem.analysis.crosscheck import crosscheck, gdb_cannot_read
from postmortem.gdb import run_cuda_gdb
from postmortem.summary import summarize
from tests.conftest import dump_paths, truth_of
from tests.tooling import require_tool

CHECKABLE = [p for p in dump_paths() if truth_of(p)["cuda_gdb_checkable"]["value"]]
UNREADABLE = [p for p in dump_paths() if not truth_of(p)["cuda_gdb_checkable"]["value"]]


@cache
def _check(path: Path):
    session = run_cuda_gdb(path, cuda_gdb=require_tool("cuda-gdb"), timeout=120)
    with open_coredump(path) as core:
        return crosscheck(core, session)


@pytest.mark.parametrize("path", CHECKABLE, ids=lambda p: p.name)
def test_cuda_gdb_agrees_on_every_fact_it_states(path):
    result = _check(path)
    assert result.opened
    assert result.disagreements == ()
    facts = {c.fact for c in result.agreements}
    assert "kernels" in facts
    assert any(f.startswith("lanes of") for f in facts)
    if truth_of(path)["faulting_lanes"]:
        assert {"exception", "focus is a faulting lane", "kernel + offset of the error PC"} <= facts


@pytest.mark.parametrize("path", UNREADABLE, ids=lambda p: p.name)
def test_a_dump_cuda_gdb_cannot_read_is_explained_not_contradicted(path):
    # The product asks first (gdb_cannot_read) and does not run cuda-gdb 11.8 on longer rows:
    # on a hang, with no exception to stop at, 11.8 opens them and misreads the tables.
    with open_coredump(path) as core:
        refused = gdb_cannot_read("11.8", summarize(core))
    result = _check(path)
    assert result.disagreements == ()
    assert refused or result.notes, "a refusal must come with its reason"
    if result.opened and result.longer_rows:
        assert refused and "longer" in refused
