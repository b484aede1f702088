"""Fault localization without nvdisasm: sites, their functions and offsets, and diagnoses."""

from __future__ import annotations

from postmortem import open_coredump
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from postmortem.codemap import find_faults
from postmortem.findings import FindingCode
from postmortem.model import FaultSource
from tests.tinydump import (
    HANDLE,
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
    kernel_text,
    write_tiny_dump,
)

NATIVE = LocalizeOptions(nvdisasm=False)
FAULT = cubin("oob_store").fault["offset"]


def _sites(tmp_path, warps, name="oob_store", abi="v7", options=NATIVE, layout="r400", **device):
    module = ModuleSpec(name, abi)
    blocks = [BlockSpec(1, warps, (5, 0, 0), sm=3)] if warps else []
    device = DeviceSpec([module], [GridSpec(1, module)], blocks, **device)
    path = write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device], layout))
    with open_coredump(path) as core:
        return device, localize(core, options)


def test_lanes_at_one_pc_are_one_site_and_the_most_populous_comes_first(tmp_path):
    # GIVEN five lanes at the planted store and one lane elsewhere
    lanes = [LaneSpec(FAULT, WARP_ILLEGAL_ADDRESS, lane=n) for n in range(3, 8)]
    lanes.append(LaneSpec(0x40, WARP_ILLEGAL_ADDRESS, lane=9))
    # WHEN localized natively
    device, sites = _sites(tmp_path, [WarpSpec(lanes, warp_id=2)])
    # THEN two sites, the five-lane one first, named kernel+offset
    _, text = kernel_text(device.grids[0])
    assert [(len(s.faults), s.offset, s.error_pc) for s in sites] == [
        (5, FAULT, text + FAULT),
        (1, 0x40, text + 0x40),
    ]
    first = sites[0]
    assert first.location == "oob_kernel+0xd0"
    assert first.function.name == "_Z10oob_kernelPfif"
    assert (first.module_handle, first.exception, first.has_line_info) == (HANDLE, 14, True)
    assert [f.lane for f in first.faults] == [3, 4, 5, 6, 7]
    # AND nothing was disassembled, and nothing is wrong
    assert first.instruction is None and first.disassembly is None and first.diagnoses == ()


def test_different_exceptions_and_a_trap_at_one_pc_are_separate_sites(tmp_path):
    lanes = [LaneSpec(FAULT, WARP_ILLEGAL_ADDRESS), LaneSpec(FAULT, 6)]
    trapped = WarpSpec([LaneSpec(FAULT)], warp_id=4, broken=True)
    _, sites = _sites(tmp_path, [WarpSpec(lanes), trapped])
    kinds = sorted((s.exception or 0, s.faults[0].source.value) for s in sites)
    assert kinds == [(0, "trap"), (6, "lane"), (14, "lane")]
    assert {s.offset for s in sites} == {FAULT}
    trap = next(s for s in sites if s.faults[0].source is FaultSource.TRAP)
    assert trap.exception is None


def test_an_sm_level_fault_whose_warps_exited_is_still_a_located_site(tmp_path):
    # GIVEN an r555 dump where only SM 17's row reports the exception and error PC
    device, (site,) = _sites(
        tmp_path, [], layout="r555", sm_faults=[SmFault(17, WARP_ILLEGAL_ADDRESS, 1, FAULT)]
    )
    # THEN it is one SM record, located at the planted store, naming no grid, warp or lane
    (fault,) = site.faults
    assert (fault.source, fault.sm_id, fault.exception) == (FaultSource.SM, 17, 14)
    assert (fault.grid_id, fault.warp_id, fault.lane) == (None, None, None)
    assert site.location == "oob_kernel+0xd0"
    assert site.error_pc == kernel_text(device.grids[0])[1] + FAULT


def test_a_lane_pc_that_differs_from_the_warp_error_pc_is_diagnosed(tmp_path):
    # GIVEN a warp whose valid error PC is at the store while its lane says 0x40
    warp = WarpSpec([LaneSpec(0x40, WARP_ILLEGAL_ADDRESS)], error_offset=FAULT)
    (site,) = _sites(tmp_path, [warp])[1]
    # THEN the error PC wins, and the difference is reported
    assert site.offset == FAULT
    (mismatch,) = site.diagnoses
    assert mismatch.code is FindingCode.LANE_OFFSET_MISMATCH
    assert "(0x40)" in mismatch.message and "(0xd0)" in mismatch.message


def test_an_error_pc_outside_every_module_is_diagnosed(tmp_path):
    warp = WarpSpec([LaneSpec(0, WARP_ILLEGAL_ADDRESS)], error_offset=0x10_0000)
    device, (site,) = _sites(tmp_path, [warp])
    _, text = kernel_text(device.grids[0])
    assert site.function is None and site.location is None and site.module is None
    (outside,) = site.diagnoses
    assert outside.code is FindingCode.PC_OUTSIDE_MODULES
    assert f"0x{text + 0x10_0000:x}" in outside.message


def test_a_cubin_compiled_without_lineinfo_says_so_from_its_ptxas_options(tmp_path):
    lanes = [LaneSpec(FAULT, WARP_ILLEGAL_ADDRESS)]
    (site,) = _sites(tmp_path, [WarpSpec(lanes)], "oob_store_nolineinfo", "v8")[1]
    assert site.has_line_info is False
    (note,) = site.diagnoses
    assert note.code is FindingCode.NO_LINE_INFO
    assert "compiled without -lineinfo (ptxas options:" in note.message


def test_line_info_stripped_after_compiling_is_told_apart(tmp_path):
    lanes = [LaneSpec(FAULT, WARP_ILLEGAL_ADDRESS)]
    (site,) = _sites(tmp_path, [WarpSpec(lanes)], "oob_store_stripped", "v8")[1]
    (note,) = site.diagnoses
    assert note.code is FindingCode.LINE_INFO_REMOVED
    assert "-lineinfo" in note.message


def test_a_missing_nvdisasm_is_a_diagnosis_not_an_error(tmp_path):
    options = LocalizeOptions(nvdisasm="/nonexistent/nvdisasm")
    lanes = [LaneSpec(FAULT, WARP_ILLEGAL_ADDRESS)]
    (site,) = _sites(tmp_path, [WarpSpec(lanes)], options=options)[1]
    assert site.offset == FAULT and site.instruction is None and site.forensics is None
    assert [d.code for d in site.diagnoses] == [FindingCode.NVDISASM_MISSING]


def test_a_lane_fault_leads_an_sm_fault_on_a_lower_sm(tmp_path):
    # GIVEN an SM-level exception on SM 1 (its warps gone) and a lane fault on SM 3
    module = ModuleSpec("oob_store")
    offset = cubin("oob_store").fault["offset"]
    lane = LaneSpec(offset, exception=14)
    device = DeviceSpec(
        [module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec([lane])], sm=3)],
        sm_faults=[SmFault(1, 14, 1, offset)],
    )  # fmt: skip
    path = write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device], layout="r565"))
    # WHEN the faults are read
    with open_coredump(path) as core:
        faults = find_faults(core)
    # THEN the lane's, the more precise, comes first
    assert [(f.source, f.sm_id) for f in faults] == [(FaultSource.LANE, 3), (FaultSource.SM, 1)]


def _warp_row_fault(tmp_path, valid_lanes):
    # GIVEN a warp whose row holds a valid error PC while none of its lanes records an exception
    lanes = [LaneSpec(FAULT, lane=n) for n in range(8)]
    warp = WarpSpec(lanes, warp_id=2, error_offset=FAULT, valid_lanes=valid_lanes)
    _, sites = _sites(tmp_path, [warp])
    ((fault,),) = [site.faults for site in sites]
    return fault


def test_a_warp_row_fault_names_the_warps_first_valid_lane_without_calling_it_faulting(tmp_path):
    # WHEN lanes 3, 5 and 6 are the warp's valid lanes
    fault = _warp_row_fault(tmp_path, 0b0110_1000)
    # THEN the fault names lane 3 (the lowest valid bit) and its thread, marked as chosen,
    # and stays the warp row's
    assert fault.source is FaultSource.WARP
    assert (fault.lane, fault.thread_idx, fault.lane_chosen) == (3, (67, 0, 0), True)
    assert fault.lane_record is None


def test_a_warp_row_fault_of_a_warp_with_no_valid_lane_names_no_lane(tmp_path):
    fault = _warp_row_fault(tmp_path, 0)
    assert fault.source is FaultSource.WARP
    assert (fault.lane, fault.thread_idx, fault.lane_chosen) == (None, None, False)


def test_a_lane_fault_names_its_own_lane_not_a_chosen_one(tmp_path):
    warp = WarpSpec([LaneSpec(FAULT, lane=0), LaneSpec(FAULT, WARP_ILLEGAL_ADDRESS, lane=5)])
    _, (site,) = _sites(tmp_path, [warp])
    (fault,) = site.faults
    assert (fault.source, fault.lane, fault.lane_chosen) == (FaultSource.LANE, 5, False)
