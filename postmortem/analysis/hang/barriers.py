"""What a stuck warp's instruction waits on, read from the SASS and the driver's warp rows.

`BAR.SYNC 0` with no thread count is `__syncthreads()`; an id or a count names a barrier only
its participants meet at; `UCGABAR_WAIT` is the cluster's; `BSYNC`/`WARPSYNC` reconverge a
warp. From r590 the driver's warp rows say it too (barrierScope, additionalBarrierInfo).
"""

from __future__ import annotations

from collections.abc import Sequence

from postmortem.analysis.state import WarpPcs
from postmortem.cubin.sass import SassInstruction, SassListing


def barrier_operands(instruction: SassInstruction | None) -> tuple[int | None, int | None]:
    """(barrier id, thread count) of a `BAR` instruction, each None when absent or held in
    a register (`BAR.SYNC R3, R4`)."""
    if instruction is None or instruction.base_opcode != "BAR":
        return None, None
    values = [_immediate(op) for op in instruction.operands[:2]]
    values += [None] * (2 - len(values))
    return values[0], values[1]


def _immediate(operand: str) -> int | None:
    text = operand.strip().rstrip(";").strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def barrier_kind(instruction: SassInstruction | None) -> str | None:
    """ "cta" for the block-wide barrier wait (`__syncthreads()`), "named" for a barrier
    only some warps meet at, "cluster" for the cluster's, "convergence" for a warp's, else
    None."""
    if instruction is None:
        return None
    base, modifiers = instruction.base_opcode, instruction.modifiers
    if base == "BAR" and "ARV" not in modifiers:
        # BAR.SYNC, BAR.RED.*, BAR.SYNC.DEFER_BLOCKING; BAR.ARV does not wait. Barrier 0
        # with no count is __syncthreads(); an id or a count names its participants.
        barrier, count = barrier_operands(instruction)
        whole = barrier == 0 and count is None and len(instruction.operands) <= 1
        return "cta" if whole or "RED" in modifiers else "named"
    if base in {"BSYNC", "WARPSYNC"}:
        return "convergence"
    if base == "UCGABAR_WAIT":  # the cluster barrier (barrier.cluster.wait): every CTA of it
        return "cluster"
    return None


def deferred_barrier(listing: SassListing, offset: int) -> SassInstruction | None:
    """The deferred-blocking barrier a warp whose PC is `offset` waits at, or None.

    A warp that issues `BAR.SYNC.DEFER_BLOCKING` is held at the next instruction until the
    barrier completes, and the dump gives that next instruction as its PC: warps of an H100
    (driver 580) hung in `__syncthreads()` sit one instruction past the barrier
    (fixtures/real/hang_barrier_real). A warp released an instant before the dump sits
    there too, which one snapshot cannot tell apart.
    """
    here = listing.at(offset)
    if here is not None and barrier_kind(here) is not None:
        return None
    before = listing.before(offset)
    if before is None or before.base_opcode != "BAR":
        return None
    modifiers = before.modifiers
    return before if "DEFER_BLOCKING" in modifiers and "ARV" not in modifiers else None


_SCOPES = {1: "warp", 2: "warp group", 3: "block", 4: "cluster", 5: "kernel"}
"""CUDBGBarrierScope (r590+), as the driver's warp rows give it."""


def driver_barrier(warps: Sequence[WarpPcs], offset: int) -> str | None:
    """What the driver's warp rows (r590+) say of the warps at `offset`: the barrier's scope
    in words and the rows' own text; said only when every row that holds the field agrees."""
    here = [w for w in warps if w.lanes_at and w.lanes_at[0][0] == offset]
    scopes = {w.barrier_scope for w in here if w.barrier_scope is not None}
    if len(scopes) != 1 or not (scope := scopes.pop()):
        return None
    infos = sorted({w.barrier_info for w in here if w.barrier_info})
    said = f"{_SCOPES.get(scope, f'scope {scope}')}-wide barrier"
    return said + (f" ({'; '.join(infos)})" if infos else "")
