"""A fault only the warp row records (a valid error PC, no lane with an exception) names the
warp's first valid lane, as cuda-gdb and LLDB do, without calling that lane faulting.

The dumps are the oob_store fixture with every lane row's exception zeroed (and, for one
test, the warp's valid-lanes mask rewritten), found through the reader's section offsets.
"""

from __future__ import annotations

import struct
from pathlib import Path

from postmortem import open_coredump
from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.codemap import find_faults
from postmortem.report.context import build_report
from postmortem.report.render import render
from tests.tooling import DUMPS, require_tool

SOURCE = DUMPS / "oob_store.nvcudmp"
_EXCEPTION = 32  # the lane row's `exception` field
_VALID_LANES = 12  # the warp row's `validLanesMask` field


def _warp_row_only(tmp_path: Path, valid_lanes: int | None = None) -> Path:
    data = bytearray(SOURCE.read_bytes())
    with open_coredump(SOURCE) as core:
        fault = find_faults(core)[0]
        assert fault.lane_record is not None and fault.warp_record is not None
        lanes = fault.lane_record.ref.section
        start, stride = int(core.sections.offset[lanes]), int(core.sections.entsize[lanes])
        for row in range(int(core.sections.size[lanes]) // stride):
            struct.pack_into("<I", data, start + row * stride + _EXCEPTION, 0)
        warp = fault.warp_record.ref
        row = int(core.sections.offset[warp.section])
        row += warp.row * int(core.sections.entsize[warp.section])
        if valid_lanes is not None:
            struct.pack_into("<I", data, row + _VALID_LANES, valid_lanes)
    path = tmp_path / "warp_row.nvcudmp"
    path.write_bytes(bytes(data))
    return path


def _report(path: Path):
    require_tool("nvdisasm")
    analysis = analyze_dump(path, AnalyzeOptions(LocalizeOptions(), cuda_gdb=False))
    return build_report(analysis)


def test_a_warp_row_fault_names_the_first_valid_lane_in_the_report(tmp_path):
    # GIVEN oob_store with no lane exception: only warp 2's row records the fault
    path = _warp_row_only(tmp_path)
    with open_coredump(path) as core:
        assert all(f.lane_record is None for f in find_faults(core))
    # WHEN it is analyzed
    report = _report(path)
    # THEN the site's fault stays the warp row's but names lane 0, the first valid lane,
    # and its thread, as cuda-gdb does
    (site,) = report["sites"]
    first = site["faults"][0]
    assert (first["source"], first["block"], first["warp"]) == ("warp", [5, 0, 0], 2)
    assert (first["lane"], first["thread"]) == (0, [64, 0, 0])
    text = render("analyze", report, "text")
    assert (
        "reported by the warp row: block (5,0,0) thread (64,0,0) (its first valid lane, as "
        "cuda-gdb names it; no lane row records the exception), device 0 sm 3 warp 2 lane 0"
    ) in text
    # AND it is not counted as a faulting lane
    assert site["census"]["lanes"] == 0
    # AND the report says that lane was chosen, not recorded faulting
    assert (
        "the fault is recorded on the warp row, not on a lane: lane 0 (thread (64,0,0)) of "
        "warp 2 named as the warp's first valid lane, as cuda-gdb names it, not as a lane "
        "recorded faulting"
    ) in site["forensics"]["notes"]


def test_the_lowest_bit_of_the_valid_lanes_mask_is_the_lane_named(tmp_path):
    # GIVEN lanes 0-3 of the warp not valid
    report = _report(_warp_row_only(tmp_path, 0xFFFF_FFF0))
    first = report["sites"][0]["faults"][0]
    # THEN lane 4 and its thread are named
    assert (first["source"], first["lane"], first["thread"]) == ("warp", 4, [68, 0, 0])


def test_a_warp_with_no_valid_lane_names_no_thread(tmp_path):
    report = _report(_warp_row_only(tmp_path, 0))
    first = report["sites"][0]["faults"][0]
    assert (first["source"], first["lane"], first["thread"]) == ("warp", None, None)
    assert "reported by the warp row: device 0, sm 3" in render("analyze", report, "text")
