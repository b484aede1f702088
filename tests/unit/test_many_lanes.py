"""A site with more faulting lanes than a report lists: text, Markdown and HTML are built
from a report that keeps only the lanes they show, and read the same as from the whole one;
the JSON keeps every lane (a grid-wide fault of a full GPU has 270,000)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.report.context import build_report
from postmortem.report.render import LANES_SHOWN, render, report_text
from tests.tinydump import (
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    WarpSpec,
    write_tiny_dump,
)

WARPS = 3
"""96 faulting lanes: more than the text (8) and Markdown (32) list."""


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    module = ModuleSpec("oob_store")
    warps = [
        # every lane at the STG at 0xd0 (address R3:R2), each lane its own address
        WarpSpec([LaneSpec(0xD0, 14, lane=n, registers={2: 0x1000 * w + 4 * n, 3: 0x7F})
                  for n in range(32)], warp_id=w)
        for w in range(WARPS)
    ]  # fmt: skip
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, warps)])
    dump = write_tiny_dump(tmp_path_factory.mktemp("lanes") / "t.nvcudmp", DumpSpec([device]))
    return analyze_dump(dump, AnalyzeOptions(LocalizeOptions(), cuda_gdb=False))


def test_the_json_keeps_every_lane_and_counts_them(analysis):
    (site,) = build_report(analysis)["sites"]
    assert site["fault_count"] == len(site["faults"]) == 32 * WARPS
    forensics = site["forensics"]
    assert forensics["lane_count"] == len(forensics["lanes"]) == 32 * WARPS
    assert forensics["lanes"][-1]["address_hex"] == f"0x7f{0x1000 * (WARPS - 1) + 4 * 31:08x}"


def test_a_cut_report_keeps_the_first_lanes_and_the_whole_counts(analysis):
    (site,) = build_report(analysis, lanes=8)["sites"]
    assert len(site["faults"]) == len(site["forensics"]["lanes"]) == 8
    assert site["fault_count"] == site["forensics"]["lane_count"] == 32 * WARPS
    assert site["census"]["lanes"] == 32 * WARPS


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_each_format_reads_the_same_from_the_cut_report(analysis, fmt):
    whole = render("analyze", build_report(analysis), fmt)
    assert report_text(analysis, fmt) == whole
    assert f"{32 * WARPS - LANES_SHOWN[fmt]} more" in whole or fmt == "html"


def test_verbose_lists_every_lane(analysis):
    text = report_text(analysis, "text", verbose=True)
    assert "more lanes" not in text
    assert f"0x7f{0x1000 * (WARPS - 1) + 4 * 31:08x}" in text


def test_home_folders_are_hidden_and_every_lane_kept(analysis):
    # The per-lane lists are set aside while the rest is walked for home folders.
    moved = dataclasses.replace(analysis, path=Path("/home/bob/runs/t.nvcudmp"), redact=True)
    report = build_report(moved)
    assert report["dump"]["path"] == "~/runs/t.nvcudmp"
    (site,) = report["sites"]
    assert len(site["faults"]) == len(site["forensics"]["lanes"]) == 32 * WARPS
    assert site["faults"] == build_report(analysis)["sites"][0]["faults"]
