"""Verdicts from the wait-for model: a deadlock only where a participant can never arrive.

- Warps at a block-wide barrier that is stuck (a participant cannot arrive: no path, or it
  waits on something only stuck warps could release) are a deadlock (`divergent-barrier`),
  with each missing participant and why it cannot come.
- Warps at a barrier whose missing participants can all still arrive are a busy snapshot: no
  claim, and what a second dump would show.
- A stuck poll names its word: the load, where its address comes from, per lane the address,
  the value read and the value the loop tests it against. When the kernel's own code never
  writes that word, the writer is outside the grid (`collective-wait`: another GPU, the host
  or another kernel); when it does but no live warp can reach that store any more, nothing
  left in the grid can end the spin (`spin-wait`); when a live warp can, the spin is busy.

Blocks that stand the same way are one verdict, as a grid of many blocks hangs in one pattern.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from postmortem.analysis.hang.waitfor import Arrival, WaitModel, WarpWait, possible_writes
from postmortem.analysis.hang.waits import KernelCode, WaitKind
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import Dim3
from postmortem.spelling import SHOWN_BLOCKS, blocks_text, dim3_text

PollText = Callable[[WarpWait], Sequence[str]]
"""Per polling warp, what its lanes read: address, value read, value tested against."""
_SHOWN = 6


def model_findings(
    code: KernelCode,
    model: WaitModel,
    kernel: str | None,
    where: Callable[[int], str],
    describe: PollText,
    grid_note: str | None,
) -> list[Finding]:
    """The barrier and poll verdicts of one grid."""
    found = _barrier_findings(code, model, where, describe, grid_note)
    covered = {a.warp.key for _, keys in found for a in keys}
    polls = [w for w in model.warps if w.wait.kind is WaitKind.POLL and w.key not in covered]
    return [f for f, _ in found] + _poll_findings(
        code, model, polls, kernel, where, describe, grid_note
    )


def _barrier_findings(
    code: KernelCode,
    model: WaitModel,
    where: Callable[[int], str],
    describe: PollText,
    grid_note: str | None,
) -> list[tuple[Finding, list[Arrival]]]:
    patterns: dict[tuple[int, bool, tuple[int, ...]], list[tuple[Dim3, list[WarpWait]]]] = (
        defaultdict(list)
    )
    by_block: dict[Dim3, list[WarpWait]] = defaultdict(list)
    for warp in model.warps:
        if warp.wait.whole_block and warp.warp.block_idx is not None:
            by_block[warp.warp.block_idx].append(warp)
    for block, waiting in sorted(by_block.items()):
        arrivals = model.arrivals.get(waiting[0].key, ())
        if not arrivals:
            continue  # the whole live block is there: it completes
        stuck = model.stuck(waiting[0])
        others = tuple(sorted({a.warp.pc for a in arrivals}))
        patterns[(waiting[0].wait.at, stuck, others)].append((block, waiting))
    found = []
    for (barrier, stuck, _), blocks in patterns.items():
        outside = stuck and _needs_outside(code, model, blocks)
        if outside:
            continue  # the poll it waits for says who should write (a peer, the host)
        finding, _ = _barrier_finding(model, barrier, stuck, blocks, where, describe, grid_note)
        every = [a for _, ws in blocks for w in ws for a in model.arrivals.get(w.key, ())]
        found.append((finding, every))
    return found


def _needs_outside(
    code: KernelCode, model: WaitModel, blocks: list[tuple[Dim3, list[WarpWait]]]
) -> bool:
    """The barrier waits only for pollers whose word no code of the grid writes."""
    arrivals = model.arrivals.get(blocks[0][1][0].key, ())
    pollers = [a.warp for a in arrivals if a.can is None and a.warp.wait.kind is WaitKind.POLL]
    return (
        len(pollers) == len(arrivals)
        and bool(pollers)
        and all(not any(known for _, known in possible_writes(code, p.wait)) for p in pollers)
    )


def _barrier_finding(
    model: WaitModel,
    barrier: int,
    stuck: bool,
    blocks: list[tuple[Dim3, list[WarpWait]]],
    where: Callable[[int], str],
    describe: PollText,
    grid_note: str | None,
) -> tuple[Finding, list[Arrival]]:
    block, waiting = blocks[0]
    arrivals = list(model.arrivals.get(waiting[0].key, ()))
    names = blocks_text([b for b, _ in blocks])
    evidence = [f"the barrier: {where(barrier)}"]
    evidence += [
        f"block {dim3_text(b)}: warps {', '.join(str(w.warp.warp_id) for w in ws)} at the barrier"
        for b, ws in blocks[:SHOWN_BLOCKS]
    ]
    # Warps that stand alike (the same wait, the same reason) are one line.
    alike: dict[str, list[int | None]] = defaultdict(list)
    for arrival in arrivals:
        alike[_arrival(arrival)].append(arrival.warp.warp.warp_id)
    evidence += [
        f"warp{'s' if len(ids) > 1 else ''} {', '.join(str(i) for i in ids)} of block "
        f"{dim3_text(block)}: {reason}"
        for reason, ids in list(alike.items())[:_SHOWN]
    ]
    if len(alike) > _SHOWN:
        evidence.append(f"and {len(alike) - _SHOWN} more kinds of wait")
    said = waiting[0].warp.barrier_info
    if said:
        evidence.append(f"the driver's warp rows of the waiting warps: {said}")
    if not stuck:
        return Finding(
            FindingCode.BUSY_SNAPSHOT,
            Severity.INFO,
            f"{names}: {len(waiting)} warp(s) wait at a block barrier (barrier "
            f"{_id(waiting[0])}) and every one of the {len(arrivals)} other live warp(s) of "
            "the block can still arrive: a running kernel caught in one instant, no deadlock "
            "claimed",
            tuple(evidence),
            caveat="a second dump a few seconds later would show these warps past the barrier "
            "(or at the next one); the same warps at the same PCs would make it a hang",
        ), arrivals
    never = [a for a in arrivals if a.can is False]
    waits = [a for a in arrivals if a.can is None]
    polls = sorted({a.warp.pc for a in waits if a.warp.wait.kind is WaitKind.POLL})
    if never:
        cause = f"{len(never)} of them can never arrive (no path to the barrier)"
    elif len(polls) == len({a.warp.pc for a in waits}):
        at = ", ".join(f"0x{pc:04x}" for pc in polls)
        cause = f"they poll memory (at {at}) that no warp still free to run can write"
    else:
        cause = f"they wait themselves ({_short(waits[0])})"
    caveat = (
        "the polled word is in global memory: a write from outside the grid (the host, "
        "another kernel, another GPU) would still break the cycle"
        if any(
            a.warp.wait.kind is WaitKind.POLL
            and a.warp.wait.poll is not None
            and a.warp.wait.poll.access.space != "shared"
            for a in waits
        )
        else "a dump is one instant: a second dump taken later with the same picture makes "
        "the deadlock certain"
    )
    pollers = [a.warp for a in waits if a.warp.wait.kind is WaitKind.POLL]
    if pollers:
        evidence.append(f"what they poll: {pollers[0].wait.why}")
        evidence += [line for p in pollers[:2] for line in describe(p)]
    if grid_note:
        evidence.append(grid_note)
        caveat = f"{caveat}; and a block not yet scheduled may be the one to write it"
    return Finding(
        FindingCode.DIVERGENT_BARRIER,
        Severity.WARNING if grid_note else Severity.ERROR,
        f"{names}: {len(waiting)} warp(s) wait at a block barrier (barrier {_id(waiting[0])}) "
        f"for {len(arrivals)} warp(s) of the same block, and {cause}: a __syncthreads() that "
        "not every thread of the block reaches",
        tuple(evidence),
        caveat=caveat,
    ), arrivals


def _poll_findings(
    code: KernelCode,
    model: WaitModel,
    polls: list[WarpWait],
    kernel: str | None,
    where: Callable[[int], str],
    describe: PollText,
    grid_note: str | None,
) -> list[Finding]:
    by_pc: dict[int, list[WarpWait]] = defaultdict(list)
    for warp in polls:
        by_pc[warp.pc if warp.wait.poll is None else warp.wait.poll.loop_start].append(warp)
    found = []
    for _, warps in sorted(by_pc.items()):
        first = warps[0]
        poll = first.wait.poll
        if poll is None:
            continue
        writes = possible_writes(code, first.wait)
        known = [i for i, k in writes if k]
        stuck = [w for w in warps if model.stuck(w)]
        lanes = sum(n for w in warps for o, n in w.warp.lanes_at if o == w.pc)
        blocks = sorted({w.warp.block_idx for w in warps if w.warp.block_idx is not None})
        waiting_on = _waiting_on(model, warps)
        evidence = [f"the loop: {where(first.pc)}; {first.wait.why}"]
        if poll.base_origin:
            evidence.append(f"its address comes from the kernel argument at {poll.base_origin}")
        for warp in warps[:SHOWN_BLOCKS]:
            evidence += list(describe(warp))
        if waiting_on:
            evidence.append(f"{waiting_on} other live warp(s) of their blocks wait for them")
        scope = (
            "system"
            if "SYS" in poll.load.modifiers
            else "GPU"
            if "GPU" in poll.load.modifiers
            else None
        )
        where_blocks = blocks_text(blocks) if blocks else "?"
        text = f"{lanes} lane(s) in {len(warps)} warp(s) of {where_blocks} poll a word"
        leaving = [w for w in warps if w.key in model.released]
        if leaving:
            evidence.append(
                f"{len(leaving)} of these warps last read a value that already ends the loop: "
                "they are on their way out"
            )
        if not stuck:
            writer = model.arrivals.get(first.key, ())
            evidence += [f"{_who(a.warp)}: {a.why}" for a in writer[:_SHOWN]]
            found.append(
                Finding(
                    FindingCode.BUSY_SNAPSHOT,
                    Severity.INFO,
                    f"{text} that a live warp of the grid can still write: a spin that can end, "
                    "no deadlock claimed",
                    tuple(evidence),
                    caveat="a second dump would show whether the word changed and the loop ended",
                )
            )
            continue
        if not known:
            who = (
                "another GPU or the host (the load is system-scope)"
                if scope == "system"
                else "another kernel, another block or the host"
            )
            found.append(
                Finding(
                    FindingCode.COLLECTIVE_WAIT,
                    Severity.WARNING,
                    f"{text} in {_space(poll.access.space)} that no store of {_name(kernel)} "
                    f"writes: they wait for {who}",
                    (
                        *evidence,
                        "no store, atomic or reduction of this kernel takes its address from "
                        "the same kernel argument, and no live warp of the grid can reach one that "
                        "might",
                    ),
                    caveat="the writer that never came is the one to look at: in a multi-GPU job, "
                    "the rank that faulted first (its dump or its log holds the failure)",
                    remedy="find the rank that faulted first: `postmortem scan DIR --incident` (or "
                    "`postmortem analyze CORE...`) over the dumps of every rank of the job",
                )
            )
            continue
        stores = ", ".join(f"0x{i.offset:04x} {i.text}" for i in known[:3])
        evidence.append(
            f"the kernel's own stores to that word: {stores}; no live warp has a path to one"
        )
        if grid_note:
            evidence.append(grid_note)
        # A system-scope read is one another GPU or the host may end (symmetric-memory
        # kernels write their peers' words with the code that polls their own): a warning.
        if grid_note:
            ending = (
                "the blocks that would write it are not in the dump (never scheduled while "
                "these hold every SM, or exited)"
            )
        elif scope == "system":
            ending = (
                "the read is system-scope, so the same kernel on another GPU, or the host, may "
                "still be the writer"
            )
        else:
            ending = "a spin-wait nothing left in the grid can end"
        certain = not grid_note and scope != "system"
        found.append(
            Finding(
                FindingCode.SPIN_WAIT,
                Severity.ERROR if certain else Severity.WARNING,
                f"{text} that only the kernel's own stores write, and no live warp of the grid can "
                f"reach one: {ending}",
                tuple(evidence),
                caveat="a write from outside the grid (the host, another kernel) would still end "
                "it; a second dump where the PCs and the word have not changed makes it certain",
            )
        )
    return found


def _waiting_on(model: WaitModel, pollers: list[WarpWait]) -> int:
    """How many warps wait at a barrier for one of `pollers`."""
    keys = {p.key for p in pollers}
    kinds = {w.key: w.wait.kind for w in model.warps}
    return sum(
        1
        for key, arrivals in model.arrivals.items()
        if key not in keys
        and kinds.get(key) is WaitKind.BARRIER
        and any(a.warp.key in keys for a in arrivals)
    )


def _who(warp: WarpWait) -> str:
    block = warp.warp.block_idx
    return f"warp {warp.warp.warp_id} of block {dim3_text(block) if block else '?'}"


def _arrival(arrival: Arrival) -> str:
    if arrival.can:
        return f"can still arrive: {arrival.why}"
    if arrival.can is False:
        return f"can never arrive: {arrival.why}"
    return arrival.why


def _short(arrival: Arrival) -> str:
    return arrival.why.removeprefix("waiting too: ")


def _id(warp: WarpWait) -> str:
    return "?" if warp.wait.barrier_id is None else str(warp.wait.barrier_id)


def _space(space: str) -> str:
    return {"global": "global memory", "shared": "shared memory"}.get(space, "memory")


def _name(kernel: str | None) -> str:
    from postmortem.demangle import demangle, without_parameters

    return without_parameters(demangle(kernel)) if kernel else "the kernel"
