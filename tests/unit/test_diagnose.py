"""Diagnoses: each finding's code, severity and the numbers in its one-line message."""

from __future__ import annotations

import pytest

from postmortem.analysis.fault import diagnose as dx
from postmortem.findings import FindingCode, Severity

KERNEL = "oob_kernel(float*, int, float)"


def test_no_line_info_quotes_the_ptxas_options_when_the_cubin_records_them():
    recorded = dx.no_line_info(KERNEL, " -arch sm_90 -m 64 ")
    assert (recorded.code, recorded.severity) == (FindingCode.NO_LINE_INFO, Severity.WARNING)
    assert recorded.message.endswith(
        "; it was compiled without -lineinfo (ptxas options: -arch sm_90 -m 64)"
    )
    assert "NVCC_PREPEND_FLAGS='-lineinfo'" in recorded.remedy
    unrecorded = dx.no_line_info(KERNEL)
    assert "cannot be told" in unrecorded.message


def test_line_info_removed_and_a_device_debug_build_are_told_apart():
    removed = dx.line_info_removed(KERNEL, "-lineinfo -arch sm_90")
    assert removed.code is FindingCode.LINE_INFO_REMOVED
    assert "the line info was removed after compilation" in removed.message
    debug = dx.device_debug_build(KERNEL, "-g -arch sm_90")
    assert (debug.code, debug.severity) == (FindingCode.DEVICE_DEBUG_BUILD, Severity.INFO)


@pytest.mark.parametrize(
    ("handles", "message"),
    [
        ([0x5612_3A40_0000], "module 0x56123a400000 has no relocated image in the dump"),
        ([None], "a module has no relocated image in the dump"),
        (
            [0x1000, 0x2000, 0x3000],
            "3 modules (module 0x1000 first) have no relocated image in the dump",
        ),
    ],
)
def test_images_missing_is_one_finding_for_every_module(handles, message):
    finding = dx.images_missing(handles)
    assert (finding.code, finding.message) == (FindingCode.IMAGE_MISSING, message)


def test_pc_and_offset_findings_print_hex_addresses():
    outside = dx.pc_outside_modules(0x7F3C_2A10_0000)
    assert outside.message.startswith("the error PC 0x7f3c2a100000 lies in no code section")
    assert outside.severity is Severity.ERROR
    mismatch = dx.lane_offset_mismatch(0x40, 0xD0)
    assert "(0x40)" in mismatch.message and "(0xd0)" in mismatch.message


def test_imprecise_pc_names_the_nearest_memory_instruction_when_there_is_one():
    near = dx.imprecise_pc("IMAD", "Warp Illegal Address", "STG.E [R2.64], R7 at /*00d0*/")
    assert near.message == (
        "Warp Illegal Address reported at IMAD, which does not access memory: the PC may be "
        "imprecise; the nearest memory instruction before it is STG.E [R2.64], R7 at /*00d0*/"
    )
    assert dx.imprecise_pc("IMAD", "Warp Illegal Address", None).message.endswith("imprecise")


def test_nvdisasm_refusals_quote_the_first_message_and_only_differences_after_it():
    finding = dx.nvdisasm_refused(
        [("relocated image", "bad section"), ("data cleared", "bad section"),
         ("non-relocated image", "other")]
    )  # fmt: skip
    assert finding.code is FindingCode.NVDISASM_FAILED
    assert finding.message == (
        "nvdisasm refused the image: bad section; also refused: data cleared (the same "
        "message); non-relocated image (other)"
    )
    assert finding.evidence[0] == "relocated image: bad section"
    assert dx.nvdisasm_refused([]).message == "nvdisasm refused the image: no message"


def test_missing_and_failed_nvdisasm_findings():
    missing = dx.nvdisasm_missing("pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump")
    assert (missing.code, missing.remedy) == (
        FindingCode.NVDISASM_MISSING, "pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump",
    )  # fmt: skip
    failed = dx.nvdisasm_failed("timed out after 120 s")
    assert (failed.code, failed.message) == (
        FindingCode.NVDISASM_FAILED, "nvdisasm failed: timed out after 120 s",
    )  # fmt: skip
