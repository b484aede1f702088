"""A dump with more fault sites than a report shows: the first in full, the rest counted,
every one in the JSON (a damaged or hostile dump can hold thousands)."""

from __future__ import annotations

import json
import re

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.report.context import build_report
from postmortem.report.render import SITES_SHOWN, render
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

SITES = SITES_SHOWN + 4


def _report(tmp_path):
    # one lane faulting at each of SITES offsets of the kernel: one site per PC
    module = ModuleSpec("oob_store")
    lanes = [LaneSpec(16 * n, 14, lane=n) for n in range(SITES)]
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec(lanes)])])
    dump = write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))
    options = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False)
    return build_report(analyze_dump(dump, options))


def test_a_report_shows_the_first_sites_and_counts_the_rest(tmp_path):
    report = _report(tmp_path)
    assert len(report["sites"]) == SITES
    markdown = render("analyze", report, "md")
    text = render("analyze", report, "text")
    html = render("analyze", report, "html")
    # the first SITES_SHOWN in full, and one line for the 4 others
    assert markdown.count(f"/{SITES}: ") == SITES_SHOWN
    assert text.count(f"/{SITES}] ") == SITES_SHOWN
    assert html.count('<section id="site-') == SITES_SHOWN
    for shown in (markdown, text, re.sub(r"<[^>]+>", "", html)):
        assert "4 more fault sites, 4 lanes in all" in shown
    # --verbose and the JSON give every one
    assert render("analyze", report, "md", verbose=True).count(f"/{SITES}: ") == SITES
    assert len(json.loads(render("analyze", report, "json"))["sites"]) == SITES
    assert "more fault site" not in render("analyze", report, "md", verbose=True)
