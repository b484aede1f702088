"""The verdict: a fault's first site, else a hang, else no exception, in one line."""

from __future__ import annotations

from dataclasses import replace

from postmortem import open_coredump
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from postmortem.analysis.hang.hang import HangAnalysis
from postmortem.analysis.state import KernelState
from postmortem.analysis.verdict import VerdictKind, decide, site_title
from postmortem.findings import Finding, FindingCode, Severity
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

FAULT = cubin("oob_store").fault["offset"]


def _sites(tmp_path, warps):
    module = ModuleSpec("oob_store")
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, warps)])
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))) as core:
        return localize(core, LocalizeOptions(nvdisasm=False))


def _state(warps):
    return KernelState(0, 1, "_Z10oob_kernelPfif", warps, 32 * warps, (), 0)


def test_a_fault_verdict_names_the_exception_kernel_and_offset_of_the_first_site(tmp_path):
    # GIVEN two sites, the store's with more lanes
    lanes = [LaneSpec(FAULT, 14, lane=n) for n in range(3)] + [LaneSpec(0x40, 6, lane=5)]
    sites = _sites(tmp_path, [WarpSpec(lanes)])
    # WHEN decided
    verdict = decide(sites, None, [_state(1)])
    # THEN the first site speaks for the dump, and the site count is kept
    assert verdict.kind is VerdictKind.FAULT
    assert verdict.headline == (
        "Warp Illegal Address in oob_kernel(float*, int, float) at oob_kernel+0xd0"
    )
    assert (verdict.sites, verdict.findings) == (2, 0)


def test_a_site_outside_every_module_is_in_an_unknown_function(tmp_path):
    warp = WarpSpec([LaneSpec(0, 14)], error_offset=0x10_0000)
    verdict = decide(_sites(tmp_path, [warp]), None, ())
    assert verdict.headline == "Warp Illegal Address in an unknown function"


def test_site_title_names_a_trap_and_an_unnamed_exception(tmp_path):
    trapped = WarpSpec([LaneSpec(FAULT)], broken=True)
    (trap,) = _sites(tmp_path, [trapped])
    assert site_title(trap) == "stopped at a trap"
    assert site_title(replace(trap, faults=())) == "an unnamed exception"
    assert site_title(replace(trap, exception=12)) == "Warp Assert"
    assert site_title(replace(trap, exception=99)) == "Device Unknown Exception (code 99, 0x63)"


def test_no_site_and_no_hang_analysis_is_no_exception():
    verdict = decide((), None, [_state(4)])
    assert verdict.kind is VerdictKind.NO_EXCEPTION
    assert verdict.headline.startswith("no exception recorded: every warp was live")


def test_a_hang_verdict_quotes_its_first_deadlock_pattern():
    findings = tuple(
        Finding(FindingCode.SPIN_WAIT, Severity.ERROR, message) for message in ("first", "second")
    )
    verdict = decide((), HangAnalysis((), findings, ()), [_state(4)])
    assert (verdict.kind, verdict.headline, verdict.findings) == (
        VerdictKind.HANG,
        "hang: first",
        2,
    )


def test_a_hang_without_a_pattern_counts_the_live_warps():
    verdict = decide((), HangAnalysis((), (), ()), [_state(4), _state(3)])
    assert verdict.kind is VerdictKind.HANG
    assert verdict.headline.startswith("no exception recorded: 7 live warps, and no deadlock")
    assert verdict.findings == 0


def test_one_live_warp_is_spoken_of_in_the_singular():
    verdict = decide((), HangAnalysis((), (), ()), [_state(1)])
    assert "no exception recorded: 1 live warp, and" in verdict.headline
