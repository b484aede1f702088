"""A custom all-reduce hung for a dead peer (fixtures/cu/all_reduce.cu, dump
hang_all_reduce): one finding that points at the polling lanes and the flags they poll, never
a divergent barrier or a split warp blamed on the collective."""

from __future__ import annotations

from functools import cache

from postmortem import open_coredump
from postmortem.analysis.analyze import Analysis, AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.findings import FindingCode, Severity
from postmortem.report.context import build_report
from postmortem.report.render import render
from tests.tooling import DUMPS, require_tool

DUMP = DUMPS / "hang_all_reduce.nvcudmp"


@cache
def _analysis() -> Analysis:
    require_tool("nvdisasm")
    return analyze_dump(DUMP, AnalyzeOptions(LocalizeOptions(), cuda_gdb=False))


def _flag_addresses() -> set[int]:
    # The truth, read without the rules: lane 5 of each block's warp 0 polls R7:R6
    # (the spin loop's `LDG.E.STRONG.SYS R2, desc[UR4][R6.64]`).
    found = set()
    with open_coredump(DUMP) as core:
        for warp in core.iter_warps(core.device(0)):
            for lane in core.lanes(warp):
                registers = core.registers(lane)
                if lane.lane == 5 and warp.active_lanes_mask == 1 << 5 and registers:
                    found.add(registers[7] << 32 | registers[6])
    return found


def test_a_collective_hang_names_the_polling_lanes_and_their_flags():
    hang = _analysis().hang
    assert hang is not None
    codes = [f.code for f in hang.findings]
    # THEN no textbook deadlock is blamed on the collective
    assert codes == [FindingCode.COLLECTIVE_WAIT]
    (finding,) = hang.findings
    assert finding.severity is Severity.WARNING
    assert "2 lane(s) in 2 warp(s)" in finding.message
    assert "no store of cross_device_reduce_1stage" in finding.message
    assert sum("lane 5 polls" in e for e in finding.evidence) == 2
    addresses = _flag_addresses()
    assert len(addresses) == 2
    assert all(any(f"polls 0x{a:x} (R7:R6)" in e for e in finding.evidence) for a in addresses)
    assert finding.remedy and "--incident" in finding.remedy


def test_the_collective_is_the_on_call_answer_in_every_format():
    report = build_report(_analysis())
    assert report["oncall"]["problem_class"] == "collective-wait"
    text = render("analyze", report, "text")
    assert "waiting for a peer, collective-wait" in text
    assert "deadlock?" not in text
    assert report["hang"]["findings"][0]["code"] == "collective-wait"
