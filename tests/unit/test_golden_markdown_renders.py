"""The golden Markdown reports as GitHub renders them (cmark-gfm with GitHub's extensions):
every heading a heading, every fence a code block, every quote a quote that ends where it
was meant to, and no backquote left over in the prose."""

from __future__ import annotations

import re
from pathlib import Path

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options

from postmortem.report.render import md_prose
from tests.conftest import ROOT

GOLDEN = sorted((ROOT / "tests" / "golden").glob("*.md"))
EXTENSIONS = ("table", "autolink", "strikethrough", "tagfilter")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def github_html(markdown: str) -> str:
    """`markdown` as GitHub renders it: GFM with its extensions, raw HTML kept (GitHub's
    sanitizer keeps <details> and <summary>), no smart punctuation."""
    return cmarkgfm.markdown_to_html_with_extensions(
        markdown, options=Options.CMARK_OPT_UNSAFE, extensions=list(EXTENSIONS)
    )


def blocks(markdown: str) -> tuple[list[str], int, list[list[str]]]:
    """The heading lines, the number of fenced blocks and the quotes (their lines) of
    `markdown`, outside fenced code."""
    headings, fences, quotes = [], 0, []
    fence, quoting = None, False
    for line in markdown.splitlines():
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence, fences = opened.group(1), fences + 1
            continue
        if re.match(r"#{1,6} ", line):
            headings.append(line)
        if line.startswith(">"):
            if not quoting:
                quotes.append([])
            quotes[-1].append(line)
        quoting = line.startswith(">")
    return headings, fences, quotes


def prose_of(html: str) -> str:
    """The text of `html` outside code: what a reader sees as words."""
    text = re.sub(r"<pre\b.*?</pre>|<code>.*?</code>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", text)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_every_golden_markdown_renders_as_github_shows_it(path: Path):
    markdown = path.read_text(encoding="utf-8")
    html = github_html(markdown)
    headings, fences, quotes = blocks(markdown)
    # THEN each `#` line is a heading of its level, in order, none swallowed by a quote
    rendered = re.findall(r"<h([1-6])>", html)
    assert rendered == [str(len(h.split(" ", 1)[0])) for h in headings]
    # AND each fence is a code block
    assert len(re.findall(r"<pre\b[^>]*><code\b", html)) == fences
    # AND each quote is one blockquote that holds its own lines and nothing after them
    found = re.findall(r"<blockquote>(.*?)</blockquote>", html, flags=re.S)
    assert len(found) == len(quotes)
    for quote, lines in zip(found, quotes, strict=True):
        assert not re.search(r"<h[1-6]>|<table>|<details>", quote)
        # a line pulled in by lazy continuation would be one more line of text in the quote
        shown = [line for line in re.sub(r"<[^>]+>", "", quote).splitlines() if line.strip()]
        assert len(shown) <= len(lines), shown
    # AND no backquote is left in the prose: every code span opened and closed
    assert "`" not in prose_of(html), [line for line in prose_of(html).split("\n") if "`" in line]
    # AND no emphasis or link markers are left unrendered
    assert "**" not in prose_of(html)


def test_a_quote_ends_at_its_blank_line():
    # GIVEN a warning quote, then a blank line, then a paragraph, as a report writes them
    html = github_html("> **warning:** it failed\n\nSASS around the fault:\n")
    # THEN the paragraph is not pulled into the quote by lazy continuation (as it would be
    # without the blank line)
    assert "SASS" in github_html("> it failed\nSASS around the fault:\n").split("</blockquote>")[0]
    quote, after = html.split("</blockquote>")
    assert "it failed" in quote and after.strip() == "<p>SASS around the fault:</p>"


def test_a_sass_branch_target_in_prose_is_code_not_a_stray_backquote():
    # GIVEN the strongest signal of a real mbarrier hang: an instruction with SASS's `(label)
    signal = "warp 0 at 0x0ce0 @!P0 BRA `(.L_x_10) (/tmp/pm/mbarrier_pipeline.cu:45), waiting"
    html = github_html(md_prose(signal))
    # THEN the word with the backquote is a code span, and the prose keeps none
    assert "<code>`(.L_x_10)</code>" in html
    assert "`" not in prose_of(html)
