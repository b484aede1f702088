"""Hang dumps: where every warp is stuck, what each waits on, and who can still arrive.

Every live warp is grouped by kernel and PC; each group gets the SASS instruction there, its
inline chain and source line (one nvdisasm run per kernel) and its wait (`waits.py`). The
verdicts come from one model of who waits for whom (`waitfor.py`, `verdicts.py`): a deadlock
only where a participant can never arrive, a busy snapshot where all can, a stuck poll with
its word and its writer. Beside it, two readings that know more than the model of their own
barriers:

- a named barrier (`BAR.SYNC id, count`, as warp-specialized kernels use them) that only
  its participants meet at: waiting is a deadlock only when fewer threads remain in the
  block than the barrier counts (those that would arrive have exited);
- mbarrier waits of warp-specialized pipelines (`pipeline.py`): a running pipeline, a
  circular wait, or consumers whose producer is gone.

A running loop whose exit compares against an absurd bound is shown as evidence (`lanes.py`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from postmortem.analysis.fault.calls import CallStack, unwind_lane
from postmortem.analysis.fault.disassembly import disassemble_function
from postmortem.analysis.fault.inline import FrameName, NamedChain, line_table_chain, reconcile
from postmortem.analysis.fault.options import LocalizeOptions
from postmortem.analysis.fault.source import FunctionAt, QuotedLine, function_finder, quote
from postmortem.analysis.hang.barriers import (
    barrier_kind,
    barrier_operands,
    deferred_barrier,
    driver_barrier,
)
from postmortem.analysis.hang.flags import (
    find_warp,
    lanes_at,
    poll_lanes,
    poll_released,
    register_reader,
    waited_word,
)
from postmortem.analysis.hang.lanes import absurd_bound, lane_states
from postmortem.analysis.hang.pipeline import (
    IndexedListing,
    mbarrier_wait,
    pipeline_findings,
    role_at,
)
from postmortem.analysis.hang.verdicts import model_findings
from postmortem.analysis.hang.waitfor import WaitEdge, WarpWait, build_model, wait_edges
from postmortem.analysis.hang.waits import Wait, WaitKind, kernel_code_of
from postmortem.analysis.state import WarpPcs, kernel_code, kernel_of, pc_groups
from postmortem.codemap import CodeMap
from postmortem.coredump.reader import Coredump
from postmortem.cubin.inspect import Function
from postmortem.cubin.nvdisasm import Disassembly
from postmortem.cubin.sass import SassInstruction, SassListing, SourceFrame
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import CodeLocation, Dim3, Lane, Warp
from postmortem.spelling import SHOWN_BLOCKS, blocks_text, dim3_text


@dataclass(frozen=True, slots=True)
class StuckGroup:
    """The warps of one kernel stuck at one PC."""

    device_index: int
    grid_id: int
    kernel: str | None
    offset: int
    warps: int
    lanes: int
    blocks: int
    instruction: SassInstruction | None
    chain: tuple[SourceFrame, ...]
    quoted: tuple[QuotedLine, ...]
    barrier: str | None
    """"cta" (`BAR.SYNC 0` without a count, BAR.RED: the block-wide barrier), "named"
    (`BAR.SYNC id, count`: only its participants meet there), "mbarrier" (a phase check of
    a pipeline's barrier, or its retry loop), "cluster" (`UCGABAR_WAIT`: every block of the
    cluster meets there), "convergence" (BSYNC, WARPSYNC) or None."""
    in_polling_loop: bool
    """The PC lies in a short backward loop that reads memory."""
    frame_names: tuple[FrameName | None, ...] = ()
    """The function of each frame of `chain`, from the line table (else None)."""
    barrier_id: int | None = None
    """A CTA barrier's id when the instruction gives it as a number."""
    barrier_threads: int | None = None
    """A named barrier's thread count when the instruction gives it as a number."""
    role: str | None = None
    """"producer" or "consumer": the warp role of the code path the PC is on (the first TMA
    load or tensor-core instruction ahead of it), when it says."""
    calls: CallStack | None = None
    """The call stack of the group's first lane, when it is inside a called function."""
    driver_barrier: str | None = None
    """What the driver's warp rows (r590+) say of the group's warps at a barrier: its scope
    and its own words; None when the rows say nothing."""
    waits_at: int | None = None
    """The offset of the deferred-blocking barrier just before `offset` that the warps wait
    at (`instruction` and `chain` are then the barrier's), else None."""
    wait: Wait | None = None
    """What the warps at this PC wait on (the wait model: `waits.py`); None without a listing."""
    loop_bound: str | None = None
    """For warps running in a loop: an exit compare's operand in the first lane's registers
    that reads as an absurd bound (`waits.absurd_bound`), else None."""
    lane_states: tuple[tuple[str, int], ...] = ()
    """The convergence state (r575+ lane rows: cbuThreadState, in cuda-gdb's words) of the
    lanes of the group's first warp, with how many lanes are in each; () when not recorded."""


@dataclass(frozen=True, slots=True)
class HangAnalysis:
    """Where everything is stuck, and why it may be."""

    groups: tuple[StuckGroup, ...]
    """Most populous first."""
    findings: tuple[Finding, ...]
    """The deadlock patterns seen (divergent barrier, convergence split, spin-wait), each
    with its evidence and what it does not prove."""
    notes: tuple[Finding, ...]
    """What limited the analysis (no nvdisasm, no line info)."""
    disassemblies: tuple[Disassembly, ...] = ()
    """The listing of each kernel disassembled, in grid order (one per distinct function);
    each says which copy of the image nvdisasm read."""
    wait_for: tuple[WaitEdge, ...] = ()
    """The wait-for graph's first `WAIT_EDGES_SHOWN` edges: who waits on whom, and whether
    each can still do its part."""
    wait_for_total: int = 0
    """How many edges the wait-for graph has in all."""


WAIT_EDGES_SHOWN = 256


def analyze_hang(
    core: Coredump, warps: Sequence[WarpPcs], options: LocalizeOptions, code_map: CodeMap
) -> HangAnalysis:
    """Group the warps by kernel and PC, read their instructions, flag deadlock patterns."""
    by_grid: dict[tuple[int, int], list[WarpPcs]] = defaultdict(list)
    unplaced = 0
    for warp in warps:
        if warp.grid_id is None:
            unplaced += 1  # short CTA rows: no kernel to read its PCs in
            continue
        by_grid[(warp.device_index, warp.grid_id)].append(warp)
    groups: list[StuckGroup] = []
    findings: list[Finding] = []
    notes: list[str] = []
    if unplaced:
        notes.append(f"{unplaced} warp(s) name no grid (their CTA rows are too short): left out")
    listings: list[Disassembly] = []
    edges: list[WaitEdge] = []
    total_edges = 0
    for (device, grid_id), members in sorted(by_grid.items()):
        kernel = kernel_of(core, code_map, device, grid_id)
        result, note = _listing(core, code_map, device, grid_id, options)
        notes.extend([note] if note else [])
        listings.extend([result] if result else [])
        listing = result.listing if result else None
        indexed = IndexedListing(listing) if listing else None
        code = kernel_code(core, code_map, device, grid_id)
        finder = function_finder(options.sources)
        native = partial(_native, code_map, code, finder) if code else None
        kernel_groups = _groups(device, grid_id, kernel, members, indexed, options, native)
        if code is not None:
            kernel_groups = _with_calls(
                core, code_map, device, code[0], kernel_groups, members, result, finder
            )
        kernel_groups = [_with_driver_barrier(g, members) for g in kernel_groups]
        groups.extend(kernel_groups)
        by_offset = {g.offset: g for g in kernel_groups}
        if indexed is not None:
            found, grid_edges, grid_total = _model_findings(
                core, device, grid_id, code, kernel, members, indexed, by_offset,
                WAIT_EDGES_SHOWN - len(edges),
            )  # fmt: skip
            findings.extend(found)
            edges.extend(grid_edges)
            total_edges += grid_total
        findings.extend(_named_barriers(members, by_offset))
        if indexed is not None:
            where = {offset: _where(offset, by_offset) for offset in by_offset}
            block_warps = _block_warps(core, device, grid_id)
            base = code[0].section_address if code is not None else None
            describe = (
                None if base is None
                else lambda w, wait, b=base, d=device: waited_word(
                    core, d, w, wait.instruction, b + w.lanes_at[0][0]
                )
            )  # fmt: skip
            findings.extend(pipeline_findings(members, indexed, block_warps, where, describe))
    groups.sort(key=lambda g: (-g.lanes, g.device_index, g.grid_id, g.offset))
    findings.extend(_bound_findings(groups))
    # Grids of one kernel share one (memoized) disassembly: listed once.
    unique = tuple({id(d): d for d in listings}.values())
    limits = tuple(
        Finding(FindingCode.HANG_LIMITED, Severity.INFO, n) for n in dict.fromkeys(notes)
    )
    return HangAnalysis(tuple(groups), tuple(findings), limits, unique, tuple(edges), total_edges)


def _listing(
    core: Coredump, code_map: CodeMap, device: int, grid_id: int, options: LocalizeOptions
) -> tuple[Disassembly | None, str | None]:
    code = kernel_code(core, code_map, device, grid_id)
    if code is None:
        return None, f"grid {grid_id}: its kernel is in no module the dump holds"
    location, function = code
    if not options.nvdisasm.run:
        return None, "nvdisasm not run (--no-disasm): no instructions, no barrier detection"
    result, note = disassemble_function(
        core, code_map, location.module, function.symbol_index,
        location.section_address, options,
    )  # fmt: skip
    return result, (note.message if note else None)


def _groups(
    device: int,
    grid_id: int,
    kernel: str | None,
    warps: Sequence[WarpPcs],
    indexed: IndexedListing | None,
    options: LocalizeOptions,
    native: Callable[[int], NamedChain | None] | None = None,
) -> list[StuckGroup]:
    found = []
    listing = indexed.listing if indexed else None
    for group in pc_groups(warps):
        instruction = listing.at(group.offset) if listing else None
        waits = indexed is not None and mbarrier_wait(indexed, group.offset) is not None
        deferred = deferred_barrier(listing, group.offset) if listing and not waits else None
        instruction = deferred or instruction
        at = deferred.offset if deferred else group.offset
        named, _ = reconcile(
            native(at) if native else None,
            instruction.inline_chain if instruction else (),
        )
        chain = named.frames
        wait = kernel_code_of(indexed.listing, indexed).wait_at(group.offset) if indexed else None
        found.append(
            StuckGroup(
                device, grid_id, kernel, group.offset, group.warps, group.lanes, group.blocks,
                instruction, chain,
                quote(chain, options.sources) if chain else (),
                "mbarrier" if waits else barrier_kind(instruction),
                wait is not None and wait.kind is WaitKind.POLL,
                named.names,
                *barrier_operands(instruction),
                role_at(indexed, group.offset) if indexed is not None else None,
                waits_at=deferred.offset if deferred else None,
                wait=wait,
            )
        )  # fmt: skip
    return found


def _with_calls(
    core: Coredump,
    code_map: CodeMap,
    device_index: int,
    location: CodeLocation,
    groups: list[StuckGroup],
    warps: Sequence[WarpPcs],
    listing: Disassembly | None,
    finder: FunctionAt,
) -> list[StuckGroup]:
    # One lane per group: the first warp there, its first lane at the group's PC.
    found = []
    for group in groups:
        member = next((w for w in warps if any(o == group.offset for o, _ in w.lanes_at)), None)
        pc = location.section_address + group.offset
        warp = find_warp(core, device_index, member.sm_id, member.warp_id) if member else None
        lanes = lanes_at(core, warp, pc) if warp else ()
        lane = next(iter(lanes), None)
        stack = unwind_lane(core, code_map, lane, pc, listing, finder) if lane else None
        with_calls = replace(group, calls=stack) if stack and stack.call_depth else group
        bound = _loop_bound(core, group, warp, lane)
        found.append(replace(with_calls, lane_states=lane_states(lanes), loop_bound=bound))
    return found


def _loop_bound(
    core: Coredump, group: StuckGroup, warp: Warp | None, lane: Lane | None
) -> str | None:
    tests = group.wait.loop_tests if group.wait is not None else ()
    if not tests or warp is None or lane is None:
        return None
    read = register_reader(core.registers(lane), core.uniform_registers(warp))
    return next((b for t in tests if (b := absurd_bound(t, read)) is not None), None)


def _bound_findings(groups: Sequence[StuckGroup]) -> list[Finding]:
    return [
        Finding(
            FindingCode.LOOP_BOUND,
            Severity.INFO,
            f"{g.warps} warp(s) of grid {g.grid_id} run a loop at 0x{g.offset:04x} whose exit "
            f"compares against an absurd bound: {g.loop_bound}",
            (f"the first lane's registers at 0x{g.offset:04x}",),
            caveat="evidence of a runaway loop (a length or count read wrong), not proof: the "
            "register may be reused, and a second dump shows whether the warps still loop",
        )  # fmt: skip
        for g in groups
        if g.loop_bound is not None
    ]


def _model_findings(
    core: Coredump,
    device: int,
    grid_id: int,
    code: tuple[CodeLocation, Function] | None,
    kernel: str | None,
    members: Sequence[WarpPcs],
    indexed: IndexedListing,
    by_offset: dict[int, StuckGroup],
    edge_room: int,
) -> tuple[list[Finding], tuple[WaitEdge, ...], int]:
    kernel_code = kernel_code_of(indexed.listing, indexed)
    base = code[0].section_address if code is not None else None

    def released(warp: WarpWait) -> bool | None:
        poll = warp.wait.poll
        if base is None or poll is None:
            return None
        return poll_released(core, device, warp.warp, poll, base + warp.pc)

    model = build_model(kernel_code, members, released)

    def describe(warp: WarpWait) -> list[str]:
        poll = warp.wait.poll
        if base is None or poll is None:
            return []
        return poll_lanes(core, device, warp.warp, poll.load, poll.test, base + warp.pc)

    findings = model_findings(
        kernel_code, model, kernel, partial(_where_at, groups=by_offset, listing=indexed.listing),
        describe,
        _grid_note(core, device, grid_id, members),
    )  # fmt: skip
    edges, total = wait_edges(model, grid_id, max(edge_room, 0))
    return findings, edges, total


def _where_at(offset: int, groups: dict[int, StuckGroup], listing: SassListing) -> str:
    if offset in groups:
        return _where(offset, groups)
    instruction = listing.at(offset)
    chain = instruction.inline_chain if instruction else ()
    return (
        f"0x{offset:04x}"
        + (f" {instruction.text}" if instruction else "")
        + (f" ({chain[0].file}:{chain[0].line})" if chain else "")
    )


def _grid_note(core: Coredump, device: int, grid_id: int, members: Sequence[WarpPcs]) -> str | None:
    """Blocks of the grid the dump does not hold, when no SM is idle: some may never have been
    scheduled (and so never run the code the others wait for)."""
    grid = core.find_grid(device, grid_id)
    dims = grid.grid_dim if grid else None
    if dims is None:
        return None
    present = {w.block_idx for w in members if w.block_idx is not None}
    total = dims[0] * dims[1] * dims[2]
    if len(present) >= total:
        return None
    idle = sum(1 for sm in core.sms(core.device(device)) if not core.ctas(sm))
    if idle:
        return None  # room was left: the blocks not in the dump have exited
    return (
        f"the grid has {total} blocks and the dump holds {len(present)}, with no idle SM: "
        "blocks not yet scheduled cannot run the code the others wait for until they leave"
    )


def _with_driver_barrier(group: StuckGroup, warps: Sequence[WarpPcs]) -> StuckGroup:
    said = driver_barrier(warps, group.offset)
    return group if said is None else replace(group, driver_barrier=said)


def _block_warps(core: Coredump, device: int, grid_id: int) -> int | None:
    grid = core.find_grid(device, grid_id)
    dims = grid.block_dim if grid else None
    return None if dims is None else -(-(dims[0] * dims[1] * dims[2]) // 32)


def _native(
    code_map: CodeMap, code: tuple[CodeLocation, Function], finder: FunctionAt, offset: int
) -> NamedChain | None:
    location, function = code
    # The function holding the PC: a called function's clone, not the kernel around it.
    summary = code_map.summary(location.module)
    inner = summary.find_function(location.section_address + offset) if summary else None
    return line_table_chain(code_map, location.module, inner or function, offset, finder)


def _where(offset: int, groups: dict[int, StuckGroup]) -> str:
    group = groups.get(offset)
    text = f"0x{offset:04x}"
    if group and group.waits_at is not None:
        text += f" (held after the barrier at 0x{group.waits_at:04x})"
    if group and group.instruction:
        text += f" {group.instruction.text}"
    if group and group.chain:
        text += f" ({group.chain[0].file}:{group.chain[0].line})"
    return text


@dataclass(frozen=True, slots=True)
class _Split:
    """One block's warps at a block barrier and elsewhere."""

    block: Dim3
    waiting: list[WarpPcs]
    elsewhere: list[WarpPcs]


def _named_barriers(warps: Sequence[WarpPcs], groups: dict[int, StuckGroup]) -> list[Finding]:
    """Named-barrier waits, judged against the barrier's own count: blocks alike are one
    finding, as for the block-wide barrier."""
    by_block: dict[Dim3, list[WarpPcs]] = defaultdict(list)
    for warp in warps:
        if warp.block_idx is not None:
            by_block[warp.block_idx].append(warp)
    patterns: dict[tuple[int, int, int, bool], list[_Split]] = defaultdict(list)
    for block, members in sorted(by_block.items()):
        for barrier in sorted({o for w in members for o, _ in w.lanes_at
                               if _kind(o, groups) == "named"}):  # fmt: skip
            waiting = [w for w in members if all(o == barrier for o, _ in w.lanes_at)]
            elsewhere = [w for w in members if w not in waiting]
            if not waiting:
                continue
            count = groups[barrier].barrier_threads
            threads = sum(n for w in members for _, n in w.lanes_at)
            starved = count is not None and threads < count
            key = (barrier, len(waiting), len(elsewhere), starved)
            patterns[key].append(_Split(block, waiting, elsewhere))
    return [
        _named_finding(splits, groups[barrier], starved, groups)
        for (barrier, _, _, starved), splits in patterns.items()
    ]


def _named_finding(
    splits: list[_Split], group: StuckGroup, starved: bool, groups: dict[int, StuckGroup]
) -> Finding:
    first = splits[0]
    where = blocks_text([s.block for s in splits])
    name = "named barrier" + ("" if group.barrier_id is None else f" {group.barrier_id}")
    count = group.barrier_threads
    counted = (
        f"for {count} threads ({count // 32} warps)"
        if count is not None
        else "for a thread count held in a register"
    )
    live = sum(n for w in first.waiting + first.elsewhere for _, n in w.lanes_at)
    evidence = [f"the barrier: {_where(group.offset, groups)}"]
    evidence += [
        f"block {dim3_text(s.block)}: warps {', '.join(str(w.warp_id) for w in s.waiting)} "
        f"at the barrier"
        + (f", warps {', '.join(str(w.warp_id) for w in s.elsewhere)} elsewhere"
           if s.elsewhere else "")
        for s in splits[:SHOWN_BLOCKS]
    ]  # fmt: skip
    if starved:
        return Finding(
            FindingCode.NAMED_BARRIER_STARVED, Severity.ERROR,
            f"{where}: {len(first.waiting)} warp(s) wait at {name} {counted}, but only {live} "
            "threads of the block are still live: the warps that should arrive have exited, "
            "and the barrier can never complete",
            tuple(evidence),
            caveat="exited warps are not in a dump; a warp that arrived (BAR.ARV) before it "
            "exited counts for the barrier's current phase only",
            remedy=f"find the path on which the other participants of {name} leave the kernel "
            "(an early return, a bound check) before they arrive: exited warps never come "
            "back, so a second dump will show the same",
        )  # fmt: skip
    return Finding(
        FindingCode.NAMED_BARRIER_WAIT, Severity.INFO,
        f"{where}: {len(first.waiting)} warp(s) wait at {name} {counted}; "
        f"{len(first.elsewhere)} other live warp(s) of the block may be the ones to arrive: "
        "the normal picture of a warp-specialized kernel, not a deadlock in one dump",
        tuple(evidence),
        caveat="a second dump where the same warps still wait and the others have not moved "
        "makes it a hang",
    )  # fmt: skip


def _kind(offset: int, groups: dict[int, StuckGroup]) -> str | None:
    group = groups.get(offset)
    return group.barrier if group else None
