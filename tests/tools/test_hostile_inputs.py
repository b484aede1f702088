"""The hostile inputs of the campaign (bench/hostile_inputs.py), each as the whole command a
user runs: its check holds (no secret leaked, no file written, a lost exception never called
None, the right exit status, no traceback). Times and memory are the bench's to print, not
asserted here; each case also has its own tests, named in its docstring."""

from __future__ import annotations

import sys

import pytest

from tests.tooling import REPO

sys.path.insert(0, str(REPO / "bench"))
from hostile_inputs import INPUT_CASES, run_case  # noqa: E402

pytestmark = pytest.mark.slow  # each case is a whole command, some with big inputs


@pytest.mark.parametrize("name", sorted(INPUT_CASES))
def test_a_hostile_input_keeps_its_check(name, tmp_path):
    _, _, code, first, problem = run_case(INPUT_CASES[name], tmp_path / "case")
    assert problem is None, f"{name}: {problem} (exit {code}; {first})"
