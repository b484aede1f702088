"""A warp whose lane rows are lost (their table zero-filled or set aside) is reported with
the exception the rest of the dump records (the SM row's), or as one whose code was lost:
never as code 0 ("None"), and nothing read off a zero row is called a thread."""

from __future__ import annotations

from io import BytesIO

from elftools.elf.elffile import ELFFile

from postmortem import open_coredump
from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.hang.hang import HangAnalysis
from postmortem.analysis.oncall.summary import ProblemClass, oncall_summary
from postmortem.analysis.verdict import without_claims
from postmortem.codemap import find_faults
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import LOST_EXCEPTION, FaultSource
from postmortem.salvage import lost_warps
from tests.tinydump import (
    WARP_ILLEGAL_ADDRESS,
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    SmFault,
    WarpSpec,
    cubin,
    patch_section,
    write_tiny_dump,
)

FAULT = cubin("oob_store").fault["offset"]
LANES = ".cudbg.lntbl.dev0.sm3.cta0.wp2"
OPTIONS = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False)


def _dump(tmp_path, layout="r580", sm_exception=None):
    """A warp of 4 lanes on SM 3 whose lane 2 faults at the planted store; its warp row
    holds the error PC; the SM row holds `sm_exception` (None: 0, as drivers leave it)."""
    module = ModuleSpec("oob_store")
    lanes = [LaneSpec(FAULT, WARP_ILLEGAL_ADDRESS if n == 2 else 0) for n in range(4)]
    block = BlockSpec(1, [WarpSpec(lanes, warp_id=2, error_offset=FAULT)], (5, 0, 0), sm=3)
    faults = [SmFault(3, sm_exception, 1, FAULT)] if sm_exception is not None else []
    device = DeviceSpec([module], [GridSpec(1, module)], [block], sm_faults=faults)
    return write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device], layout))


def _zero(path, name):
    data = bytearray(path.read_bytes())
    section = ELFFile(BytesIO(bytes(data))).get_section_by_name(name)
    start, size = section["sh_offset"], section["sh_size"]
    data[start : start + size] = bytes(size)
    path.write_bytes(data)
    return path


def _fault(path):
    with open_coredump(path) as core:
        (fault,) = find_faults(core)
    return fault


def test_zeroed_lane_rows_take_the_sm_rows_exception_code_and_name(tmp_path):
    # GIVEN an r580 dump whose SM row records the exception, with the lane table zero-filled
    path = _zero(_dump(tmp_path, sm_exception=WARP_ILLEGAL_ADDRESS), LANES)
    # WHEN analyzed
    analysis = analyze_dump(path, OPTIONS)
    # THEN the warp-row fault carries the SM's code and name, and says its lanes are lost
    (site,) = analysis.sites
    (fault,) = site.faults
    assert (fault.source, fault.exception, fault.lanes_lost) == (FaultSource.WARP, 14, True)
    assert fault.exception_name == "Warp Illegal Address"
    assert analysis.verdict.headline.startswith("Warp Illegal Address in oob_kernel")
    summary = oncall_summary(analysis)
    assert summary.problem_class is ProblemClass.ILLEGAL_ADDRESS
    assert "(Warp Illegal Address, exception 14)" in summary.problem


def test_zeroed_lane_rows_with_no_sm_exception_are_never_code_0(tmp_path):
    # GIVEN the same warp, with an SM row that records 0 (the lanes held the code)
    path = _zero(_dump(tmp_path), LANES)
    # WHEN analyzed
    analysis = analyze_dump(path, OPTIONS)
    (fault,) = analysis.sites[0].faults
    # THEN the code is unknown, and said to be lost with the lane rows, never "None"
    assert (fault.exception, fault.lanes_lost) == (None, True)
    assert fault.exception_name == LOST_EXCEPTION
    summary = oncall_summary(analysis)
    assert summary.problem == LOST_EXCEPTION
    assert "None" not in summary.problem and "exception 0" not in summary.problem
    assert analysis.verdict.headline.startswith(f"{LOST_EXCEPTION} in oob_kernel")
    # AND the lane named for the warp keeps no thread index read off a zero row
    assert (fault.lane, fault.thread_idx) == (0, None)


def test_a_set_aside_lane_table_is_lost_lanes_too(tmp_path):
    # GIVEN the lane table set aside by the reader (it links to no warp row)
    path = _dump(tmp_path, sm_exception=WARP_ILLEGAL_ADDRESS)
    patch_section(path, LANES, sh_link=0, sh_info=0)
    fault = _fault(path)
    assert (fault.exception, fault.lanes_lost) == (14, True)
    with open_coredump(path) as core:
        assert "lane table" in lost_warps(core)


def test_intact_lane_rows_are_not_lost(tmp_path):
    path = _dump(tmp_path)
    fault = _fault(path)
    assert (fault.source, fault.exception, fault.lanes_lost) == (FaultSource.LANE, 14, False)
    with open_coredump(path) as core:
        assert lost_warps(core) is None


def test_a_zero_filled_lane_table_is_lost_warps(tmp_path):
    path = _zero(_dump(tmp_path), LANES)
    with open_coredump(path) as core:
        assert lost_warps(core).startswith("partial dump: 1 of 1 lane tables are zero-filled")


def _hang(*findings):
    note = Finding(FindingCode.HANG_LIMITED, Severity.INFO, "no nvdisasm")
    return HangAnalysis((), findings, (note,))


def test_hang_findings_are_withheld_when_warps_were_lost():
    spin = Finding(FindingCode.SPIN_WAIT, Severity.ERROR, "a spin-wait nothing can end")
    hang = without_claims(_hang(spin), "partial dump: 1 of 8 lane tables are zero-filled")
    assert hang.findings == ()
    assert [n.message for n in hang.notes][0] == "no nvdisasm"
    assert hang.notes[1].message.startswith("no deadlock pattern is claimed: 1 were read")
    assert hang.notes[1].message.endswith("(partial dump: 1 of 8 lane tables are zero-filled)")


def test_hang_findings_stand_when_nothing_was_lost():
    spin = Finding(FindingCode.SPIN_WAIT, Severity.ERROR, "a spin-wait nothing can end")
    hang = _hang(spin)
    assert without_claims(hang, None) is hang
