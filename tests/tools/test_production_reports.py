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


@pytest.mark.parametrize(
    "corpus",
    ["sgl_kernel-0.3.21.common_ops.150.sm_90a", "vllm-0.33.0.C_stable_libtorch.323.sm_90a"],
)
def test_a_whole_production_module_s_report_fits_a_github_issue(tmp_path, corpus):
    # GIVEN a fault in a module of many CUTLASS GEMMs whose names run to thousands of characters
    from tests.tinydump import (
        BlockSpec,
        DeviceSpec,
        DumpSpec,
        GridSpec,
        LaneSpec,
        ModuleSpec,
        WarpSpec,
        cubin,
        write_tiny_dump,
    )  # fmt: skip

    module = ModuleSpec(f"corpus/{corpus}", abi="v8")
    kernel = cubin(f"corpus/{corpus}", "v8").kernels[0]["name"]
    lane = LaneSpec(0x100, exception=14)
    grid = GridSpec(1, module, kernel=kernel)
    device = DeviceSpec([module], [grid], [BlockSpec(1, [WarpSpec([lane])])])
    path = write_tiny_dump(tmp_path / "g.nvcudmp", DumpSpec([device], layout="r580"))
    report = build_report(analyze_dump(path, AnalyzeOptions(LocalizeOptions(), cuda_gdb=False)))
    # THEN its modules table names each kernel family once, and the report fits
    markdown = render("analyze", report, "md")
    assert len(markdown) < GITHUB_ISSUE, len(markdown)
    assert max(len(line) for line in render("analyze", report, "text").splitlines()) <= TEXT_WIDTH
    assert len(report["modules"][0]["functions"]) > 1  # the JSON keeps every full name
