"""Names from a dump inside Markdown: code spans and prose never end early."""

from __future__ import annotations

import pytest

from postmortem.report.render import md_cell, md_code, md_text


@pytest.mark.parametrize("ending", ["\n", "\r", "\r\n", "\x0b", "\x00"])
def test_no_line_ending_or_control_survives(ending):
    hostile = f"ho{ending}<div onmouseover=alert(1)>st"
    for escaped in (md_code(hostile), md_cell(hostile), md_text(hostile)):
        assert not any(ord(c) < 0x20 for c in escaped)


def test_backticks_get_a_longer_fence():
    assert md_code("a``b") == "```a``b```"


def test_prose_escapes_html():
    assert md_text("<script>&") == "&lt;script&gt;&amp;"


def test_cells_escape_pipes():
    assert md_cell("a|b") == "`a\\|b`"
