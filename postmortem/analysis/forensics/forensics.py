"""Forensics of a faulting instruction: what it accessed, at which address in every faulting
lane, where that address falls, and which kernel argument it came from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from postmortem.analysis.forensics.address import (
    AddressSpread,
    LaneAddress,
    address_spread,
    lane_addresses,
)
from postmortem.analysis.forensics.arguments import KernelArguments, read_arguments
from postmortem.analysis.forensics.region import AddressCheck, check_addresses
from postmortem.analysis.state import grid_code
from postmortem.codemap import CodeMap
from postmortem.coredump import Coredump
from postmortem.cubin.operands import MemoryAccess, address_formula, decode_access
from postmortem.cubin.sass import SassInstruction
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import Fault, Lane
from postmortem.spelling import dim3_text

# Spaces whose addresses are device virtual addresses, so that a pointer argument can be
# their origin; shared and local offsets and constant-bank offsets are not.
_POINTER_SPACES = frozenset({"global", "generic"})


@dataclass(frozen=True, slots=True)
class Forensics:
    """The faulting instruction decoded and its address reconstructed."""

    access: MemoryAccess | None
    """None when the instruction touches no memory (see `notes`)."""
    formula: str | None
    """How the address is formed, e.g. ``R3:R2 + 0x1c``."""
    lanes: tuple[LaneAddress, ...]
    lane_set: str
    """Which lanes `lanes` are: "faulting lanes" or "active lanes at the error PC"."""
    spread: AddressSpread | None
    checks: tuple[AddressCheck, ...]
    arguments: KernelArguments | None
    notes: tuple[Finding, ...]
    """What could not be worked out, and why."""


def examine(
    core: Coredump, code_map: CodeMap, faults: Sequence[Fault], instruction: SassInstruction
) -> Forensics:
    """Decode `instruction` and work out the address every lane of `faults` accessed."""
    access = decode_access(instruction)
    if access is None:
        note = f"{instruction.opcode} does not access memory: there is no address to compute"
        arguments, why = _arguments(core, code_map, faults, None, None)
        chosen = _chosen_lanes(faults)
        return Forensics(None, None, (), "", None, (), arguments, _limits(note, *chosen, *why))
    notes = _chosen_lanes(faults)
    lanes, lane_set, moved = lane_addresses(core, access, faults)
    moved_on = _moved_on(moved, faults, instruction)
    if not lanes and not moved:  # lanes that moved on are said by `moved_on`
        notes.append(
            "no active lane of the faulting warp is at the error PC: the exception is "
            "imprecise (the lanes moved on), so their registers no longer hold the address"
            if any(f.warp_record is not None for f in faults)
            else "no lane registers: the faulting warp is not in the dump (an SM-level fault "
            "whose warp has exited)"
        )
    missing = sorted({name for lane in lanes for name in lane.missing})
    if missing:
        notes.append(
            f"registers not in the dump: {', '.join(missing)}; those lanes have no address"
        )
    if access.address is None:
        notes.append(f"{instruction.opcode} has no address operand nvdisasm spells out")
    addresses = [lane.address for lane in lanes if lane.address is not None]
    formula = address_formula(access) if access.address is not None else None
    focus = addresses[0] if addresses and access.space in _POINTER_SPACES else None
    arguments, why = _arguments(core, code_map, faults, focus, access.width_bytes)
    return Forensics(
        access, formula, lanes, lane_set, address_spread(lanes),
        check_addresses(core, access, faults, addresses), arguments,
        (*moved_on, *_limits(*notes, *why)),
    )  # fmt: skip


def _moved_on(
    moved: Sequence[Lane], faults: Sequence[Fault], instruction: SassInstruction
) -> tuple[Finding, ...]:
    """Say that the faulting lanes had run on, so no address is computed from them."""
    if not moved:
        return ()
    first = moved[0]
    fault = next(f for f in faults if f.lane_record is first)
    lane_pc, error_pc = first.virtual_pc or 0, fault.error_pc or 0
    where = f"{lane_pc - error_pc:+#x} from the error PC"
    if first.function_offset is not None and lane_pc < error_pc:
        where = f"behind the error PC, at +0x{first.function_offset:x} of its function"
    count = f"{len(moved)} faulting lane{'s' if len(moved) != 1 else ''}"
    message = (
        f"{count} had moved on past {instruction.text} when the dump was written ({where}): "
        "the driver reports a fault after the warp issued the instruction, and these lanes "
        "ran on, so their registers no longer hold its address; none is computed from them"
    )
    caveat = "compute-sanitizer on the same input shows the address"
    return (Finding(FindingCode.LANES_MOVED_ON, Severity.INFO, message, caveat=caveat),)


def _chosen_lanes(faults: Sequence[Fault]) -> list[str]:
    """Say that a lane named for a warp row's fault is not a lane recorded faulting."""
    chosen = [f for f in faults if f.lane_chosen]
    if not chosen:
        return []
    first = chosen[0]
    which = f"lane {first.lane} (thread {dim3_text(first.thread_idx)}) of warp {first.warp_id}"
    if len(chosen) > 1:
        which += f" and {len(chosen) - 1} more, one per warp,"
    return [
        f"the fault is recorded on the warp row, not on a lane: {which} named as the warp's "
        "first valid lane, as cuda-gdb names it, not as a lane recorded faulting"
    ]


def _limits(*messages: str) -> tuple[Finding, ...]:
    return tuple(Finding(FindingCode.FORENSICS_LIMITED, Severity.INFO, m) for m in messages)


def _arguments(
    core: Coredump,
    code_map: CodeMap,
    faults: Sequence[Fault],
    address: int | None,
    width_bytes: int | None,
) -> tuple[KernelArguments | None, tuple[str, ...]]:
    """The grid's arguments, or None and the reason there are none."""
    fault = next((f for f in faults if f.grid_id is not None), None)
    grid = None
    if fault is not None and fault.grid_id is not None:
        grid = core.find_grid(fault.device_index, fault.grid_id)
    if fault is None or grid is None:
        return None, ("no kernel arguments: the fault names no grid the dump holds",)
    code = grid_code(code_map, grid)
    cubin = code_map.image_bytes(code[0].module) if code else None
    arguments, why = read_arguments(
        core, grid, cubin, code[1].name if code else None, address, width_bytes
    )
    return arguments, (why,) if why else ()
