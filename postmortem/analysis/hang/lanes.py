"""What a lane's registers say of its wait: whether the value it last read already ends its poll
loop, whether a running loop's bound is absurd, and its convergence state in cuda-gdb's words.

Pure functions over the instructions `waits.py` found and a reader of register values by name;
the dump is read by the caller (`flags.py`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

from postmortem.analysis.hang.waits import Poll
from postmortem.cubin.sass import SassInstruction
from postmortem.model import Lane


def absurd_bound(test: SassInstruction, read: Callable[[str], int | None]) -> str | None:
    """A compare of a loop's exit whose register operand holds an absurd bound (negative as a
    signed value, over 2^31 unsigned), in words; else None. Evidence of a runaway loop (a
    length read as -1 and compared unsigned), never proof of one."""
    for operand in test.operands[2:4]:
        name = operand.strip().removesuffix(".reuse")
        if not re.fullmatch(r"U?R\d+", name):
            continue
        value = read(name)
        if value is None:
            continue
        if value & 0x8000_0000:
            reading = f"{_signed(value)} as signed, {value:,} unsigned"
            return f"{name} = 0x{value:x} ({reading}) in {test.text}"
    return None


_COMPARE = {
    "EQ": lambda a, b: a == b,
    "NE": lambda a, b: a != b,
    "LT": lambda a, b: a < b,
    "LE": lambda a, b: a <= b,
    "GT": lambda a, b: a > b,
    "GE": lambda a, b: a >= b,
}


def exit_taken(poll: Poll, read: Callable[[str], int | None]) -> bool | None:
    """Whether the value a lane last read already takes it out of the loop, from its
    registers (`read` gives a register's value, or None); None when the test is not a plain
    integer compare of two values."""
    test = poll.test
    if test is None or poll.leaves_when is None or test.base_opcode != "ISETP":
        return None
    if len(test.operands) != 5 or test.operands[1].strip() != "PT" or "AND" not in test.modifiers:
        return None
    if test.operands[4].strip() != "PT":
        return None
    compare = next((_COMPARE[m] for m in test.modifiers if m in _COMPARE), None)
    left, right = (_value(op, read) for op in test.operands[2:4])
    if compare is None or left is None or right is None:
        return None
    if "U32" not in test.modifiers:
        left, right = _signed(left), _signed(right)
    return bool(compare(left, right)) == poll.leaves_when


def _value(operand: str, read: Callable[[str], int | None]) -> int | None:
    text = operand.strip().removesuffix(".reuse")
    if text in ("RZ", "URZ"):
        return 0
    if re.fullmatch(r"-?0x[0-9a-fA-F]+|-?\d+", text):
        return int(text, 0) & 0xFFFF_FFFF
    return read(text) if re.fullmatch(r"U?R\d+", text) else None


def _signed(value: int) -> int:
    return value - (1 << 32) if value & 0x8000_0000 else value


_CBU_STATES = ("Exited", "Ready", "Yielded", "Sleep", "SleepYield", "ReadyAtNext",
               "BlockedPlus", "BlockedAll", "BlockedCollective")  # fmt: skip
"""CUDBGCbuThreadState 0-8 (the debugger API header); 9 + n is "Blocked on Bn"."""


def convergence_state(value: int) -> str:
    """A lane's cbuThreadState in cuda-gdb's words; an unknown value as its number."""
    if value < len(_CBU_STATES):
        return _CBU_STATES[value]
    if value < len(_CBU_STATES) + 16:
        return f"Blocked on B{value - len(_CBU_STATES)}"
    return "Invalid" if value == 0xFFFF_FFFF else f"state {value}"


def lane_states(lanes: Sequence[Lane]) -> tuple[tuple[str, int], ...]:
    """How many of `lanes` are in each convergence state, most first; () when their rows do
    not record it (before r575)."""
    counts = Counter(
        convergence_state(lane.cbu_thread_state)
        for lane in lanes
        if lane.cbu_thread_state is not None
    )
    return tuple(counts.most_common())
