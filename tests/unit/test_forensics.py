"""Forensics of a faulting instruction given as text: access, lane addresses, arguments."""

from __future__ import annotations

import struct

from postmortem import open_coredump
from postmortem.analysis.forensics.forensics import examine
from postmortem.codemap import CodeMap, find_faults
from postmortem.cubin.sass import parse_sass
from postmortem.findings import FindingCode
from postmortem.report.forensics import forensics_json
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
OUT = 0x7F00_1000_0000  # oob_kernel(float* out, int n, float value)
PARAMS = struct.pack("<Qif", OUT, 64, 1.0)


def _examine(tmp_path, text, lanes, params=PARAMS):
    (instruction,) = parse_sass(f"        /*00d0*/                   {text} ;").instructions
    module = ModuleSpec("oob_store")
    device = DeviceSpec(
        [module], [GridSpec(1, module, params=params)], [BlockSpec(1, [WarpSpec(lanes)])]
    )
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))) as core:
        code_map = CodeMap(core)
        return examine(core, code_map, find_faults(core, code_map), instruction)


def _lane(n, address):
    return LaneSpec(FAULT, 14, lane=n, registers={2: address & 0xFFFF_FFFF, 3: address >> 32})


def test_a_store_past_its_buffer_is_traced_to_the_pointer_argument(tmp_path):
    # GIVEN lanes 3-5 storing 4096 bytes apart, from 1 MiB past `out`
    lanes = [_lane(n, OUT + 0x10_0000 + 4096 * n) for n in (3, 4, 5)]
    # WHEN the planted STG is examined
    forensics = _examine(tmp_path, "STG.E desc[UR4][R2.64], R7", lanes)
    # THEN the access, formula, addresses, spread and argument all follow
    assert (forensics.access.space, forensics.access.kind, forensics.formula) == (
        "global", "store", "R3:R2",
    )  # fmt: skip
    assert forensics.lane_set == "faulting lanes"
    assert [a.address for a in forensics.lanes] == [OUT + 0x10_0000 + 4096 * n for n in (3, 4, 5)]
    assert forensics.spread.stride_bytes == 4096
    assert forensics.arguments.culprit.ordinal == 0
    assert forensics.arguments.culprit.distance == 0x10_0000 + 3 * 4096
    assert [(c.check, c.verdict) for c in forensics.checks] == [("global-segment", None)]
    assert forensics.notes == ()


def test_an_instruction_that_touches_no_memory_has_no_address_but_still_arguments(tmp_path):
    forensics = _examine(tmp_path, "IMAD R7, R0, R5, RZ", [_lane(0, OUT)])
    assert forensics.access is None and forensics.lanes == ()
    assert forensics.arguments is not None
    (note,) = forensics.notes
    assert note.code is FindingCode.FORENSICS_LIMITED
    assert note.message == "IMAD does not access memory: there is no address to compute"


def test_missing_registers_and_parameters_are_noted(tmp_path):
    forensics = _examine(tmp_path, "STG.E desc[UR4][R40.64], R7", [_lane(0, OUT)], params=None)
    assert forensics.arguments is None
    messages = [n.message for n in forensics.notes]
    assert messages[0].startswith("registers not in the dump: R40")
    assert messages[1].startswith("the dump holds no parameter memory for the grid")


def test_a_broadcast_store_is_described_as_one_with_no_lane_off_a_stride(tmp_path):
    # GIVEN a warp's 32 lanes storing to 4 floats 4 bytes apart, 8 lanes to each
    lanes = [_lane(n, OUT + 0x10_0000 + 4 * (n // 8)) for n in range(32)]
    # WHEN the planted STG is examined and projected for the report
    forensics = _examine(tmp_path, "STG.E desc[UR4][R2.64], R7", lanes)
    spread = forensics_json(forensics)["spread"]
    # THEN the spread is a broadcast: no per-lane stride, no lane "off the stride"
    assert spread["pattern"] == "broadcast"
    assert (spread["count"], spread["distinct"], spread["span_bytes"]) == (32, 4, 12)
    assert (spread["stride_bytes"], spread["irregular_lanes"]) == (None, [])
    assert (spread["address_step_bytes"], spread["lanes_per_address"]) == (4, [8, 8])
    assert spread["description"] == "4 distinct addresses 4 bytes apart, 8 lanes each"


def test_a_strided_store_keeps_its_stride_in_the_report(tmp_path):
    lanes = [_lane(n, OUT + 0x10_0000 + 4096 * n) for n in (3, 4, 5)]
    spread = forensics_json(_examine(tmp_path, "STG.E desc[UR4][R2.64], R7", lanes))["spread"]
    assert (spread["pattern"], spread["stride_bytes"], spread["irregular_lanes"]) == (
        "strided", 4096, [],
    )  # fmt: skip
    assert spread["description"] == "stride 4096 bytes per lane"
