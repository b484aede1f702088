"""Hang analysis without a disassembly: warps grouped by kernel and PC, and what limited it.

The deadlock patterns need the SASS at each PC (nvdisasm): they are tested end to end in
tests/tools/test_hang.py. Here: the grouping, the notes, and `barrier_kind`.
"""

from __future__ import annotations

import pytest

from postmortem import open_coredump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.hang.hang import analyze_hang, barrier_kind
from postmortem.analysis.state import WarpPcs, warp_pcs
from postmortem.codemap import CodeMap
from postmortem.cubin.sass import parse_sass
from postmortem.findings import FindingCode, Severity
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

STALLS = cubin("divergent_barrier").stalls
BARRIER, SPIN = STALLS["barrier"]["offset"], STALLS["spin"]["offset"]
KERNEL = "_Z24divergent_barrier_kernelPViPf"


def _hang(tmp_path, options, extra_warps=()):
    # GIVEN two blocks: warp 0 of each at the barrier, warps 1 and 2 spinning
    module = ModuleSpec("divergent_barrier")
    blocks = [
        BlockSpec(1, [
            WarpSpec([LaneSpec(BARRIER, lane=n) for n in range(32)], warp_id=0),
            WarpSpec([LaneSpec(SPIN, lane=n) for n in range(32)], warp_id=1),
            WarpSpec([LaneSpec(SPIN, lane=n) for n in range(32)], warp_id=2),
        ], (x, 0, 0), sm=x)
        for x in (0, 1)
    ]  # fmt: skip
    device = DeviceSpec([module], [GridSpec(1, module)], blocks)
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))) as core:
        warps = (*warp_pcs(core), *extra_warps)
        return analyze_hang(core, warps, options, CodeMap(core))


def test_warps_are_grouped_by_kernel_and_pc_most_lanes_first(tmp_path):
    hang = _hang(tmp_path, LocalizeOptions(nvdisasm=False))
    summary = [(g.grid_id, g.kernel, g.offset, g.warps, g.lanes, g.blocks) for g in hang.groups]
    assert summary == [(1, KERNEL, SPIN, 4, 128, 2), (1, KERNEL, BARRIER, 2, 64, 2)]
    # AND without instructions no barrier, loop or deadlock pattern is claimed
    assert all(g.instruction is None and g.barrier is None for g in hang.groups)
    assert not any(g.in_polling_loop for g in hang.groups)
    assert hang.findings == () and hang.disassemblies == ()


def test_without_disassembly_the_hang_analysis_says_it_is_limited(tmp_path):
    (note,) = _hang(tmp_path, LocalizeOptions(nvdisasm=False)).notes
    assert (note.code, note.severity) == (FindingCode.HANG_LIMITED, Severity.INFO)
    assert note.message == "nvdisasm not run (--no-disasm): no instructions, no barrier detection"


def test_a_missing_nvdisasm_is_a_note_of_the_hang_analysis(tmp_path):
    hang = _hang(tmp_path, LocalizeOptions(nvdisasm="/nonexistent/nvdisasm"))
    assert [n.message for n in hang.notes] == [
        "nvdisasm is not installed: no SASS instructions; native facts and the cubin's line "
        "table only"
    ]
    assert hang.findings == () and len(hang.groups) == 2


def test_warps_of_no_grid_or_of_an_unknown_grid_are_noted(tmp_path):
    # GIVEN a warp whose CTA row names no grid, and one of a grid the dump does not hold
    nameless = WarpPcs(0, None, None, 4, 0, ((0x40, 32),), ())
    unknown = WarpPcs(0, 9, (0, 0, 0), 4, 1, ((0x40, 32),), ())
    hang = _hang(tmp_path, LocalizeOptions(nvdisasm=False), (nameless, unknown))
    # THEN the first is left out, the second grouped with no kernel, and both are noted
    # (the notes of each grid in grid order)
    assert [n.message for n in hang.notes] == [
        "1 warp(s) name no grid (their CTA rows are too short): left out",
        "nvdisasm not run (--no-disasm): no instructions, no barrier detection",
        "grid 9: its kernel is in no module the dump holds",
    ]
    assert [(g.grid_id, g.kernel) for g in hang.groups if g.grid_id == 9] == [(9, None)]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("BAR.SYNC 0x0", "cta"),
        ("BAR.SYNC.DEFER_BLOCKING 0x0", "cta"),
        ("BAR.RED.POPC R0, 0x0, P0", "cta"),
        ("BAR.ARV 0x1, 0x40", None),
        ("BSYNC B0", "convergence"),
        ("WARPSYNC 0xffffffff", "convergence"),
        ("LDG.E.STRONG.SYS R0, desc[UR4][R4.64]", None),
    ],
)
def test_barrier_kind_tells_block_barriers_from_warp_ones(text, kind):
    (instruction,) = parse_sass(f"        /*0140*/                   {text} ;").instructions
    assert barrier_kind(instruction) == kind
