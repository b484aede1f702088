"""Warp-specialized pipelines: mbarrier waits, warp roles, and what a block's waits mean.

Hopper kernels (FlashAttention-3, CUTLASS 3.x sm90 GEMMs, FlashMLA, DeepGEMM) split a block
into a producer warp group that issues TMA loads (`UTMALDG`) and consumer warp groups that
compute (`HGMMA`); they hand shared-memory slots to each other through mbarriers. A wait is
a `SYNCS.PHASECHK.TRANS64.TRYWAIT` on the barrier's shared-memory word, retried in a short
loop (`NANOSLEEP`, `SYNCS.PHASECHK`, a branch back). A warp's role is read from the code
path it is on: the first TMA load or tensor-core instruction ahead of its PC, following
unconditional branches (an out-of-line retry loop returns to the path it left).

What one dump can say: waiters while other live warps of the block are elsewhere is a
running pipeline (no claim); every live warp waiting, with producer and consumers both
waiting, is a circular wait; every live warp waiting as a consumer while warps of the block
have exited is a pipeline whose producer is gone. TMA transfers in flight are not in a dump,
so the last two are warnings that a second dump makes certain, not proofs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from postmortem.analysis.state import WarpPcs
from postmortem.cubin.sass import SassInstruction, SassListing
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import Dim3
from postmortem.spelling import blocks_text, dim3_text

PRODUCER = "producer"
CONSUMER = "consumer"
_PRODUCER_OPCODES = frozenset({"UTMALDG", "UBLKCP"})
_CONSUMER_OPCODES = frozenset({"HGMMA", "WGMMA", "IGMMA", "QGMMA", "BGMMA"})
_SCAN = 512  # instructions looked at ahead of a PC for its role
_JUMPS = 16  # unconditional branches followed
_LOOP = 6  # instructions of an mbarrier retry loop
_LABEL = re.compile(r"`\((?P<label>[^)]+)\)")


@dataclass(frozen=True, slots=True)
class MbarrierWait:
    """Where a PC waits on an mbarrier."""

    instruction: SassInstruction
    """The `SYNCS.PHASECHK…` that tests the barrier's phase."""
    operand: str
    """Its shared-memory operand as printed (`[R16+URZ+0x34830]`)."""


def is_mbarrier_check(instruction: SassInstruction) -> bool:
    return instruction.base_opcode == "SYNCS" and "PHASECHK" in instruction.modifiers


class IndexedListing:
    """A kernel's listing indexed once per analysis (offsets, labels) and the answers already
    given, so that every stuck group and block asks of it without walking it again."""

    def __init__(self, listing: SassListing) -> None:
        self.listing = listing
        self.instructions = listing.instructions
        self.index = {i.offset: n for n, i in enumerate(listing.instructions)}
        self.labels = {label: i.offset for i in listing.instructions for label in i.labels}
        self.waits: dict[int, MbarrierWait | None] = {}
        self.roles: dict[int, str | None] = {}


def mbarrier_wait(code: IndexedListing, offset: int) -> MbarrierWait | None:
    """The mbarrier a PC waits on: a phase check at the PC, or the retry loop around it."""
    if offset not in code.waits:
        code.waits[offset] = _find_wait(code, offset)
    return code.waits[offset]


def _find_wait(code: IndexedListing, offset: int) -> MbarrierWait | None:
    index = code.index.get(offset)
    if index is None:
        return None
    listed = code.instructions
    if is_mbarrier_check(listed[index]):
        return _wait(listed[index])
    for branch in listed[index : index + _LOOP]:
        target = _target(branch, code.labels)
        if branch.base_opcode != "BRA" or branch.predicate is None or target is None:
            continue
        body = [i for i in listed if target <= i.offset <= branch.offset]
        if target <= offset and len(body) <= _LOOP:
            check = next((i for i in body if is_mbarrier_check(i)), None)
            return _wait(check) if check else None
    return None


def role_at(code: IndexedListing, offset: int) -> str | None:
    """ "producer" or "consumer": the first TMA load or tensor-core instruction on the path
    ahead of `offset`; None when neither comes first (or the path exits)."""
    if offset not in code.roles:
        code.roles[offset] = _find_role(code, offset)
    return code.roles[offset]


def _find_role(code: IndexedListing, offset: int) -> str | None:
    index = code.index.get(offset)
    listed = code.instructions
    jumps, seen = 0, set()
    for _ in range(_SCAN):
        if index is None or index >= len(listed) or index in seen:
            return None
        seen.add(index)
        instruction = listed[index]
        if instruction.base_opcode in _PRODUCER_OPCODES:
            return PRODUCER
        if instruction.base_opcode in _CONSUMER_OPCODES:
            return CONSUMER
        if instruction.predicate is None and instruction.base_opcode == "EXIT":
            return None
        target = _target(instruction, code.labels)
        if instruction.predicate is None and instruction.base_opcode == "BRA" and target:
            jumps += 1
            if jumps > _JUMPS:
                return None
            index = code.index.get(target)
            continue
        index += 1
    return None


@dataclass(frozen=True, slots=True)
class WarpAt:
    """A live warp of a block, where it is and what it does there."""

    warp: WarpPcs
    wait: MbarrierWait | None
    """The mbarrier it waits on, when every lane of it waits on one."""
    role: str | None


def pipeline_findings(
    warps: Sequence[WarpPcs],
    code: IndexedListing,
    block_warps: int | None,
    where: Mapping[int, str],
    describe_wait: Callable[[WarpPcs, MbarrierWait], str | None] | None = None,
) -> list[Finding]:
    """The mbarrier findings of one grid's warps: blocks alike are one finding.

    `block_warps` is how many warps a block of the launch has (None: unknown); `where`
    describes a PC offset for the evidence (instruction and source line); `describe_wait`
    says where a warp's barrier is (its shared address and word, from the dump).
    """
    by_block: dict[Dim3, list[WarpPcs]] = defaultdict(list)
    for warp in warps:
        if warp.block_idx is not None:
            by_block[warp.block_idx].append(warp)
    patterns: dict[tuple[object, ...], list[tuple[Dim3, list[WarpAt]]]] = defaultdict(list)
    for block, members in sorted(by_block.items()):
        placed = [_place(code, w) for w in members]
        waiting = [p for p in placed if p.wait is not None]
        if not waiting:
            continue
        missing = None if block_warps is None else max(block_warps - len(members), 0)
        key = (
            _kind(placed, missing),
            tuple(sorted({(p.warp.lanes_at[0][0], p.role) for p in placed})),
            missing,
        )
        patterns[key].append((block, placed))
    return [
        _finding(str(key[0]), blocks, where, block_warps, describe_wait)
        for key, blocks in patterns.items()
        if key[0] is not None
    ]


def _kind(placed: list[WarpAt], missing: int | None) -> str | None:
    if any(p.wait is None for p in placed):
        return "running"
    roles = {p.role for p in placed}
    if PRODUCER in roles and CONSUMER in roles:
        return "circular"
    if missing and PRODUCER not in roles:
        return "producer-gone"
    return "all-waiting"


def _place(code: IndexedListing, warp: WarpPcs) -> WarpAt:
    waits = [mbarrier_wait(code, offset) for offset, _ in warp.lanes_at]
    wait = waits[0] if waits and all(waits) else None
    return WarpAt(warp, wait, role_at(code, warp.lanes_at[0][0]))


def _finding(
    kind: str,
    blocks: list[tuple[Dim3, list[WarpAt]]],
    where: Mapping[int, str],
    block_warps: int | None,
    describe_wait: Callable[[WarpPcs, MbarrierWait], str | None] | None,
) -> Finding:
    block, placed = blocks[0]
    scope = blocks_text([b for b, _ in blocks])
    waiting = [p for p in placed if p.wait is not None]
    others = [p for p in placed if p.wait is None]
    evidence = [_line(p, where, describe_wait) for p in placed]
    if block_warps is not None:
        evidence.append(
            f"block {dim3_text(block)}: {len(placed)} of the launch's {block_warps} warps live"
        )
    waits = f"{len(waiting)} warp(s) wait on mbarriers ({_roles(waiting)})"
    caveat = (
        "TMA transfers in flight and arrivals already made are not in a dump: a second dump "
        "where the same warps still wait at the same PCs makes it certain"
    )
    if kind == "running":
        return Finding(
            FindingCode.MBARRIER_WAIT, Severity.INFO,
            f"{scope}: {waits} while {len(others)} other live warp(s) run "
            f"({_roles(others)}): a warp-specialized pipeline in flight, not a deadlock in "
            "one dump",
            tuple(evidence), caveat=caveat,
        )  # fmt: skip
    if kind == "circular":
        return Finding(
            FindingCode.CIRCULAR_WAIT, Severity.WARNING,
            f"{scope}: every live warp waits on an mbarrier, the producer for a slot the "
            "consumers should free and the consumers for data the producer should load: a "
            f"circular wait ({_roles(waiting)})",
            tuple(evidence), caveat=caveat,
            remedy="check the pipeline's phase and stage bookkeeping (a consumer that skips a "
            "release, a producer and consumers that disagree on the number of stages or "
            "iterations)",
        )  # fmt: skip
    if kind == "producer-gone":
        return Finding(
            FindingCode.PIPELINE_STALLED, Severity.WARNING,
            f"{scope}: every live warp waits on an mbarrier as a consumer, no live warp is on "
            "the producer's path, and warps of the block have exited: if the producer left "
            "before loading what they wait for, nothing will release them",
            tuple(evidence), caveat=caveat,
            remedy="find the path on which the producer warp leaves its loop early (a tile "
            "count or bound that differs from the consumers')",
        )  # fmt: skip
    return Finding(
        FindingCode.MBARRIER_WAIT, Severity.INFO,
        f"{scope}: every live warp waits on an mbarrier ({_roles(waiting)}); one dump cannot "
        "tell a stall from a pipeline waiting on loads in flight",
        tuple(evidence), caveat=caveat,
    )  # fmt: skip


def _line(
    p: WarpAt,
    where: Mapping[int, str],
    describe_wait: Callable[[WarpPcs, MbarrierWait], str | None] | None,
) -> str:
    offset = p.warp.lanes_at[0][0]
    role = f" ({p.role})" if p.role else ""
    text = where.get(offset, f"0x{offset:04x}")
    waits = f", waiting on {p.wait.operand}" if p.wait else ""
    found = describe_wait(p.warp, p.wait) if p.wait and describe_wait else None
    return f"warp {p.warp.warp_id}{role} at {text}{waits}{f' = {found}' if found else ''}"


def _roles(placed: Sequence[WarpAt]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for p in placed:
        counts[p.role or "role unknown"] += 1
    return ", ".join(f"{n} {role}" for role, n in sorted(counts.items()))


def _wait(instruction: SassInstruction) -> MbarrierWait:
    operand = next((o for o in instruction.operands if o.startswith("[")), "?")
    return MbarrierWait(instruction, operand)


def _target(instruction: SassInstruction, labels: Mapping[str, int]) -> int | None:
    for operand in instruction.operands:
        match = _LABEL.search(operand)
        if match and match["label"] in labels:
            return labels[match["label"]]
    return None
