"""Hang mode: where every warp is stuck, and the deadlock patterns, against planted truth.

Stall PCs and divergent blocks come from what the builder planted (truth.json); the
source lines of the barrier and of the spin loop come from the `// @pm barrier` and
`// @pm spin` markers in fixtures/cu/divergent_barrier.cu. Every test that reads a dump runs
on both corpora (`corpus`: relocated images with only code addressed, and with every
SHF_ALLOC section addressed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fault.source import SourcePaths
from postmortem.analysis.hang.barriers import barrier_kind
from postmortem.cubin.sass import SassInstruction
from tests.conftest import FIXTURES, dump_paths, truth_of
from tests.tooling import DUMPS, require_tool

sys.path.insert(0, str(FIXTURES / "builder"))
import markers  # noqa: E402

SOURCE = FIXTURES / "cu" / "divergent_barrier.cu"
SOURCES = {
    "_Z24divergent_barrier_kernelPViPf": SOURCE,
    "_Z16warp_specializedPfPKfi": FIXTURES / "cu" / "named_barrier.cu",
    "_Z26cross_device_reduce_1stageIfLi8EEvPKPN10all_reduce6SignalES2_PT_PKS5_ii": FIXTURES
    / "cu"
    / "all_reduce.cu",
}
HANGS = [p for p in dump_paths() if truth_of(p)["hang"]]
FAULTS = [p for p in dump_paths() if truth_of(p)["fault"] is not None]


def analyze(path: Path, mode: str = "auto", disassemble: bool = True):
    options = LocalizeOptions(nvdisasm=disassemble, sources=SourcePaths((FIXTURES / "cu",)))
    return analyze_dump(path, AnalyzeOptions(options, mode=mode, cuda_gdb=False))


@pytest.fixture(scope="module", autouse=True)
def nvdisasm():
    require_tool("nvdisasm")


@pytest.mark.parametrize(
    "path", [p for p in HANGS if "hang_barrier" in p.name], ids=lambda p: p.name
)
def test_divergent_syncthreads_is_diagnosed_in_the_planted_blocks(path, corpus):
    truth = truth_of(path)
    hang = analyze(corpus / path.name).hang
    assert hang is not None
    flagged = [f for f in hang.findings if f.code.value == "divergent-barrier"]
    planted = [tuple(b["block_idx"]) for b in truth["divergent_barrier_blocks"]]
    # blocks split alike are one finding, which names each of them
    (finding,) = flagged
    assert finding.message.startswith(f"{len(planted)} blocks (")
    blocks = [
        e.split(":")[0]
        for e in finding.evidence[1:]
        if e.startswith("block ") and e.endswith("at the barrier")
    ]
    assert blocks == [f"block ({x},{y},{z})" for x, y, z in planted]
    barrier_line = markers.marker_location(SOURCE, "barrier")[1]
    assert all(f"divergent_barrier.cu:{barrier_line}" in f.evidence[0] for f in flagged)


@pytest.mark.parametrize("path", HANGS, ids=lambda p: p.name)
def test_stuck_groups_are_the_planted_stall_sites(path, corpus):
    truth = truth_of(path)
    hang = analyze(corpus / path.name).hang
    groups = {g.offset: g for g in hang.groups}
    for stall in truth["stall_groups"]:
        group = groups[stall["offset"]]
        assert group.warps == len(stall["warps"])
        source = SOURCES[stall["kernel"]]
        line = markers.marker_location(source, stall["kind"])[1]
        assert (Path(group.chain[0].file).name, group.chain[0].line) == (source.name, line)
        assert group.quoted[0].text is not None and f"@pm {stall['kind']}" in group.quoted[0].text
        # __syncthreads() in divergent_barrier.cu, named barrier 1 in named_barrier.cu
        assert (group.barrier in ("cta", "named")) == (stall["kind"] == "barrier")
        # named_barrier.cu's "spin" site is its producers' copy loop (a store each time
        # round): work, not a poll
        polls = stall["kind"] == "spin" and source.name != "named_barrier.cu"
        assert group.in_polling_loop == polls


def test_every_warp_spinning_is_a_likely_spin_wait(corpus):
    hang = analyze(corpus / "hang_spin.nvcudmp").hang
    assert [f.code.value for f in hang.findings] == ["spin-wait"]
    spin_line = markers.marker_location(SOURCE, "spin")[1]
    assert f"divergent_barrier.cu:{spin_line}" in hang.findings[0].evidence[0]
    assert "only the kernel's own stores write" in hang.findings[0].message
    assert "second dump" in hang.findings[0].caveat


@pytest.mark.parametrize("name", ["midflight", "sm_fault.twin_r400"])
def test_a_well_behaved_kernel_dumped_mid_flight_gets_no_deadlock_flag(name, corpus):
    analysis = analyze(corpus / f"{name}.nvcudmp")
    assert analysis.hang is not None
    assert analysis.hang.groups
    assert analysis.hang.findings == ()


@pytest.mark.parametrize("path", FAULTS, ids=lambda p: p.name)
def test_a_fault_dump_is_never_called_a_hang(path, corpus):
    analysis = analyze(corpus / path.name, disassemble=False)
    assert analysis.sites and analysis.hang is None


def test_hang_mode_on_a_fault_dump_groups_its_warps_without_a_barrier_flag(corpus):
    analysis = analyze(corpus / "oob_store.nvcudmp", mode="hang")
    assert analysis.hang is not None and analysis.sites
    assert sum(g.warps for g in analysis.hang.groups) >= 7
    assert not [f for f in analysis.hang.findings if f.code.value == "divergent-barrier"]


def test_without_nvdisasm_hang_mode_says_what_it_cannot_see(corpus):
    hang = analyze(corpus / "hang_barrier.nvcudmp", disassemble=False).hang
    assert hang.findings == ()
    assert any("no barrier detection" in note.message for note in hang.notes)


def _instruction(opcode):
    return SassInstruction(0x140, None, opcode, ("0x0",), f"{opcode} 0x0", (), ())


@pytest.mark.parametrize(
    ("opcode", "kind"),
    [("BAR.SYNC", "cta"), ("BAR.SYNC.DEFER_BLOCKING", "cta"), ("BAR.RED.POPC", "cta"),
     ("BAR.ARV", None), ("BSYNC", "convergence"), ("WARPSYNC", "convergence"),
     ("BSSY", None), ("LDG.E", None)],
)  # fmt: skip
def test_barrier_kinds(opcode, kind):
    assert barrier_kind(_instruction(opcode)) == kind


def test_the_driver_s_barrier_fields_back_the_barrier_wait_where_the_rows_hold_them():
    # GIVEN hang_barrier (r590 warp rows: barrierScope, additionalBarrierInfo) and its r400
    # twin, whose rows end before those fields
    groups = {
        name: {g.offset: g for g in analyze(DUMPS / f"{name}.nvcudmp").hang.groups}
        for name in ("hang_barrier", "hang_barrier.twin_r400")
    }
    barrier = next(g for g in groups["hang_barrier"].values() if g.barrier == "cta")
    # THEN the r590 dump's barrier group says what the driver says, the twin's says nothing
    assert barrier.driver_barrier == "block-wide barrier (BAR.SYNC 0x0: CTA-wide barrier 0)"
    assert groups["hang_barrier.twin_r400"][barrier.offset].driver_barrier is None
    assert all(g.driver_barrier is None for g in groups["hang_barrier"].values() if not g.barrier)
    (finding,) = analyze(DUMPS / "hang_barrier.nvcudmp").hang.findings
    assert any("the driver's warp rows of the waiting warps" in e for e in finding.evidence)
