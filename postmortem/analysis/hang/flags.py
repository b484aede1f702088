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

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from weakref import WeakKeyDictionary

from postmortem.analysis.hang.lanes import exit_taken
from postmortem.analysis.hang.waits import Poll
from postmortem.analysis.state import WarpPcs
from postmortem.coredump.reader import Coredump
from postmortem.cubin.operands import decode_access, effective_address
from postmortem.cubin.sass import SassInstruction
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


def waited_word(
    core: Coredump, device: int, member: WarpPcs, wait: SassInstruction, pc: int
) -> str | None:
    """Where the first lane of `member` at `pc` finds the mbarrier `wait` tests: its shared
    address from the lane's registers, and the barrier's 64-bit word when the dump holds
    the block's shared memory; None when the registers are not in the dump."""
    warp = find_warp(core, device, member.sm_id, member.warp_id)
    lane = core.find_lane_at(warp, pc) if warp else None
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


def _polled(
    load: SassInstruction,
    lane: Lane,
    registers: tuple[int, ...] | None,
    uniforms: tuple[int, ...] | None,
) -> PolledFlag:
    access = _access(load)
    address, formula = None, "the load's operand is not understood"
    if access is not None:
        result = effective_address(access, registers, uniforms)
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


def poll_lanes(
    core: Coredump,
    device: int,
    member: WarpPcs,
    load: SassInstruction,
    test: SassInstruction | None,
    pc: int,
) -> list[str]:
    """What the first lane of `member` at `pc` polls: the address its load reads, the value
    the dump holds for the word (its captured memory, else the load's destination register),
    and what the loop's test compares it with."""
    warp = find_warp(core, device, member.sm_id, member.warp_id)
    lane = core.find_lane_at(warp, pc) if warp else None
    if warp is None or lane is None:
        return []
    registers = core.registers(lane)
    polled = _polled(load, lane, registers, core.uniform_registers(warp))
    who = (
        f"block {dim3_text(lane.block_idx) if lane.block_idx else '?'} warp {lane.warp_id} "
        f"lane {lane.lane}"
    )
    if polled.address is None:
        return [f"{who} polls an address the dump cannot give ({polled.formula})"]
    text = f"{who} polls 0x{polled.address:x} ({polled.formula})"
    read = _value_read(core, load, polled.address, registers)
    if read:
        text += f", {read}"
    tested = _tested_against(test, registers)
    return [text + (f"; the loop tests it with {tested}" if tested else "")]


def _value_read(
    core: Coredump, load: SassInstruction, address: int, registers: tuple[int, ...] | None
) -> str | None:
    access = _access(load)
    if access is not None and access.space != "shared":
        memory = core.read_memory(address, 4)
        if memory is not None:
            return f"the word holds 0x{int.from_bytes(memory, 'little'):x} (captured memory)"
    destination = load.operands[0] if load.operands else ""
    value = _reader(registers, "R")(destination.split(".")[0]) if destination else None
    if value is None:
        return None
    return f"last read 0x{value:x} ({destination.split('.')[0]}, a register that may be reused)"


def _tested_against(test: SassInstruction | None, registers: tuple[int, ...] | None) -> str | None:
    if test is None:
        return None
    values = []
    for operand in test.operands[2:]:
        name = operand.strip().split(".")[0]
        value = _reader(registers, "R")(name) if name.startswith("R") else None
        values.append(f"{name} = 0x{value:x}" if value is not None else name)
    return f"{test.opcode} ({', '.join(v for v in values if v != 'PT')})"


def poll_released(core: Coredump, device: int, member: WarpPcs, poll: Poll, pc: int) -> bool | None:
    """Whether the first lane of `member` at `pc` last read a value that already ends its poll
    loop (its registers against the loop's test); None when the dump cannot say."""
    warp = find_warp(core, device, member.sm_id, member.warp_id)
    lane = core.find_lane_at(warp, pc) if warp else None
    registers = core.registers(lane) if lane else None
    return None if registers is None else exit_taken(poll, _reader(registers, "R"))


def register_reader(
    registers: tuple[int, ...] | None, uniforms: tuple[int, ...] | None
) -> Callable[[str], int | None]:
    """A reader of a lane's registers by name: `R5` from its own, `UR6` from its warp's uniform
    registers (`RZ`, `URZ` read 0); None for what the dump does not hold."""
    general, uniform = _reader(registers, "R"), _reader(uniforms, "UR")

    def read(name: str) -> int | None:
        value = uniform(name) if name.startswith("U") else general(name)
        return None if value is None else int(value)

    return read
