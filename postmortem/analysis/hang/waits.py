"""What a warp at a PC waits on, read from the instruction there and the loop it is in.

One classification for every kernel family, from what the hardware defines rather than from
names or patterns seen before:

- a hardware barrier (`BAR.SYNC`/`BAR.RED` with its id and thread count; a warp held after a
  `BAR.SYNC.DEFER_BLOCKING` sits at the next instruction);
- an mbarrier phase check and its retry loop (`SYNCS.PHASECHK`);
- the cluster barrier (`UCGABAR_WAIT`);
- a convergence barrier (`BSYNC`, `WARPSYNC`): lanes of one warp waiting for the others;
- a memory poll: a loop (a cycle of the control-flow graph) whose exit depends on a load that
  bypasses or invalidates the cache (`.STRONG`, `.VOLATILE`, an atomic, or a `CCTL` in the
  loop), however the loop is laid out and whatever kernel it is in;
- a memory-dependency wait (`DEPBAR`: asynchronous copies complete by themselves);
- running: anything else.

Each answer is computed once per (kernel listing, PC).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

from postmortem.analysis.hang.barriers import barrier_kind, barrier_operands, deferred_barrier
from postmortem.analysis.hang.pipeline import IndexedListing, mbarrier_wait
from postmortem.cubin.cfg import ControlFlowGraph
from postmortem.cubin.operands import MemoryAccess, decode_access
from postmortem.cubin.sass import SassInstruction, SassListing

_REGISTER = re.compile(r"\b(U?R\d+|U?P\d)\b")
_UNCACHED = frozenset({"STRONG", "VOLATILE", "MMIO"})
_SLICE_STEPS = 4  # how far back a loop's exit condition is traced to the value it tests
_ORIGIN_SPAN = 64  # instructions looked at backwards for where an address register was loaded


class WaitKind(str, Enum):
    """What a warp waits on."""

    BARRIER = "barrier"
    MBARRIER = "mbarrier"
    CLUSTER = "cluster barrier"
    CONVERGENCE = "convergence barrier"
    POLL = "memory poll"
    MEMORY = "memory dependency"
    RUNNING = "running"

    def __str__(self) -> str:
        return str(self.value)

    @property
    def blocks(self) -> bool:
        """The warp cannot go on until another warp (or another agent) acts."""
        return self in (WaitKind.BARRIER, WaitKind.POLL, WaitKind.MBARRIER, WaitKind.CLUSTER)


@dataclass(frozen=True, slots=True)
class Poll:
    """A loop whose exit depends on a word in memory."""

    load: SassInstruction
    """The load (or atomic) that reads the word."""
    access: MemoryAccess
    test: SassInstruction | None
    """The instruction that sets the loop's exit predicate from the value read, when found."""
    loop_start: int
    """The lowest offset of the loop."""
    base_origin: str | None
    """Where the address register came from, when it is a kernel argument: `c[0x0][0x210]`."""
    pauses: tuple[str, ...]
    """`YIELD`, `NANOSLEEP` or `CCTL` instructions in the loop: the marks of a deliberate wait."""
    leaves_when: bool | None = None
    """The value of `test`'s predicate that takes control out of the loop (a branch on it that
    leaves, or a branch back that is not taken); None when no branch on it was found."""


@dataclass(frozen=True, slots=True)
class Wait:
    """What the warps at one PC wait on."""

    kind: WaitKind
    at: int
    """The offset of the awaited instruction (the barrier before the PC of a deferred-blocking
    barrier; the PC otherwise)."""
    instruction: SassInstruction | None
    barrier_id: int | None = None
    """A hardware barrier's id, when the instruction gives it as a number."""
    barrier_threads: int | None = None
    """A hardware barrier's thread count, when given as a number; None: the whole block."""
    poll: Poll | None = None
    why: str = ""
    """The evidence for the kind, in words."""
    loop_tests: tuple[SassInstruction, ...] = ()
    """For a running warp inside a loop: the compares that decide the loop's exits (their
    operands, read from a lane's registers, show a bound that may never come)."""

    @property
    def whole_block(self) -> bool:
        """A barrier every live thread of the block takes part in (`__syncthreads()`)."""
        return self.kind is WaitKind.BARRIER and self.barrier_threads is None


class KernelCode:
    """One kernel's listing with its graph and the waits already classified."""

    def __init__(self, listing: SassListing, indexed: IndexedListing | None = None) -> None:
        self.listing = listing
        self.indexed = indexed or IndexedListing(listing)
        self.graph = ControlFlowGraph(listing)
        self._waits: dict[int, Wait] = {}
        self._arrivals: dict[int | None, frozenset[int]] = {}
        self._reached: dict[tuple[int, frozenset[int]], int | None] = {}
        self._exits: frozenset[int] | None = None
        self._stores: tuple[tuple[SassInstruction, MemoryAccess, str | None], ...] | None = None
        self.polls: dict[frozenset[int], Poll | None] = {}
        """The poll of each loop, found once for every PC in it."""

    def wait_at(self, offset: int) -> Wait:
        """What a warp whose PC is `offset` waits on."""
        if offset not in self._waits:
            self._waits[offset] = _classify(self, offset)
        return self._waits[offset]

    def arrivals(self, barrier_id: int | None) -> frozenset[int]:
        """Offsets of the instructions that arrive at hardware barrier `barrier_id` (`BAR`
        with that id, or with its id in a register, which may be it)."""
        if barrier_id not in self._arrivals:
            self._arrivals[barrier_id] = frozenset(
                i.offset
                for i in self.listing.instructions
                if i.base_opcode == "BAR"
                and (barrier_operands(i)[0] in (barrier_id, None) or barrier_id is None)
            )
        return self._arrivals[barrier_id]

    def first_reached(self, pc: int, targets: frozenset[int]) -> int | None:
        """The lowest of `targets` a path from `pc` reaches, or None (memoized)."""
        key = (pc, targets)
        if key not in self._reached:
            reach = self.graph.reachable(pc)
            hit = (reach & targets) if reach is not None else frozenset()
            self._reached[key] = min(hit) if hit else None
        return self._reached[key]

    def exits(self) -> frozenset[int]:
        """Offsets of the `EXIT` instructions."""
        if self._exits is None:
            self._exits = frozenset(
                i.offset for i in self.listing.instructions if i.base_opcode == "EXIT"
            )
        return self._exits

    def stores(self) -> tuple[tuple[SassInstruction, MemoryAccess, str | None], ...]:
        """Every store, atomic and reduction, with the kernel argument its address came from
        (None when it is not one)."""
        if self._stores is not None:
            return self._stores
        found = []
        for instruction in self.listing.instructions:
            access = decode_access(instruction)
            if access is None or access.kind not in ("store", "atomic", "reduction"):
                continue
            found.append((instruction, access, self.origin(instruction, access)))
        self._stores = tuple(found)
        return self._stores

    def origin(self, instruction: SassInstruction, access: MemoryAccess) -> str | None:
        """The kernel argument an access's address register was loaded from, or None."""
        base = access.address.base if access.address else None
        index = self.indexed.index.get(instruction.offset)
        return None if base is None or index is None else _origin(self.listing, index, base, 2)


# One KernelCode per listing: every grid of a kernel, every PC and every block ask the same
# one. Listings are memoized above (one per disassembled function), so the few last ones kept
# here are those still in use.
_CODE: OrderedDict[int, KernelCode] = OrderedDict()
_KEPT = 32


def kernel_code_of(listing: SassListing, indexed: IndexedListing | None = None) -> KernelCode:
    """The `KernelCode` of a listing, made once."""
    code = _CODE.get(id(listing))
    if code is None or code.listing is not listing:
        code = KernelCode(listing, indexed)
        _CODE[id(listing)] = code
        while len(_CODE) > _KEPT:
            _CODE.popitem(last=False)
    return code


def _classify(code: KernelCode, offset: int) -> Wait:
    listing = code.listing
    here = listing.at(offset)
    mbarrier = mbarrier_wait(code.indexed, offset)
    if mbarrier is not None:
        return Wait(
            WaitKind.MBARRIER,
            offset,
            mbarrier.instruction,
            why=f"an mbarrier phase check ({mbarrier.instruction.text}) and its retry loop",
        )
    deferred = deferred_barrier(listing, offset)
    instruction = deferred or here
    kind = barrier_kind(instruction)
    at = deferred.offset if deferred else offset
    if kind in ("cta", "named"):
        barrier_id, count = barrier_operands(instruction)
        if kind == "cta":
            count = None
        why = f"{instruction.text if instruction else 'BAR'}" + (
            " just before the PC: a deferred-blocking barrier holds a warp at its next instruction"
            if deferred
            else ""
        )
        return Wait(WaitKind.BARRIER, at, instruction, barrier_id, count, why=why)
    if kind == "cluster":
        return Wait(WaitKind.CLUSTER, at, instruction, why=instruction.text if instruction else "")
    if kind == "convergence":
        return Wait(
            WaitKind.CONVERGENCE, at, instruction, why=instruction.text if instruction else ""
        )
    poll = _poll(code, offset)
    if poll is not None:
        return Wait(WaitKind.POLL, offset, here, poll=poll, why=_poll_why(poll))
    if here is not None and here.base_opcode == "DEPBAR":
        return Wait(
            WaitKind.MEMORY,
            offset,
            here,
            why=f"{here.text}: waits for its own asynchronous copies, which complete",
        )
    return Wait(
        WaitKind.RUNNING, offset, here, why="no waiting instruction at the PC, no poll loop",
        loop_tests=_loop_tests(code, offset),
    )  # fmt: skip


def _loop_tests(code: KernelCode, offset: int) -> tuple[SassInstruction, ...]:
    graph = code.graph
    loop = graph.loop_of(offset)
    if loop is None:
        return ()
    body = graph.loop_instructions(loop)
    guards = {e.predicate.lstrip("!") for e in graph.exits_of(loop) if e.predicate}
    return tuple(
        i for i in body
        if i.base_opcode == "ISETP" and i.operands and i.operands[0].strip() in guards
    )  # fmt: skip


def _poll_why(poll: Poll) -> str:
    marks = f", with {', '.join(poll.pauses)}" if poll.pauses else ""
    test = f", tested by {poll.test.text}" if poll.test else ""
    return (
        f"a loop from 0x{poll.loop_start:04x} whose exit depends on {poll.load.text} "
        f"(a {poll.access.space} read that bypasses the cache){test}{marks}"
    )


def _poll(code: KernelCode, offset: int) -> Poll | None:
    loop = code.graph.loop_of(offset)
    if loop is None:
        return None
    if loop not in code.polls:
        code.polls[loop] = _loop_poll(code, loop)
    return code.polls[loop]


def _loop_poll(code: KernelCode, loop: frozenset[int]) -> Poll | None:
    graph = code.graph
    body = graph.loop_instructions(loop)
    if any(_writes_memory(i) for i in body):
        # A loop that stores every time round does work; a spin only reads (a guarded store,
        # such as noting an abort flag, may sit in it).
        return None
    invalidates = any(i.base_opcode == "CCTL" for i in body)
    tested = _tested_registers(body, graph.exits_of(loop))
    for instruction in body:
        if graph.loop_of(instruction.offset) != loop:
            continue  # a nested loop's load: that loop polls, this one runs around it
        access = decode_access(instruction)
        if access is None or access.space not in ("global", "shared", "generic"):
            continue
        uncached = bool(_UNCACHED & set(instruction.modifiers)) or invalidates
        reads = access.kind == "load" and uncached or access.kind == "atomic"
        destination = _destinations(instruction)
        if not reads or not destination & tested:
            continue
        test = next((i for i in body if _writes_predicate(i) and destination & _sources(i)), None)
        pauses = tuple(
            dict.fromkeys(
                i.base_opcode for i in body if i.base_opcode in ("YIELD", "NANOSLEEP", "CCTL")
            )
        )
        origin = code.origin(instruction, access)
        leaves = _leaves_when(graph, loop, test) if test is not None else None
        return Poll(instruction, access, test, body[0].offset, origin, pauses, leaves)
    return None


def _leaves_when(
    graph: ControlFlowGraph, loop: frozenset[int], test: SassInstruction
) -> bool | None:
    predicate = test.operands[0].strip() if test.operands else ""
    for index in loop:
        block = graph.blocks[index]
        last = block.instructions[-1]
        guard = (last.predicate or "").lstrip("!")
        if last.base_opcode not in ("BRA", "EXIT") or guard != predicate:
            continue
        when = not (last.predicate or "").startswith("!")
        outside = last.base_opcode == "EXIT" or any(b not in loop for b in block.successors[:1])
        return when if outside else not when
    return None


def _tested_registers(
    body: tuple[SassInstruction, ...], exits: tuple[SassInstruction, ...]
) -> set[str]:
    """The registers the loop's exit conditions depend on, traced back a few steps inside the
    loop (a load's value masked or compared before the branch tests it)."""
    wanted = {p.lstrip("!") for e in exits if e.predicate for p in [e.predicate]}
    wanted.discard("PT")
    for _ in range(_SLICE_STEPS):
        grown = set(wanted)
        for instruction in body:
            if _destinations(instruction) & wanted:
                grown |= _sources(instruction)
        if grown == wanted:
            break
        wanted = grown
    return wanted


def _destinations(instruction: SassInstruction) -> set[str]:
    """The registers an instruction writes: its first operand (and the predicate operands of a
    compare), widened for 64- and 128-bit loads."""
    if not instruction.operands or instruction.base_opcode in ("ST", "STG", "STS", "STL", "RED"):
        return set()
    names = _REGISTER.findall(instruction.operands[0])
    if _writes_predicate(instruction) and len(instruction.operands) > 1:
        names += _REGISTER.findall(instruction.operands[1])
    found = set(names)
    width = {"64": 2, "128": 4}.get(
        next((m for m in instruction.modifiers if m in ("64", "128")), ""), 1
    )
    for name in names:
        if name.startswith("R") and name[1:].isdigit():
            found.update(f"R{int(name[1:]) + k}" for k in range(width))
    return found


def _sources(instruction: SassInstruction) -> set[str]:
    skip = 2 if _writes_predicate(instruction) else 1
    return {r for op in instruction.operands[skip:] for r in _REGISTER.findall(op)}


def _writes_memory(instruction: SassInstruction) -> bool:
    """An unguarded store to global, shared or generic memory."""
    if instruction.predicate not in (None, "PT"):
        return False
    access = decode_access(instruction)
    return access is not None and access.kind == "store" and access.space != "local"


def _writes_predicate(instruction: SassInstruction) -> bool:
    return instruction.base_opcode.endswith("SETP") or instruction.base_opcode in ("PLOP3", "R2P")


def _origin(listing: SassListing, before: int, register: str, hops: int) -> str | None:
    for n in range(before - 1, max(before - _ORIGIN_SPAN, 0) - 1, -1):
        earlier = listing.instructions[n]
        if register not in _destinations(earlier):
            continue
        if earlier.base_opcode in ("LDC", "ULDC") and len(earlier.operands) > 1:
            operand = earlier.operands[1].strip()
            return operand if operand.startswith("c[0x0]") else None
        if earlier.base_opcode == "IMAD" and "WIDE" in earlier.modifiers and hops:
            # base = index * scale + pointer: the pointer is the array's start.
            pointer = _REGISTER.search(earlier.operands[-1]) if len(earlier.operands) > 3 else None
            return _origin(listing, n, pointer.group(1), hops - 1) if pointer else None
        return None
    return None
