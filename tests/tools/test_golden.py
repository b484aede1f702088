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


def test_every_markdown_quote_ends_before_the_next_paragraph():
    # GitHub's lazy continuation pulls a line that follows a quote into the quote
    for path in sorted((ROOT / "tests" / "golden").glob("*.md")):
        lines = path.read_text().splitlines()
        assert lines, path
        for number, (line, following) in enumerate(zip(lines, lines[1:], strict=False), 2):
            if line.startswith(">") and following and not following.startswith(">"):
                raise AssertionError(f"{path.name}:{number}: {following[:60]}")
