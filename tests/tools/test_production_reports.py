"""Reports on production kernels read as the on-call engineer needs them: FlashAttention-3's
5,000-character names (vllm 0.33.0's cubin in fixtures/corpus) are shown short and
bounded, whole once; no text line outgrows a terminal; a Markdown report fits a GitHub issue.
"""

from __future__ import annotations

from functools import cache

import pytest

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.report.context import build_report
from postmortem.report.render import TEXT_WIDTH, render
from tests.tooling import DUMPS, require_tool

PRODUCTION = [
    "hang_fa3_busy", "hang_fa3_circular", "hang_fa3_producer_gone", "triton_helper_fault",
    "cutlass_like", "hostile_names", "hang_all_reduce",
]  # fmt: skip
GITHUB_ISSUE = 65_536


@cache
def _report(name: str):
    require_tool("nvdisasm")
    options = AnalyzeOptions(LocalizeOptions(), cuda_gdb=False)
    return build_report(analyze_dump(DUMPS / f"{name}.nvcudmp", options))


@pytest.mark.parametrize("name", PRODUCTION)
def test_no_text_line_outgrows_a_terminal(name):
    text = render("analyze", _report(name), "text")
    assert max(len(line) for line in text.splitlines()) <= TEXT_WIDTH


@pytest.mark.parametrize("name", PRODUCTION)
def test_a_markdown_report_fits_a_github_issue(name):
    assert len(render("analyze", _report(name), "md")) < GITHUB_ISSUE


def test_a_long_kernel_name_is_shown_short_and_whole_once():
    report = _report("hang_fa3_busy")
    kernel = report["hang"]["groups"][0]["kernel"]
    assert len(kernel["demangled"]) > 1_000
    assert kernel["brief"] == (
        "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<…> > >"
    )
    text = render("analyze", report, "text")
    unfolded = " ".join(text.split())
    # THEN the whole name appears once (folded over lines), and the short one where it is used
    assert unfolded.count(" ".join(kernel["demangled"].split())) == 1
    assert text.count(kernel["brief"]) >= 3


def test_the_build_line_names_the_kernel_that_ran_and_counts_the_others():
    text = render("analyze", _report("hang_fa3_busy"), "text")
    (built,) = [line for line in text.splitlines() if line.strip().startswith("built:")]
    assert "FlashAttnFwdSm90<…> > > and 2 other kernels of its module:" in built
