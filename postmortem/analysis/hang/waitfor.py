"""Who waits for whom, and who can still arrive: the wait-for model of one grid's live warps.

Every live warp has one driving wait (`waits.Wait`; lanes of a split warp at a convergence
barrier follow the lanes elsewhere). A warp is *free* when it runs (or waits on something that
completes by itself), or when what it waits for can still come from a free warp:

- a hardware barrier completes when every live warp of the block that is not waiting at it can
  still reach an arrival at the same barrier id (any `BAR` with that id: all `__syncthreads()`
  are barrier 0); for the block-wide barrier an `EXIT` counts too (an exited warp no longer
  counts as a participant); a barrier with a thread count needs that many live threads;
- a memory poll ends when a free warp that may write the polled word (a store, atomic or
  reduction of the kernel to the same kernel argument, or to an address the listing cannot
  trace) has a path in the control-flow graph to it, or when something outside the grid (the
  host, another kernel, another GPU) writes it, which a dump cannot see;
- mbarrier and cluster waits are judged elsewhere (their arrivals come from TMA transfers and
  other blocks a dump does not show): here they are neither free nor proof of anything.

The free set is the least fixpoint of these rules. What stays waiting is stuck on something
only a stuck warp, an exited warp or the outside world could release, and each claim says
which.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from postmortem.analysis.hang.waits import KernelCode, Wait, WaitKind
from postmortem.analysis.state import WarpPcs
from postmortem.cubin.sass import SassInstruction
from postmortem.model import Dim3

WarpKey = tuple[Dim3 | None, int | None, int | None]
"""(block, SM, warp id): one live warp."""


@dataclass(frozen=True, slots=True)
class WarpWait:
    """A live warp and what it waits on."""

    warp: WarpPcs
    wait: Wait
    pc: int
    """The PC of the lanes whose wait drives the warp."""
    following: int
    """Lanes of the warp at a convergence barrier, waiting for the driving lanes."""

    @property
    def key(self) -> WarpKey:
        return (self.warp.block_idx, self.warp.sm_id, self.warp.warp_id)


@dataclass(frozen=True, slots=True)
class Arrival:
    """Whether one participant of a wait can still do its part, and why."""

    warp: WarpWait
    can: bool | None
    """True: it can (a path exists); False: it never can; None: it waits itself."""
    why: str


@dataclass(frozen=True, slots=True)
class WaitModel:
    """The live warps of one grid, what each waits on, and which are stuck."""

    warps: tuple[WarpWait, ...]
    free: frozenset[WarpKey]
    arrivals: dict[WarpKey, tuple[Arrival, ...]]
    """Per waiting warp: each participant or possible writer it depends on."""
    released: frozenset[WarpKey] = frozenset()
    """Polling warps whose last read value already ends their loop (on their way out)."""

    def stuck(self, warp: WarpWait) -> bool:
        return warp.wait.kind.blocks and warp.key not in self.free


@dataclass(frozen=True, slots=True)
class WaitEdge:
    """One edge of the wait-for graph: a waiting warp and a warp it depends on."""

    grid_id: int
    waiter_block: Dim3 | None
    waiter_warp: int | None
    waiter_pc: int
    on_block: Dim3 | None
    on_warp: int | None
    on_pc: int
    can: bool | None
    """True: the warp depended on can still do its part (arrive, write); False: never; None:
    it waits itself."""
    why: str


def wait_edges(model: WaitModel, grid_id: int, limit: int) -> tuple[tuple[WaitEdge, ...], int]:
    """The first `limit` edges of the wait-for graph of one grid, and how many there are
    (a whole GPU of warps waiting at one barrier has tens of thousands)."""
    by_key = {w.key: w for w in model.warps}
    found: list[WaitEdge] = []
    total = 0
    for key, arrivals in model.arrivals.items():
        waiter = by_key[key]
        for arrival in arrivals:
            total += 1
            if len(found) < limit:
                on = arrival.warp
                found.append(WaitEdge(
                    grid_id, waiter.warp.block_idx, waiter.warp.warp_id, waiter.pc,
                    on.warp.block_idx, on.warp.warp_id, on.pc, arrival.can, arrival.why,
                ))  # fmt: skip
    return tuple(found), total


def driving_wait(code: KernelCode, warp: WarpPcs) -> WarpWait:
    """The wait that holds a warp: that of its lanes not at a convergence barrier, the most
    blocking first (a split warp whose other lanes reconverge waits on what those lanes do)."""
    waits = [(code.wait_at(offset), offset, lanes) for offset, lanes in warp.lanes_at]
    driving = [w for w in waits if w[0].kind is not WaitKind.CONVERGENCE] or waits
    driving.sort(key=lambda w: (not w[0].kind.blocks, -w[2]))
    wait, pc, _ = driving[0]
    following = sum(n for w, _, n in waits if w.kind is WaitKind.CONVERGENCE and w is not wait)
    return WarpWait(warp, wait, pc, following)


def build_model(
    code: KernelCode,
    members: Sequence[WarpPcs],
    released: Callable[[WarpWait], bool | None] | None = None,
) -> WaitModel:
    """The wait-for model of one grid's live warps (`members`, each with a block).
    `released` says whether a polling warp's last read value already ends its loop (from its
    registers), when the caller can read them."""
    warps = tuple(driving_wait(code, w) for w in members if w.block_idx is not None and w.lanes_at)
    by_block: dict[Dim3 | None, list[WarpWait]] = defaultdict(list)
    for warp in warps:
        by_block[warp.warp.block_idx].append(warp)
    free = {w.key for w in warps if not w.wait.kind.blocks}
    leaving = frozenset(
        w.key for w in warps if w.wait.kind is WaitKind.POLL and released and released(w)
    )
    free |= leaving
    arrivals: dict[WarpKey, tuple[Arrival, ...]] = {}
    changed = True
    while changed:
        changed = False
        # One writer per PC stands for every free warp there; a poll's answer is the same for
        # every warp in its loop (and block, for shared memory): a whole GPU of polling warps
        # costs a few path questions, not one per pair of warps.
        writers = _free_by_pc(warps, free)
        answers: dict[tuple[int, Dim3 | None], tuple[Arrival, ...]] = {}
        for warp in warps:
            if warp.key in free or warp.wait.kind not in (WaitKind.BARRIER, WaitKind.POLL):
                continue
            if warp.wait.kind is WaitKind.BARRIER:
                found = tuple(_barrier_arrivals(code, warp, by_block[warp.warp.block_idx], free))
                done = all(a.can for a in found) and _enough(warp, by_block)
            else:
                block = warp.warp.block_idx if _shared(warp.wait) else None
                key = (warp.wait.poll.loop_start if warp.wait.poll else warp.pc, block)
                if key not in answers:
                    pool = _free_by_pc(by_block[block], free) if block is not None else writers
                    answers[key] = tuple(_writers(code, warp, pool))
                found = answers[key]
                done = any(a.can for a in found)
            arrivals[warp.key] = found
            if done:
                free.add(warp.key)
                changed = True
    return WaitModel(warps, frozenset(free), arrivals, leaving)


def _free_by_pc(warps: Sequence[WarpWait], free: set[WarpKey]) -> dict[int, WarpWait]:
    found: dict[int, WarpWait] = {}
    for warp in warps:
        if warp.key in free:
            found.setdefault(warp.pc, warp)
    return found


def _barrier_arrivals(
    code: KernelCode, warp: WarpWait, block: list[WarpWait], free: set[WarpKey]
) -> list[Arrival]:
    wait = warp.wait
    targets = code.arrivals(wait.barrier_id)
    if wait.whole_block:
        targets = targets | code.exits()
    found = []
    for other in block:
        if other.key == warp.key or _same_barrier(other.wait, wait):
            continue
        if other.key not in free:
            found.append(Arrival(other, None, f"waiting too: {_waiting(other)}"))
            continue
        found.append(
            _path(code, other, targets, "the barrier" + (" or an exit" if wait.whole_block else ""))
        )
    return found


def _path(code: KernelCode, other: WarpWait, targets: frozenset[int], what: str) -> Arrival:
    reach = code.graph.reachable(other.pc)
    hit = code.first_reached(other.pc, targets)
    if reach is None:
        return Arrival(
            other,
            True,
            f"at 0x{other.pc:04x}: an indirect branch ahead hides its path; assumed able",
        )
    if hit is not None:
        return Arrival(
            other,
            True,
            f"{_kind_at(other)} at 0x{other.pc:04x}: a path reaches {what} at 0x{hit:04x}",
        )
    return Arrival(
        other, False, f"{_kind_at(other)} at 0x{other.pc:04x}: no path from there reaches {what}"
    )


def _enough(warp: WarpWait, by_block: dict[Dim3 | None, list[WarpWait]]) -> bool:
    count = warp.wait.barrier_threads
    if count is None:
        return True
    live = sum(n for w in by_block[warp.warp.block_idx] for _, n in w.warp.lanes_at)
    return live >= count


def _same_barrier(a: Wait, b: Wait) -> bool:
    return (
        a.kind is WaitKind.BARRIER
        and b.kind is WaitKind.BARRIER
        and (a.barrier_id == b.barrier_id or None in (a.barrier_id, b.barrier_id))
    )


def _shared(wait: Wait) -> bool:
    return wait.poll is not None and wait.poll.access.space == "shared"


def _writers(code: KernelCode, warp: WarpWait, pool: dict[int, WarpWait]) -> list[Arrival]:
    """The free warps (one per PC) with a path to a store that may write `warp`'s word."""
    targets = frozenset(i.offset for i, _ in possible_writes(code, warp.wait))
    found = []
    for other in pool.values():
        if other.key == warp.key:
            continue
        arrival = _path(code, other, targets, "a store that may write the word")
        if arrival.can:
            found.append(arrival)
    return found


def possible_writes(code: KernelCode, wait: Wait) -> list[tuple[SassInstruction, bool]]:
    """The kernel's stores that may write the word a poll reads: (instruction, known), known
    when the store's address comes from the same kernel argument."""
    poll = wait.poll
    if poll is None:
        return []
    space = poll.access.space
    spaces = {"shared"} if space == "shared" else {"global", "generic"}
    found: list[tuple[SassInstruction, bool]] = []
    for instruction, access, origin in code.stores():
        if access.space not in spaces:
            continue
        if poll.base_origin is not None and origin is not None and origin != poll.base_origin:
            continue  # another argument's buffer
        found.append((instruction, origin is not None and origin == poll.base_origin))
    return found


def _kind_at(warp: WarpWait) -> str:
    return {
        WaitKind.RUNNING: "running",
        WaitKind.MEMORY: "waiting for its own memory copies",
    }.get(warp.wait.kind, str(warp.wait.kind))


def _waiting(warp: WarpWait) -> str:
    wait = warp.wait
    if wait.kind is WaitKind.BARRIER:
        barrier = "?" if wait.barrier_id is None else wait.barrier_id
        return f"at barrier {barrier} (0x{wait.at:04x})"
    if wait.kind is WaitKind.POLL and wait.poll is not None:
        return f"polling memory at 0x{warp.pc:04x} ({wait.poll.load.text})"
    return f"{wait.kind} at 0x{warp.pc:04x}"
