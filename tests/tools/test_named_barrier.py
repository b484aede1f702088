"""Named barriers are judged by their own participants, never as __syncthreads().

fixtures/cu/named_barrier.cu: the consumer warps of a warp-specialized block wait at
`BAR.SYNC 0x1, 0x180` for 384 threads while the producer warps load. A snapshot mid-flight
(hang_named_barrier) must get no deadlock claim; the same kernel with its producers exited
(hang_named_barrier_starved) must get one, naming the barrier and its count.
"""

from __future__ import annotations

from functools import cache

import pytest

from postmortem.analysis.analyze import Analysis, AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.hang.barriers import barrier_kind, barrier_operands
from postmortem.cubin.sass import parse_sass
from postmortem.findings import FindingCode, Severity
from postmortem.report.context import build_report
from postmortem.report.render import render
from tests.tooling import DUMPS, require_tool


@cache
def _analysis(name: str) -> Analysis:
    require_tool("nvdisasm")
    options = AnalyzeOptions(LocalizeOptions(), cuda_gdb=False, mode="hang")
    return analyze_dump(DUMPS / f"{name}.nvcudmp", options)


def _instruction(text: str):
    listing = parse_sass(f"        /*0070*/                   {text} ;\n")
    return listing.instructions[0]


@pytest.mark.parametrize(
    ("text", "kind", "operands"),
    [
        ("BAR.SYNC.DEFER_BLOCKING 0x0", "cta", (0, None)),
        ("BAR.SYNC 0x0", "cta", (0, None)),
        ("BAR.RED.POPC.DEFER_BLOCKING 0x0", "cta", (0, None)),
        ("BAR.SYNC.DEFER_BLOCKING 0x1, 0x180", "named", (1, 384)),
        ("BAR.SYNC 0x0, 0x100", "named", (0, 256)),
        ("BAR.SYNC R3, R4", "named", (None, None)),
        ("BAR.ARV 0x1, 0x180", None, (1, 384)),
        ("BSYNC B0", "convergence", (None, None)),
        ("UCGABAR_WAIT", "cluster", (None, None)),
        ("UCGABAR_ARV", None, (None, None)),
    ],
)
def test_barrier_semantics_come_from_the_operands(text, kind, operands):
    instruction = _instruction(text)
    assert barrier_kind(instruction) == kind
    assert barrier_operands(instruction) == operands


def test_a_warp_specialized_snapshot_gets_no_deadlock_claim():
    analysis = _analysis("hang_named_barrier")
    assert analysis.hang is not None
    codes = {f.code for f in analysis.hang.findings}
    assert FindingCode.DIVERGENT_BARRIER not in codes
    assert FindingCode.NAMED_BARRIER_STARVED not in codes
    (wait,) = [f for f in analysis.hang.findings if f.code is FindingCode.NAMED_BARRIER_WAIT]
    assert wait.severity is Severity.INFO
    assert "named barrier 1 for 384 threads (12 warps)" in wait.message
    assert analysis.verdict.headline.startswith("no deadlock claimed:")
    report = build_report(analysis)
    assert report["oncall"]["problem_class"] == "hang-unexplained"
    group = next(g for g in report["hang"]["groups"] if g["barrier"] == "named")
    assert (group["barrier_id"], group["barrier_threads"]) == (1, 384)
    text = render("analyze", report, "text")
    assert "deadlock?" not in text and "no deadlock claimed, named-barrier-wait" in text


def test_a_barrier_whose_participants_exited_is_a_deadlock():
    analysis = _analysis("hang_named_barrier_starved")
    assert analysis.hang is not None
    (starved,) = [f for f in analysis.hang.findings if f.code is FindingCode.NAMED_BARRIER_STARVED]
    assert starved.severity is Severity.ERROR
    assert "only 256 threads of the block are still live" in starved.message
    assert any("BAR.SYNC 0x1, 0x180" in e for e in starved.evidence)
    report = build_report(analysis)
    assert report["oncall"]["problem_class"] == "hang-at-barrier"
    assert "leave the kernel" in report["oncall"]["next_step"]["text"]
