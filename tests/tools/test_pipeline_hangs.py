"""Warp-specialized pipelines at real PCs of FlashAttention-3 (vllm 0.33.0's sm_90a cubin in
fixtures/corpus): a busy snapshot gets no deadlock claim; a circular wait and consumers
whose producer exited get a warning naming the waits, the roles and what is not proven.

The PCs were read from the cubin's SASS (fixtures/builder/scenarios.py, `FA3_*`); the roles
follow from the code, independently of the rules: the producer's path issues UTMALDG, the
consumers' issues HGMMA.
"""

from __future__ import annotations

import subprocess
from functools import cache

import pytest

from postmortem.analysis.analyze import Analysis, AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.hang.pipeline import (
    CONSUMER,
    PRODUCER,
    IndexedListing,
    mbarrier_wait,
    role_at,
)
from postmortem.cubin.sass import parse_sass
from postmortem.findings import FindingCode, Severity
from postmortem.report.context import build_report
from postmortem.report.render import render
from tests.conftest import FIXTURES
from tests.tooling import DUMPS, require_tool

FA3 = FIXTURES / "corpus" / "cubins" / "vllm-0.33.0.vllm_fa3_C.118.sm_90a.cubin"
DEADLOCKS = {FindingCode.DIVERGENT_BARRIER, FindingCode.CIRCULAR_WAIT,
             FindingCode.PIPELINE_STALLED, FindingCode.NAMED_BARRIER_STARVED,
             FindingCode.SPIN_WAIT, FindingCode.CONVERGENCE_SPLIT}  # fmt: skip


@cache
def _listing():
    nvdisasm = require_tool("nvdisasm")
    run = subprocess.run(
        [str(nvdisasm), "-c", "-ndf", "-fun", "3", str(FA3)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return IndexedListing(parse_sass(run.stdout))


@cache
def _analysis(name: str) -> Analysis:
    require_tool("nvdisasm")
    options = AnalyzeOptions(LocalizeOptions(), cuda_gdb=False)
    return analyze_dump(DUMPS / f"{name}.nvcudmp", options)


@pytest.mark.parametrize(
    ("offset", "operand"),
    [
        (0xBC20, "[R16+URZ+0x34830]"),  # the retry loop's TRYWAIT
        (0xBC30, "[R16+URZ+0x34830]"),  # its NANOSLEEP
        (0xBC50, "[R16+URZ+0x34830]"),  # its branch back
        (0x1370, "[UR5+0x34800]"),  # an inline wait on the fast path
    ],
)
def test_a_pc_in_a_wait_loop_waits_on_its_mbarrier(offset, operand):
    wait = mbarrier_wait(_listing(), offset)
    assert wait is not None and wait.operand == operand


def test_instructions_outside_wait_loops_wait_on_nothing():
    assert mbarrier_wait(_listing(), 0x1990) is None  # HGMMA
    assert mbarrier_wait(_listing(), 0x9D60) is None  # UTMALDG


@pytest.mark.parametrize(
    ("offset", "role"),
    [(0x9D60, PRODUCER), (0xBFA0, PRODUCER), (0xBC20, CONSUMER), (0x1990, CONSUMER)],
)
def test_the_role_is_the_code_path_ahead(offset, role):
    assert role_at(_listing(), offset) == role


def test_a_busy_pipeline_gets_no_deadlock_claim():
    analysis = _analysis("hang_fa3_busy")
    assert analysis.hang is not None
    findings = analysis.hang.findings
    assert not {f.code for f in findings} & DEADLOCKS
    (wait,) = [f for f in findings if f.code is FindingCode.MBARRIER_WAIT]
    assert wait.severity is Severity.INFO
    assert "4 warp(s) wait on mbarriers (4 consumer)" in wait.message
    assert "(4 consumer, 1 producer)" in wait.message
    assert analysis.verdict.headline.startswith("no deadlock claimed:")
    report = build_report(analysis)
    assert report["oncall"]["problem_class"] == "hang-unexplained"
    roles = {g["offset_hex"]: (g["barrier"], g["role"]) for g in report["hang"]["groups"]}
    assert roles == {
        "0x9d60": (None, "producer"), "0xbc20": ("mbarrier", "consumer"),
        "0x1990": (None, "consumer"),
    }  # fmt: skip
    text = render("analyze", report, "text")
    assert "deadlock?" not in text


def test_a_circular_wait_is_a_warning_with_both_roles():
    analysis = _analysis("hang_fa3_circular")
    assert analysis.hang is not None
    (circular,) = [f for f in analysis.hang.findings if f.code is FindingCode.CIRCULAR_WAIT]
    assert circular.severity is Severity.WARNING and circular.caveat
    assert "(8 consumer, 1 producer)" in circular.message
    assert any("warp 0 (producer)" in e and "[R3+URZ+0x60]" in e for e in circular.evidence)
    assert build_report(analysis)["oncall"]["problem_class"] == "hang-at-barrier"


def test_consumers_whose_producer_exited_are_a_stalled_pipeline():
    analysis = _analysis("hang_fa3_producer_gone")
    assert analysis.hang is not None
    (stalled,) = [f for f in analysis.hang.findings if f.code is FindingCode.PIPELINE_STALLED]
    assert stalled.severity is Severity.WARNING
    assert any("8 of the launch's 12 warps live" in e for e in stalled.evidence)
    assert not {f.code for f in analysis.hang.findings} & {FindingCode.CIRCULAR_WAIT}


def test_a_consumer_s_barrier_is_located_from_its_registers(tmp_path):
    # GIVEN the circular-wait dump with R16 of each consumer lane set to 0, as a kernel
    # whose barriers start at the window's base would hold it
    from postmortem import open_coredump
    from postmortem.coredump import tables as t

    data = bytearray((DUMPS / "hang_fa3_circular.nvcudmp").read_bytes())
    with open_coredump(DUMPS / "hang_fa3_circular.nvcudmp") as core:
        for warp in core.iter_warps(core.device(0)):
            if warp.warp_id not in (4, 20):
                continue
            for lane in core.lanes(warp):
                section = core.tables.only_child(lane.ref, t.DEV_REGS)
                start = int(core.sections.offset[section])
                data[start + 16 * 4 : start + 17 * 4] = bytes(4)
    dump = tmp_path / "circular.nvcudmp"
    dump.write_bytes(bytes(data))
    # WHEN it is analyzed
    analysis = analyze_dump(dump, AnalyzeOptions(LocalizeOptions(), cuda_gdb=False))
    # THEN the consumer's wait names the barrier's shared address; the producer's, whose
    # register holds no shared address, names none
    (circular,) = analysis.hang.findings
    lines = {e.split(" at ")[0]: e for e in circular.evidence if e.startswith("warp ")}
    assert lines["warp 4 (consumer)"].endswith("= shared 0x34830 (R16 + 0x34830)")
    assert "= shared" not in lines["warp 0 (producer)"]
