"""The wait model on kernel families the earlier hang rules were not written for: a cp.async
GEMM, a split-K lock, a grid-wide barrier (fixtures/cu), and the barriers of production cubins
(fixtures/corpus). Each family has a busy snapshot, which must draw no claim, and a stuck one,
which must; and across every reachable PC of real kernels, a warp that can still arrive is
never called a deadlock."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

import pytest

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fault.source import SourcePaths
from postmortem.analysis.hang.verdicts import model_findings
from postmortem.analysis.hang.waitfor import build_model
from postmortem.analysis.hang.waits import WaitKind, kernel_code_of
from postmortem.analysis.state import WarpPcs
from postmortem.cubin.sass import SassListing, parse_sass
from postmortem.findings import FindingCode, Severity
from postmortem.tools import find_tool
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
from tests.tooling import REPO, require_tool

FIXTURES = REPO / "fixtures"

CLAIMS = {
    FindingCode.DIVERGENT_BARRIER,
    FindingCode.SPIN_WAIT,
    FindingCode.CONVERGENCE_SPLIT,
    FindingCode.NAMED_BARRIER_STARVED,
    FindingCode.CIRCULAR_WAIT,
    FindingCode.PIPELINE_STALLED,
    FindingCode.COLLECTIVE_WAIT,
}


@pytest.fixture(scope="module", autouse=True)
def nvdisasm():
    require_tool("nvdisasm")


@cache
def disassembly(path: Path) -> str:
    return subprocess.run(
        [str(find_tool("nvdisasm")), "-c", "-ndf", str(path)],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip


def listing(path: Path) -> SassListing:
    return _listing_of(disassembly(path))


@cache
def _listing_of(text: str) -> SassListing:
    return parse_sass(text)


def site(name: str, kind: str) -> int:
    return int(cubin(name, "v8").stalls[kind]["offset"])


def after(name: str, offset: int, opcodes: tuple[str, ...]) -> int:
    """The first instruction at or after `offset` whose opcode is one of `opcodes`."""
    code = listing(FIXTURES / "cubins" / f"{name}.sm_90.v8.cubin")
    return next(
        i.offset for i in code.instructions if i.offset >= offset and i.base_opcode in opcodes
    )


def poll_pc(name: str) -> int:
    """The first PC of `name`'s kernel inside a memory poll loop (a compiler often peels the
    first read out of the loop: a lane there is not polling yet)."""
    code = kernel_code_of(listing(FIXTURES / "cubins" / f"{name}.sm_90.v8.cubin"))
    return next(
        i.offset for i in code.listing.instructions if code.wait_at(i.offset).kind is WaitKind.POLL
    )


def warp(warp_id: int, offset: int, registers: dict[int, int] | None = None) -> WarpSpec:
    return WarpSpec([LaneSpec(offset, registers=registers or {}) for _ in range(32)], warp_id)


def split_warp(warp_id: int, poll: int, rest: int, registers: dict[int, int]) -> WarpSpec:
    """Lane 0 polls at `poll`; the other 31 wait for it at the convergence point `rest`."""
    lanes = [LaneSpec(poll, lane=0, registers=registers)]
    lanes += [LaneSpec(rest, lane=n) for n in range(1, 32)]
    return WarpSpec(lanes, warp_id)


def hang(tmp_path: Path, name: str, grid_dim, blocks: list[BlockSpec], block_dim=(128, 1, 1)):
    module = ModuleSpec(name, "v8")
    grid = GridSpec(1, module, grid_dim=grid_dim, block_dim=block_dim)
    spec = DumpSpec([DeviceSpec([module], [grid], blocks)], layout="r580")
    path = write_tiny_dump(tmp_path / f"{name}.nvcudmp", spec)
    options = AnalyzeOptions(
        LocalizeOptions(sources=SourcePaths((FIXTURES / "cu",))), cuda_gdb=False
    )
    analysis = analyze_dump(path, options)
    assert analysis.hang is not None
    return analysis.hang


def codes(found) -> set[FindingCode]:
    return {f.code for f in found.findings}


# --- a cp.async GEMM (fixtures/cu/cp_async_gemm.cu) ---


def test_a_cp_async_gemm_caught_mid_iteration_is_busy_not_deadlocked(tmp_path):
    # GIVEN one warp held at __syncthreads() while the others of its block copy (DEPBAR), compute
    # (HMMA, after the previous barrier) or arrive: the picture of any running Ampere-style GEMM
    barrier = site("cp_async_gemm", "barrier")
    block = BlockSpec(
        1,
        [
            warp(0, barrier + 16),
            warp(1, site("cp_async_gemm", "depbar")),
            warp(2, site("cp_async_gemm", "mma")),
            warp(3, barrier),
        ],
        sm=3,
    )
    # WHEN it is analyzed
    found = hang(tmp_path, "cp_async_gemm", (4, 4, 1), [block], block_dim=(256, 1, 1))
    # THEN nothing is claimed, and the busy verdict says who can still arrive and why
    assert not codes(found) & CLAIMS
    (busy,) = [f for f in found.findings if f.code is FindingCode.BUSY_SNAPSHOT]
    assert busy.severity is Severity.INFO
    assert "no deadlock claimed" in busy.message
    arrive = [e for e in busy.evidence if "can still arrive" in e]
    assert len(arrive) == 2 and any("memory copies" in e for e in arrive)
    assert all("a path reaches the barrier" in e for e in arrive)
    assert "second dump" in (busy.caveat or "")


# --- a split-K lock (fixtures/cu/lock_spin.cu) ---

LOCKS = 0x7F00_0000_1000


def _lock_block(y: int, sm: int, lock_value: int) -> BlockSpec:
    poll, barrier = poll_pc("lock_spin"), site("lock_spin", "barrier")
    rest = after("lock_spin", poll, ("WARPSYNC", "BSYNC"))
    registers = {6: LOCKS & 0xFFFF_FFFF, 7: LOCKS >> 32, 4: lock_value, 3: y}
    return BlockSpec(
        1,
        [split_warp(0, poll, rest, registers), *(warp(n, barrier + 16) for n in (1, 2, 3))],
        (0, y, 0),
        sm,
    )


def test_a_lock_whose_holder_still_runs_is_a_spin_that_can_end(tmp_path):
    # GIVEN split 1 waits for the tile's lock while split 0 (its holder) adds its part
    between = site("lock_spin", "barrier") + 0x40
    holder = BlockSpec(1, [warp(n, between) for n in range(4)], (0, 0, 0), 5)
    found = hang(tmp_path, "lock_spin", (1, 2, 1), [_lock_block(1, 3, 0), holder])
    # THEN no claim: the holder has a path to the release
    assert not codes(found) & CLAIMS
    busy = [f for f in found.findings if f.code is FindingCode.BUSY_SNAPSHOT]
    assert busy and all(f.severity is Severity.INFO for f in busy)
    text = " ".join(e for f in busy for e in f.evidence)
    assert "a path reaches" in text


def test_a_lock_nobody_left_can_release_is_a_deadlock_that_names_the_word(tmp_path):
    # GIVEN both splits of a tile poll its lock, whose value (5) is neither's turn
    blocks = [_lock_block(0, 3, 5), _lock_block(1, 5, 5)]
    found = hang(tmp_path, "lock_spin", (1, 2, 1), blocks)
    # THEN the blocks' barrier waits on a poll only this grid's release could end
    (claim,) = [f for f in found.findings if f.code in CLAIMS]
    assert claim.code is FindingCode.DIVERGENT_BARRIER and claim.severity is Severity.ERROR
    evidence = "\n".join(claim.evidence)
    assert f"polls 0x{LOCKS:x} (R7:R6)" in evidence
    assert "last read 0x5 (R4" in evidence and "(R4 = 0x5, R3 = 0x0)" in evidence
    assert "its address comes" not in evidence or "c[0x0][0x220]" in evidence
    assert "LDG.E.STRONG.GPU" in evidence
    assert "outside the grid" in (claim.caveat or "")


# --- a grid-wide barrier (fixtures/cu/grid_sync.cu) ---

ARRIVED = 0x7F00_0000_2000


def _sync_block(x: int, sm: int) -> BlockSpec:
    poll, barrier = poll_pc("grid_sync"), site("grid_sync", "barrier")
    rest = after("grid_sync", poll, ("WARPSYNC", "BSYNC"))
    registers = {6: ARRIVED & 0xFFFF_FFFF, 7: ARRIVED >> 32}
    return BlockSpec(
        1,
        [split_warp(0, poll, rest, registers), *(warp(n, barrier + 16) for n in (1, 2, 3))],
        (x, 0, 0),
        sm,
    )


def test_a_grid_barrier_with_a_block_still_on_its_way_is_busy(tmp_path):
    late = BlockSpec(1, [warp(n, 0x30) for n in range(4)], (2, 0, 0), 7)
    found = hang(tmp_path, "grid_sync", (3, 1, 1), [_sync_block(0, 3), _sync_block(1, 5), late])
    assert not codes(found) & CLAIMS
    assert FindingCode.BUSY_SNAPSHOT in codes(found)


def test_a_grid_barrier_over_more_blocks_than_the_gpu_holds_names_the_unscheduled_blocks(tmp_path):
    # GIVEN 264 one-warp blocks launched, one on each of the 132 SMs, each polling the arrival
    # counter: the other 132 were never scheduled
    poll = poll_pc("grid_sync")
    rest = after("grid_sync", poll, ("WARPSYNC", "BSYNC"))
    registers = {6: ARRIVED & 0xFFFF_FFFF, 7: ARRIVED >> 32}
    blocks = [
        BlockSpec(1, [split_warp(0, poll, rest, registers)], (x, 0, 0), x) for x in range(132)
    ]
    found = hang(tmp_path, "grid_sync", (264, 1, 1), blocks, block_dim=(32, 1, 1))
    (claim,) = [f for f in found.findings if f.code in CLAIMS]
    # THEN a warning, not a proof: a block not yet scheduled would be the one to arrive
    assert claim.code is FindingCode.SPIN_WAIT and claim.severity is Severity.WARNING
    assert any("264 blocks and the dump holds 132, with no idle SM" in e for e in claim.evidence)
    assert any(f"polls 0x{ARRIVED:x}" in e for e in claim.evidence)
    assert any("own stores to that word" in e and "ATOM" in e for e in claim.evidence)
    assert "not in the dump" in claim.message


# --- every reachable PC of real kernels ---

REAL = [
    FIXTURES / "cubins" / "cp_async_gemm.sm_90.v8.cubin",
    FIXTURES / "cubins" / "lock_spin.sm_90.v8.cubin",
    FIXTURES / "cubins" / "named_barrier.sm_90.v8.cubin",
    FIXTURES / "corpus" / "cubins" / "xformers-0.0.35.C.21.sm_90a.cubin",
    FIXTURES / "corpus" / "cubins" / "nccl-2.32.3.libnccl.5.sm_90.cubin",
    FIXTURES / "corpus" / "cubins" / "sgl_kernel-0.3.21.common_ops.150.sm_90a.cubin",
    FIXTURES / "corpus" / "cubins" / "triton-3.9.0.fused_moe_like.sm_90.cubin",
    # machete's and FlashAttention-3's cubins take a minute between them: the slow tier
    *(
        pytest.param(FIXTURES / "corpus" / "cubins" / name, marks=pytest.mark.slow)
        for name in (
            "vllm-0.33.0.C_stable_libtorch.323.sm_90a.cubin",
            "vllm-0.33.0.vllm_fa3_C.118.sm_90a.cubin",
        )
    ),
]


@cache
def _functions(path: Path) -> tuple[SassListing, ...]:
    # One listing per function: nvdisasm prints them one after the other.
    parts = disassembly(path).split("//--------------------- .text.")[1:]
    return tuple(parse_sass("//--------------------- .text." + p) for p in parts)


@pytest.mark.parametrize("path", REAL, ids=lambda p: Path(p).name)
def test_a_warp_that_can_still_arrive_is_never_called_a_deadlock(path):
    # For every block-wide barrier of every function, and every PC reachable from the entry
    # that is neither a wait nor a poll: one warp waits at the barrier, another runs at that PC.
    checked = 0
    for code_listing in _functions(path):
        code = kernel_code_of(code_listing)
        graph = code.graph
        entry = code_listing.instructions[0].offset if code_listing.instructions else None
        reachable = graph.reachable(entry) if entry is not None else None
        if not reachable:
            continue
        barriers = [o for o in sorted(reachable) if code.wait_at(o).whole_block][:4]
        running = [o for o in sorted(reachable) if code.wait_at(o).kind is WaitKind.RUNNING]
        for barrier in barriers:
            for pc in running[:: max(len(running) // 60, 1)]:
                waiting = WarpPcs(0, 1, (0, 0, 0), 0, 0, ((barrier, 32),), ())
                other = WarpPcs(0, 1, (0, 0, 0), 0, 1, ((pc, 32),), ())
                model = build_model(code, [waiting, other])
                found = model_findings(code, model, None, hex, lambda w: [], None)
                claims = [f for f in found if f.code in CLAIMS]
                can = graph.reachable(pc)
                targets = code.arrivals(code.wait_at(barrier).barrier_id) | code.exits()
                if can is None or can & targets:
                    assert not claims, (path.name, hex(barrier), hex(pc), claims)
                else:
                    assert claims and "can never arrive" in "\n".join(claims[0].evidence)
                checked += 1
    assert checked > 0


# --- NCCL's device kernels (fixtures/corpus: nvidia-nccl-cu12 2.32.3) ---

NCCL = "corpus/nccl-2.32.3.libnccl.5.sm_90"
NCCL_LL = "_Z30ncclSymkDevKernel_AllGather_LL21ncclSymkDevWorkArgs4K"


def _nccl_code():
    functions = _functions(FIXTURES / "corpus" / "cubins" / "nccl-2.32.3.libnccl.5.sm_90.cubin")
    (ll,) = [f for f in functions if f.function == NCCL_LL]
    return kernel_code_of(ll)


def _nccl_hang(tmp_path: Path, blocks: list[BlockSpec]):
    module = ModuleSpec(NCCL, "v8")
    grid = GridSpec(1, module, kernel=NCCL_LL, grid_dim=(len(blocks), 1, 1), block_dim=(128, 1, 1))
    spec = DumpSpec([DeviceSpec([module], [grid], blocks)], layout="r580")
    path = write_tiny_dump(tmp_path / "nccl.nvcudmp", spec)
    analysis = analyze_dump(path, AnalyzeOptions(LocalizeOptions(), cuda_gdb=False))
    assert analysis.hang is not None
    return analysis.hang


def _nccl_polls() -> list[int]:
    code = _nccl_code()
    starts = {}
    for instruction in code.listing.instructions:
        wait = code.wait_at(instruction.offset)
        if wait.kind is WaitKind.POLL and wait.poll is not None:
            starts.setdefault(wait.poll.loop_start, instruction.offset)
    return sorted(starts.values())


def test_nccl_ll_receive_loops_are_recognized_by_their_structure():
    # Every LL read loop of the kernel (a system-scope strong load whose value the loop's exit
    # tests, no store each time round) is a poll, and none is longer than a retry loop.
    code = _nccl_code()
    polls = _nccl_polls()
    assert len(polls) >= 4
    for pc in polls:
        poll = code.wait_at(pc).poll
        assert poll is not None and "STRONG.SYS" in poll.load.opcode
        assert len(code.graph.loop_instructions(code.graph.loop_of(pc))) < 64


def test_an_nccl_kernel_caught_while_a_warp_still_copies_is_busy(tmp_path):
    poll = _nccl_polls()[0]
    code = _nccl_code()
    running = next(
        i.offset
        for i in code.listing.instructions
        if i.offset > poll
        and code.wait_at(i.offset).kind is WaitKind.RUNNING
        and any(code.graph.reachable(i.offset) or ())
    )
    block = BlockSpec(
        1, [warp(0, poll), warp(1, poll), warp(2, running), warp(3, running)], (0, 0, 0), 3
    )
    found = _nccl_hang(tmp_path, [block])
    assert not codes(found) & CLAIMS


def test_an_nccl_kernel_whose_every_warp_polls_names_the_loop_and_claims_no_deadlock(tmp_path):
    # GIVEN every warp of two blocks in an LL receive loop (a peer that never sent)
    poll = _nccl_polls()[0]
    blocks = [BlockSpec(1, [warp(n, poll) for n in range(4)], (x, 0, 0), 3 + x) for x in (0, 1)]
    found = _nccl_hang(tmp_path, blocks)
    (finding,) = [f for f in found.findings if f.code in CLAIMS]
    # THEN a warning that counts every polling lane and names the loop, never an error
    assert finding.code in (FindingCode.SPIN_WAIT, FindingCode.COLLECTIVE_WAIT)
    assert finding.severity is Severity.WARNING
    assert finding.message.startswith("256 lane(s) in 8 warp(s) of 2 blocks")
    assert f"0x{poll:04x}" in finding.evidence[0] and "STRONG.SYS" in finding.evidence[0]
    assert "another GPU" in finding.message


# --- absurd loop bounds: evidence, never proof ---


@pytest.mark.parametrize(("bound", "flagged"), [(0xFFFF_FFFF, True), (4096, False)])
def test_a_loop_whose_bound_reads_negative_is_shown_as_evidence(tmp_path, bound, flagged):
    # GIVEN every warp of a split-K block adding its part, in the loop bounded by tile_size
    code = kernel_code_of(listing(FIXTURES / "cubins" / "lock_spin.sm_90.v8.cubin"))
    pc, test = next(
        (i.offset, t)
        for i in code.listing.instructions
        if i.offset > site("lock_spin", "barrier")
        for t in code.wait_at(i.offset).loop_tests
        if "UR" in t.operands[3]
    )
    uniform = int(test.operands[3].strip()[2:])
    warps = [WarpSpec([LaneSpec(pc) for _ in range(32)], n, uniform_registers={uniform: bound})
             for n in range(4)]  # fmt: skip
    found = hang(tmp_path, "lock_spin", (1, 1, 1), [BlockSpec(1, warps, (0, 0, 0), 3)])
    # THEN a bound read as -1 is named, as evidence, and an ordinary one is not
    bounds = [f for f in found.findings if f.code is FindingCode.LOOP_BOUND]
    assert not codes(found) & CLAIMS
    if not flagged:
        assert bounds == []
        return
    (finding,) = bounds
    assert finding.severity is Severity.INFO
    assert f"UR{uniform} = 0xffffffff (-1 as signed, 4,294,967,295 unsigned)" in finding.message
    assert "not proof" in (finding.caveat or "")
