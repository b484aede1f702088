"""Reports on production kernels read as the on-call engineer needs them: FlashAttention-3's
5,000-character names (vllm 0.33.0's cubin in fixtures/corpus) are shown short and
bounded, whole once; no text line outgrows a terminal; a Markdown report, of one dump or of an
incident of many, fits a GitHub issue with room to spare.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fleet.analyze import analyze_incident
from postmortem.report.context import build_report
from postmortem.report.incident import build_incident_report
from postmortem.report.render import TEXT_WIDTH, render
from tests.conftest import FIXTURES, dump_paths
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
)
from tests.tooling import DUMPS, require_tool
from tests.unit.test_golden_markdown_renders import github_html, prose_of

PRODUCTION = [
    "hang_fa3_busy", "hang_fa3_circular", "hang_fa3_producer_gone", "triton_helper_fault",
    "cutlass_like", "hostile_names", "hang_all_reduce",
]  # fmt: skip
ISSUE_BUDGET = 60_000
"""The most a Markdown report may be: GitHub's issue body holds 65,536 characters, and the
reporter adds a few lines of their own."""
REAL = sorted((FIXTURES / "real").glob("*.nvcudmp.gz"))
CORPUS = sorted(p.stem for p in (FIXTURES / "corpus" / "cubins").glob("*.cubin"))
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


@cache
def _report(name: str):
    return _report_of(DUMPS / f"{name}.nvcudmp")


@cache
def _report_of(path: Path):
    require_tool("nvdisasm")
    options = AnalyzeOptions(LocalizeOptions(), cuda_gdb=False)
    return build_report(analyze_dump(path, options))


def _stem(path: Path) -> str:
    return path.name.split(".nvcudmp")[0]


@pytest.mark.parametrize("name", PRODUCTION)
def test_no_text_line_outgrows_a_terminal(name):
    text = render("analyze", _report(name), "text")
    assert max(len(line) for line in text.splitlines()) <= TEXT_WIDTH


@pytest.mark.parametrize("path", [*dump_paths(), *REAL], ids=_stem)
def test_a_markdown_report_fits_a_github_issue(path):
    # every committed dump, the fixtures built around wheel cubins and the H100's real ones
    markdown = render("analyze", _report_of(path), "md")
    assert len(markdown) < ISSUE_BUDGET, len(markdown)
    # AND GitHub renders it whole: no code span left open (a SASS label's backquote is code)
    assert "`" not in prose_of(github_html(markdown))


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
    # AND in Markdown too, inside a folded <details>
    markdown = render("analyze", report, "md")
    assert markdown.count(kernel["demangled"]) == 1
    before = markdown[: markdown.index(kernel["demangled"])]
    assert before.rfind("<details>") > before.rfind("</details>")


def test_the_build_line_names_the_kernel_that_ran_and_counts_the_others():
    text = render("analyze", _report("hang_fa3_busy"), "text")
    (built,) = [line for line in text.splitlines() if line.strip().startswith("built:")]
    assert "FlashAttnFwdSm90<…> > > and 2 other kernels of its module:" in built


def _fault_in(corpus: str, kernel: str, path: Path, stamp: int = T0) -> Path:
    # A lane of `kernel` of the production cubin `corpus` faulting at +0x100.
    module = ModuleSpec(f"corpus/{corpus}", abi="v8")
    lane = LaneSpec(0x100, exception=14)
    grid = GridSpec(1, module, kernel=kernel)
    device = DeviceSpec([module], [grid], [BlockSpec(1, [WarpSpec([lane])])])
    return write_tiny_dump(path, DumpSpec([device], layout="r580", metadata_timestamp=stamp))


@pytest.mark.parametrize("corpus", CORPUS)
def test_a_whole_production_module_s_report_fits_a_github_issue(tmp_path, corpus):
    # GIVEN a fault in the kernel with the longest name of a module taken whole from a wheel
    # (sgl-kernel's CUTLASS GEMMs run to 7,000 characters)
    kernels = cubin(f"corpus/{corpus}", "v8").kernels
    kernel = max(kernels, key=lambda k: len(k["name"]))["name"]
    path = _fault_in(corpus, kernel, tmp_path / "g.nvcudmp")
    report = build_report(analyze_dump(path, AnalyzeOptions(LocalizeOptions(), cuda_gdb=False)))
    # THEN its modules table names each kernel family once, and the report fits
    markdown = render("analyze", report, "md")
    assert len(markdown) < ISSUE_BUDGET, len(markdown)
    assert max(len(line) for line in render("analyze", report, "text").splitlines()) <= TEXT_WIDTH
    assert len(report["modules"][0]["functions"]) == len(kernels)  # the JSON keeps every name


def test_an_incident_of_many_ranks_fits_a_github_issue(tmp_path):
    # GIVEN 48 ranks of one job (six nodes of eight GPUs), each faulting in one of sgl-kernel's
    # CUTLASS GEMMs, whose headlines run to 3,000 characters each
    corpus = "sgl_kernel-0.3.21.common_ops.150.sm_90a"
    kernels = [k["name"] for k in cubin(f"corpus/{corpus}", "v8").kernels]
    paths = [
        _fault_in(
            corpus,
            kernels[rank % len(kernels)],
            tmp_path / f"core_gpu-node-{rank // 8:03d}.{40000 + rank}.{T0 + rank}.nvcudmp",
            T0 + rank,
        )  # fmt: skip
        for rank in range(48)
    ]
    options = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False)
    report = build_incident_report(analyze_incident(paths, options))
    headline = report["verdict"]["headline"]
    assert len(headline) > 2_000
    # WHEN it is rendered for an issue
    markdown = render("incident", report, "md")
    # THEN it fits; the verdict is whole once, folded; the table has short names and the
    # first 40 ranks, and says how many more the JSON report lists
    assert len(markdown) < ISSUE_BUDGET, len(markdown)
    assert markdown.count(headline) == 1
    assert "<details><summary>The verdict with its names whole</summary>" in markdown
    assert "| 40 | fault |" in markdown and "| 41 |" not in markdown
    assert "8 more dumps (8 fault): the JSON report (`--format json`) lists them all." in markdown
    assert len(report["dumps"]) == 48  # the JSON keeps every dump
