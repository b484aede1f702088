"""Reports equal their reviewed golden files (regenerate with `make golden`)."""

from __future__ import annotations

import pytest

from tests.golden import CASES, ROOT, golden_path, render_case
from tests.tooling import require_tool


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_report_matches_its_golden_files(case, monkeypatch):
    require_tool("nvdisasm")
    if case.cuda_gdb:
        require_tool("cuda-gdb")
    monkeypatch.chdir(ROOT)
    for fmt, text in render_case(case).items():
        expected = golden_path(case, fmt).read_text(encoding="utf-8")
        assert text == expected, f"{golden_path(case, fmt).name} differs: run `make golden`"
