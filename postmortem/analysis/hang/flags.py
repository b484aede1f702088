"""Flag spins of collectives: which lanes still poll, and the address they poll.

A collective kernel (NCCL, a custom all-reduce) that hangs waits for a peer GPU: the lane
waiting for the missing peer spins on a flag in global memory that the peer's kernel would
write, the lanes that passed wait at the warp's convergence point, and the other warps of
the block at `__syncthreads()`. In a textbook kernel those are a divergent barrier and a
split warp; in a collective they are its protocol, so this module replaces those findings
with one that points at what matters: the polling lanes and the address each reads,
computed from its registers in the dump (the flag of the peer that never arrived).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from weakref import WeakKeyDictionary

from postmortem.analysis.state import WarpPcs
from postmortem.coredump.reader import Coredump
from postmortem.cubin.operands import decode_access, effective_address
from postmortem.cubin.sass import SassInstruction, SassListing
from postmortem.demangle import demangle, without_parameters
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import Dim3, Lane, Warp
from postmortem.spelling import dim3_text

_SHOWN = 4
_SHARED_WINDOW = 1 << 20
"""No block's shared memory window is larger (228 KiB on sm_90)."""
_ZERO = frozenset({"RZ", "URZ"})


@dataclass(frozen=True, slots=True)
class PolledFlag:
    """One lane polling a flag."""

    block_idx: Dim3 | None
    warp_id: int | None
    lane: int | None
    thread_idx: Dim3 | None
    address: int | None
    """The address its load reads, from its registers; None when they are not in the dump."""
    formula: str
    """How the address is made (`R7:R6`), or why it is unknown."""


# Each open dump's warps by device, then by (SM, warp id): indexed on the first lookup, so a
# hang with thousands of polling lanes or stuck groups reads the warp table once, not once
# per lookup. Weak: the index goes with the dump.
_WARPS: WeakKeyDictionary[Coredump, dict[int, dict[tuple[int | None, int | None], Warp]]] = (
    WeakKeyDictionary()
)


def find_warp(core: Coredump, device: int, sm_id: int | None, warp_id: int | None) -> Warp | None:
    """The warp row of a (device, SM, warp id), or None."""
    by_device = _WARPS.setdefault(core, {})
    index = by_device.get(device)
    if index is None:
        index = {(w.sm_id, w.warp_id): w for w in core.iter_warps(core.device(device))}
        by_device[device] = index
    return index.get((sm_id, warp_id))


def lanes_at(core: Coredump, warp: Warp, pc: int) -> tuple[Lane, ...]:
    """The warp's lanes whose PC is `pc`."""
    return tuple(lane for lane in core.lanes(warp) if lane.virtual_pc == pc)


def polled_flags(
    core: Coredump,
    device: int,
    warps: Sequence[WarpPcs],
    polling: Mapping[int, SassInstruction],
    section_address: int,
) -> list[PolledFlag]:
    """Every lane at a polling loop (`polling`: the loop's load, by PC offset), with the
    address its load reads."""
    found: list[PolledFlag] = []
    for member in warps:
        offsets = [o for o, _ in member.lanes_at if o in polling]
        if not offsets:
            continue
        warp = find_warp(core, device, member.sm_id, member.warp_id)
        if warp is None:
            continue
        uniforms = core.uniform_registers(warp)
        found.extend(
            _polled(polling[offset], lane, core.registers(lane), uniforms)
            for offset in offsets
            for lane in lanes_at(core, warp, section_address + offset)
        )
    return found


def waited_word(
    core: Coredump, device: int, member: WarpPcs, wait: SassInstruction, pc: int
) -> str | None:
    """Where the first lane of `member` at `pc` finds the mbarrier `wait` tests: its shared
    address from the lane's registers, and the barrier's 64-bit word when the dump holds
    the block's shared memory; None when the registers are not in the dump."""
    warp = find_warp(core, device, member.sm_id, member.warp_id)
    lane = next(iter(lanes_at(core, warp, pc)), None) if warp else None
    if warp is None or lane is None:
        return None
    polled = _polled(wait, lane, core.registers(lane), core.uniform_registers(warp))
    if polled.address is None or polled.address >= _SHARED_WINDOW:
        return None  # not in the dump, or not a shared address (a register reused since)
    text = f"shared 0x{polled.address:x} ({polled.formula})"
    shared = core.shared_memory(warp)
    if shared is not None and polled.address + 8 <= len(shared):
        word = int.from_bytes(shared[polled.address : polled.address + 8], "little")
        text += f", its word 0x{word:016x}"
    return text


def loop_load(listing: SassListing, offset: int, loop_start: int | None) -> SassInstruction | None:
    """The load of a polling loop that holds `offset` (the loop's body from `loop_start`)."""
    if loop_start is None:
        return None
    body = [i for i in listing.instructions if loop_start <= i.offset]
    return next((i for i in body if i.base_opcode.startswith("LD")), None)


def collective_finding(
    kernel: str | None, polled: Sequence[PolledFlag], others: int, where: str
) -> Finding:
    """The one finding of a collective kernel's hang: who polls what."""
    name = without_parameters(demangle(kernel)) if kernel else "a collective kernel"
    shown = [
        f"block {dim3_text(p.block_idx) if p.block_idx else '?'} warp {p.warp_id} lane {p.lane} "
        f"(thread {dim3_text(p.thread_idx) if p.thread_idx else '?'}) polls "
        + (f"0x{p.address:x} ({p.formula})" if p.address is not None else f"an address "
           f"the dump cannot give ({p.formula})")
        for p in polled[:_SHOWN]
    ]  # fmt: skip
    if len(polled) > _SHOWN:
        shown.append(f"and {len(polled) - _SHOWN} more lanes")
    lanes = sorted({p.lane for p in polled if p.lane is not None})
    return Finding(
        FindingCode.COLLECTIVE_WAIT, Severity.WARNING,
        f"{name} waits for a peer GPU: {len(polled)} lane(s) still poll a flag in global "
        f"memory at {where} (lane {', '.join(map(str, lanes)) or '?'} of their warps), the "
        f"other {others} live warp(s) of their blocks wait for them; the split barriers are "
        "the collective's protocol, not this kernel's bug",
        (*shown, "in the usual all-reduce pattern a polling thread's index is the peer it "
         "waits for; the peer's flag is the address polled"),
        caveat="the peer that never wrote the flag is the rank to look at: its dump (or its "
        "log) holds the first failure",
        remedy="find the rank that faulted first: `postmortem scan DIR --incident` (or "
        "`postmortem analyze CORE...`) over the dumps of every rank of the job",
    )  # fmt: skip


def _polled(
    load: SassInstruction,
    lane: Lane,
    registers: tuple[int, ...] | None,
    uniforms: tuple[int, ...] | None,
) -> PolledFlag:
    access = _access(load)
    address, formula = None, "the load's operand is not understood"
    if access is not None:
        result = effective_address(access, _reader(registers, "R"), _reader(uniforms, "UR"))
        address, formula = result.address, result.formula
        if result.missing:
            formula += f"; not in the dump: {', '.join(result.missing)}"
    return PolledFlag(lane.block_idx, lane.warp_id, lane.lane, lane.thread_idx, address, formula)


# Decoded once per instruction, not once per lane: a full H100 of polling lanes is 135,000.
_access = lru_cache(maxsize=256)(decode_access)


def _reader(values: tuple[int, ...] | None, prefix: str):  # type: ignore[no-untyped-def]
    def read(name: str) -> int | None:
        if name in _ZERO:
            return 0
        number = int(name[len(prefix) :]) if name[len(prefix) :].isdigit() else None
        if values is None or number is None or number >= len(values):
            return None
        return values[number]

    return read
