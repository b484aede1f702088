"""A warp stopped at a trap: which instruction, and what the code said just before it.

`__trap()`, `asm("trap;")` and, on Hopper, `__brkpt()` all compile to ``BPT.TRAP``
(fixtures/cu/trap.cu); a debugger's breakpoint is ``BPT.INT``. A trap carries no message of
its own, but code that traps on purpose often prints one first (PyTorch's
CUDA_KERNEL_ASSERT_PRINTF, a kernel's own `printf(...); __trap();`): the format string of
the last `printf` (a call of `vprintf`) on the way to the trap is read from the code, as an
assert's arguments are, and a ``file.cu:123`` it names is the place to read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from postmortem.analysis.fault.callargs import (
    Argument,
    CallReader,
    Parameter,
    find_callee,
    module_data,
)
from postmortem.codemap import CodeMap
from postmortem.coredump import Coredump
from postmortem.cubin.cfg import ControlFlowGraph
from postmortem.cubin.globaldata import ModuleData
from postmortem.cubin.sass import SassInstruction, SassListing
from postmortem.model import Fault, FaultSource, Module

__all__ = ["TrapStop", "find_trap"]

VPRINTF = "vprintf"
_FORMAT = Parameter("format", 4, True)
_PLACE = re.compile(r"(?P<file>[\w./+-]{1,240}\.(?:cu|cuh|h|hpp|hh|cpp|cc|py)):(?P<line>\d{1,7})")
_KINDS = {
    "TRAP": 'a trap (BPT.TRAP: __trap(), asm("trap;"), or __brkpt())',
    "INT": "a breakpoint (BPT.INT, a debugger's)",
}
_LOOK_BACK = 64
"""Instructions searched before the trap for the printf that announces it."""


@dataclass(frozen=True, slots=True)
class TrapStop:
    """The trap instruction a warp stopped at, and the message printed before it."""

    instruction: SassInstruction
    kind: str
    """What the instruction is, in words."""
    printed: Argument | None
    """The format string of the last printf before the trap; None when none precedes it."""
    place: tuple[str, int] | None
    """A ``file:line`` the printed format names, when it names one."""


def find_trap(
    core: Coredump,
    code_map: CodeMap,
    module: Module,
    listing: SassListing,
    offset: int,
    faults: Sequence[Fault],
) -> TrapStop | None:
    """The trap at `offset` (or just before it: the PC may be past the trap); None when the
    lanes did not stop at one."""
    trap = _trap_at(listing, offset, faults)
    if trap is None:
        return None
    kind = _KINDS.get(trap.modifiers[0] if trap.modifiers else "", f"a {trap.opcode}")
    cfg = ControlFlowGraph(listing)
    data = module_data(code_map, module)
    call = _printf_before(cfg, trap, data)
    if call is None:
        return TrapStop(trap, kind, None, None)
    printed = CallReader(core, data, cfg, call).from_code(_FORMAT)
    named = _PLACE.search(printed.value) if isinstance(printed.value, str) else None
    place = (named["file"], int(named["line"])) if named else None
    return TrapStop(trap, kind, printed, place)


def _trap_at(listing: SassListing, offset: int, faults: Sequence[Fault]) -> SassInstruction | None:
    at = listing.at(offset)
    if at is not None and at.base_opcode == "BPT":
        return at
    # A broken warp's PC may already be past the trap it stopped at.
    before = listing.before(offset)
    if before is None or before.base_opcode != "BPT":
        return None  # asked first: a grid-wide fault has 270,000 faults to look through
    return before if any(f.source is FaultSource.TRAP for f in faults) else None


def _printf_before(
    cfg: ControlFlowGraph, trap: SassInstruction, data: ModuleData | None
) -> SassInstruction | None:
    """The last call before the trap in its block and the single-predecessor blocks above
    it, when that call is a printf; a call of anything else stops the search."""
    block = cfg.block_of(trap.offset)
    seen = 0
    while block is not None and seen < _LOOK_BACK:
        for instruction in reversed(block.instructions):
            if instruction.offset >= trap.offset:
                continue
            seen += 1
            if instruction.base_opcode == "CALL":
                callee = find_callee(cfg, instruction, data)
                return instruction if callee == VPRINTF else None
        predecessors = cfg.predecessors(block.index)
        block = cfg.blocks[predecessors[0]] if len(predecessors) == 1 else None
    return None
