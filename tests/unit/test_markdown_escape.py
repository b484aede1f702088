"""Names from a dump inside Markdown: code spans and prose never end early."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postmortem.report.render import md_cell, md_code, md_text
from tests.tooling import examples


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


@pytest.mark.parametrize(
    ("hostile", "escaped"),
    [
        ("[x](javascript:alert(1))", "\\[x](javascript:alert(1))"),
        ("![](http://evil/x.png)", "!\\[](http\\://evil/x.png)"),
        ("<http://evil>", "&lt;http\\://evil&gt;"),
        (
            "see http://evil.example and www.evil.example",
            "see http\\://evil.example and www\\.evil.example",
        ),
        ("[x][r] [r]: http://e", "\\[x]\\[r] \\[r]: http\\://e"),
        ("[^1]", "\\[^1]"),
        ("a `b` c", "a \\`b\\` c"),
        ("*a* _b_ ~c~ ~~d~~", "\\*a\\* \\_b\\_ \\~c\\~ \\~\\~d\\~\\~"),
        ("a|b", "a\\|b"),
        ("\\[x](y)", "\\\\\\[x](y)"),
        ("&#106;avascript", "&amp;#106;avascript"),
    ],
)
def test_prose_carries_no_link_image_autolink_or_emphasis(hostile, escaped):
    assert md_text(hostile) == escaped


@pytest.mark.parametrize(
    ("start", "escaped"),
    [("# h", "\\# h"), ("- x", "\\- x"), ("+ x", "\\+ x"), ("=== x", "\\=== x"),
     ("1. x", "1\\. x"), ("12) x", "12\\) x"), ("  # h", "  \\# h"), ("> q", "&gt; q")],
)  # fmt: skip
def test_a_value_cannot_start_a_heading_list_or_rule(start, escaped):
    assert md_text(start) == escaped


def test_ordinary_names_stay_readable():
    assert (
        md_text("my_kernel<float, 4>::run() in a::b") == "my_kernel&lt;float, 4&gt;::run() in a::b"
    )
    assert md_text("x - 1. a # b + c = d") == "x - 1. a # b + c = d"
    assert md_text("__syncthreads() in _Z3fooPf") == "\\_\\_syncthreads() in \\_Z3fooPf"


@pytest.mark.parametrize(
    "code",
    [0x061C, 0x200E, 0x202E, 0x2066, 0x2069, 0x2028, 0x2029, 0x85],
    ids=lambda code: f"U+{code:04X}",
)
def test_bidi_controls_and_separators_do_not_reach_markdown(code):
    hostile = f"kernel{chr(code)}exe.cu"
    for escaped in (md_code(hostile), md_cell(hostile), md_text(hostile)):
        assert chr(code) not in escaped and "kernel exe.cu" in escaped


_SYNTAX = "[`*~|\\<>"


@settings(max_examples=examples(5 / 3))
@given(
    st.lists(st.sampled_from([*_SYNTAX, "_", "!", "(", ")", "a", " ", "://", "www."])).map("".join)
)
def test_every_markdown_metacharacter_in_prose_is_escaped(text):
    escaped = md_text(text)
    assert "<" not in escaped and ">" not in escaped
    # each of [ ` * ~ | \ is preceded by an odd number of backslashes: it is a literal
    for found in re.finditer(r"(\\*)([\[`*~|])", escaped):
        assert len(found.group(1)) % 2 == 1, (text, escaped)
    assert "://" not in escaped.replace("\\://", "")


def test_a_backslash_is_escaped_only_where_it_would_escape():
    from postmortem.report.render import md_text

    assert md_text("\\x1b[2J") == "\\x1b\\[2J"  # an escaped control, shown once
    assert md_text("a\\*b") == "a\\\\\\*b"  # before punctuation: both escaped
    assert md_text("ends\\") == "ends\\\\"


def test_backquoted_parts_of_our_prose_are_code_and_the_rest_stays_text():
    from postmortem.report.render import html_prose, md_prose

    text = "run `postmortem analyze CORE --host-log LOG` on *it* <b>"
    assert md_prose(text) == ("run `postmortem analyze CORE --host-log LOG` on \\*it\\* &lt;b&gt;")
    assert str(html_prose(text)) == (
        "run <code>postmortem analyze CORE --host-log LOG</code> on *it* &lt;b&gt;"
    )
    # an unpaired backquote is text, and markup inside a code part is still escaped
    assert md_prose("a ` b") == md_text_of("a ` b")
    assert str(html_prose("`<i>`")) == "<code>&lt;i&gt;</code>"


def md_text_of(value: str) -> str:
    from postmortem.report.render import md_text

    return md_text(value)
