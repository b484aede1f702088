"""The device call stack of a lane: the functions it was called through, not inlined.

A lane whose `callDepth` is above 0 is inside a function reached by `CALL` (ptxas's clones
`$<kernel>$<callee>`, `__noinline__` and library code, every call of a `-G` build). Its
backtrace rows hold each caller's return address; the instruction before it is the `CALL`,
whose line is the call site. As cuda-gdb unwinds: frame 0 is the lane's PC, frame k its
row k-1's return address, and the first `syscallCallDepth` frames are the driver's own
(hidden). Every frame gets its function, the offset in that function, the instruction and
its own inline chain. Rows that are missing, or return addresses that do not follow a
`CALL`, end the stack there with a note: the PC's function stands alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from postmortem.analysis.fault.inline import FrameName, line_table_chain
from postmortem.analysis.fault.source import FunctionAt
from postmortem.analysis.state import still_at_fault
from postmortem.codemap import CodeMap
from postmortem.coredump import Coredump
from postmortem.cubin.inspect import Function
from postmortem.cubin.nvdisasm import Disassembly
from postmortem.cubin.sass import INSTRUCTION_BYTES, SassInstruction, SourceFrame
from postmortem.demangle import demangle
from postmortem.model import Fault, Lane, Module

# Deeper stacks are shown cut (recursion in a dump of untrusted depth).
MAX_FRAMES = 64


@dataclass(frozen=True, slots=True)
class CallFrame:
    """One function of the call stack, innermost first."""

    level: int
    """0 for the function holding the PC, 1 for its caller, and so on."""
    pc: int
    """Frame 0: the PC; a caller: the return address the backtrace row holds."""
    module: Module | None
    function: Function | None
    """The innermost function symbol holding the frame's instruction (a clone for a
    called function ptxas copied into its kernel)."""
    offset: int | None
    """The frame's instruction (the PC, or the `CALL` before a return address) relative
    to the start of `function`."""
    section_offset: int | None
    """The same instruction relative to its code section: nvdisasm's `/*offset*/`."""
    instruction: SassInstruction | None
    """The instruction at the PC, or the `CALL`, when the function was disassembled."""
    chain: tuple[SourceFrame, ...]
    """The inline chain at that instruction, innermost first (empty without line info)."""
    frame_names: tuple[FrameName | None, ...]

    @property
    def is_call_site(self) -> bool:
        return self.level > 0

    @property
    def name(self) -> str | None:
        """The function demangled as written in the source (a clone as its callee)."""
        return None if self.function is None else self.function.demangled

    @property
    def clone_in(self) -> str | None:
        """For a clone ptxas made of a called function, the kernel it lives in, demangled."""
        kernel = self.function.clone_in if self.function else None
        return None if kernel is None else demangle(kernel)


@dataclass(frozen=True, slots=True)
class CallStack:
    """A lane's call stack as its backtrace rows and the code give it."""

    frames: tuple[CallFrame, ...]
    call_depth: int
    """The lane's `callDepth`, the driver's system frames included."""
    hidden: int
    """System frames (`syscallCallDepth`) left out, as cuda-gdb hides them."""
    notes: tuple[str, ...]
    """Why the stack is shorter than the call depth, or where the rows and the code
    disagree."""

    @property
    def is_called(self) -> bool:
        """True when the PC is in a function that was called (a stack of two or more)."""
        return len(self.frames) > 1


def unwind(
    core: Coredump,
    code_map: CodeMap,
    fault: Fault,
    listing: Disassembly | None = None,
    function_at: FunctionAt | None = None,
) -> CallStack | None:
    """The call stack of a faulting lane; None when the fault has no lane row or PC.

    `listing` is the disassembly of the kernel's code section (clones included), when
    there is one: it gives each frame its instruction and checks each `CALL`.
    """
    lane, pc = fault.lane_record, fault.error_pc
    if lane is None or pc is None:
        return None
    if not still_at_fault(lane, pc):
        # The lane's call depth and backtrace rows are of where it went, not of the fault.
        frame, _ = _frame(code_map, lane.device_index, 0, pc, False, listing, function_at)
        moved = (
            f"the lane had moved on to 0x{lane.virtual_pc:x} when the dump was written: its "
            "calls at the fault are not in the dump"
        )
        return CallStack((frame,), 0, 0, (moved,))
    return unwind_lane(core, code_map, lane, pc, listing, function_at)


def unwind_lane(
    core: Coredump,
    code_map: CodeMap,
    lane: Lane,
    pc: int,
    listing: Disassembly | None = None,
    function_at: FunctionAt | None = None,
) -> CallStack:
    """The call stack of any lane (a stuck warp's, in a hang) whose PC is `pc`."""
    depth = lane.call_depth or 0
    hidden = min(lane.syscall_call_depth or 0, depth)
    rows = sorted(core.backtrace(lane), key=lambda row: row.level)[:depth]
    notes: list[str] = []
    if len(rows) < depth:
        notes.append(
            f"the lane's call depth is {depth} but the dump holds {len(rows)} backtrace "
            "rows: its callers are unknown"
        )
    # cuda-gdb: frame k's PC is the lane's PC for level 0, else row (level - 1)'s return.
    addresses = [pc] + [row.virtual_return_address for row in rows]
    frames: list[CallFrame] = []
    for level, address in enumerate(addresses[hidden : hidden + MAX_FRAMES]):
        is_return = level + hidden > 0
        frame, problem = _frame(
            code_map, lane.device_index, level, address, is_return, listing, function_at
        )
        if problem:
            notes.append(problem)
            if level:
                break
        frames.append(frame)
    innermost = frames[0].function if frames else None
    if depth == 0 and innermost is not None and innermost.clone_in is not None:
        notes.append(
            "the PC lies in a called function but the lane's call depth is 0: "
            "its callers are unknown"
        )
    return CallStack(tuple(frames), depth, hidden, tuple(notes))


def _frame(
    code_map: CodeMap,
    device: int,
    level: int,
    address: int,
    is_return: bool,
    listing: Disassembly | None,
    function_at: FunctionAt | None,
) -> tuple[CallFrame, str | None]:
    # A return address is the instruction after the CALL: the call site is the one before.
    at = address - INSTRUCTION_BYTES if is_return else address
    location = code_map.locate(device, at)
    summary = code_map.summary(location.module) if location else None
    function = summary.find_function(at) if summary else None
    if location is None or function is None:
        return _bare(level, address), (
            f"frame {level}: {'return address' if is_return else 'PC'} 0x{address:x} "
            "lies in no function of the dump's code"
        )
    section_offset = location.offset
    named = line_table_chain(code_map, location.module, function, section_offset, function_at)
    instruction = _instruction_at(listing, location.section_name, section_offset)
    frame = CallFrame(
        level, address, location.module, function, at - function.address, section_offset,
        instruction, named.frames if named else (), named.names if named else (),
    )  # fmt: skip
    if is_return and instruction is not None and not instruction.base_opcode.startswith("CALL"):
        return frame, (
            f"frame {level}: the instruction before return address 0x{address:x} is "
            f"{instruction.text}, not a CALL: the backtrace rows disagree with the code"
        )
    return frame, None


def _instruction_at(
    listing: Disassembly | None, section: str, offset: int
) -> SassInstruction | None:
    # The listing is of the faulting kernel's section; a frame in another section has none.
    if listing is None or listing.listing.section not in (None, section):
        return None
    return listing.listing.at(offset)


def _bare(level: int, address: int) -> CallFrame:
    return CallFrame(level, address, None, None, None, None, None, (), ())
