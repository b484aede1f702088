"""A failed device-side assert, decoded from the dump alone: message, file, line, function.

`assert(c)` in device code compiles to a call of the driver's
``__assertfail(message, file, line, function, charSize)``. By the CUDA calling convention its
arguments are in registers from R4 on, each 64-bit one in the next even pair: message R5:R4,
file R7:R6, line R8, function R11:R10, charSize R13:R12. ptxas sets them just before the
call, the line as an immediate and each string's address from a constant-bank-4 slot the
linker relocates to the string's symbol; the strings themselves are in the module's
`.nv.global.init`. So the answer is read two ways:

- from the code: what the instructions before the call set each register to, on every path
  into it (`postmortem.cubin.regvalues`), and the symbol each bank-4 slot is relocated to
  (`postmortem.cubin.globaldata`). This holds whatever the lane's registers became later,
  and an H100 (driver 580) leaves the asserting lane inside the call, its argument registers
  already reused by the driver's handler (fixtures/real/torch_index_assert_real);
- from the lane's registers, only when its PC is the call itself (it has not entered the
  handler): the values the call was about to receive, which also tell lanes apart when one
  call is reached from several asserts.

Each part says where it came from, or why it is unknown; nothing is filled in.
"""

from __future__ import annotations

from collections import Counter
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
from postmortem.cubin.sass import SassInstruction, SassListing
from postmortem.model import Fault, Module

__all__ = ["Argument", "DeviceAssert", "decode_assert", "find_assert_call"]

ASSERTFAIL = "__assertfail"
_WARP_ASSERT = 12
_VARIANTS_KEPT = 8


# __assertfail(const char* message, const char* file, unsigned line, const char* function,
# size_t charSize): 64-bit parameters start at an even register.
ASSERTFAIL_PARAMETERS = (
    Parameter("message", 4, True),
    Parameter("file", 6, True),
    Parameter("line", 8, False),
    Parameter("function", 10, True),
)


@dataclass(frozen=True, slots=True)
class DeviceAssert:
    """What a failed `assert()` said, as the driver would have printed it."""

    message: Argument
    file: Argument
    line: Argument
    function: Argument
    call_offset: int
    """Offset of the ``__assertfail`` call in the function's code section."""
    callee: str | None
    """The function the call jumps to, from its constant-bank slot (``__assertfail``)."""
    lanes: int
    """Asserting lanes this decoding holds for."""
    lanes_in_call: bool
    """True when the lanes' PC is the call's return address (inside the driver's handler):
    their argument registers are no longer the call's, and only the code is read."""
    other_messages: tuple[tuple[str, int], ...] = ()
    """Other messages lanes at the same call asserted with (their registers differ), with
    their lane counts, most lanes first."""

    @property
    def place(self) -> str | None:
        """``Loss.cu:244``: the file and line the assert names, when both are known."""
        if not isinstance(self.file.value, str) or not isinstance(self.line.value, int):
            return None
        return f"{self.file.value}:{self.line.value}"

    @property
    def text(self) -> str:
        """The driver's words: ``Assertion `c` failed at Loss.cu:244 in f``, parts missing
        said to be unknown."""
        message = self.message.value if self.message.known else "(message unknown)"
        where = self.place or (
            f"{self.file.value}:(line unknown)" if self.file.known else "(file unknown)"
        )
        function = self.function.value if self.function.known else "(function unknown)"
        return f"Assertion `{message}` failed at {where} in {function}"


def find_assert_call(
    listing: SassListing, offset: int, exception: int | None
) -> tuple[SassInstruction, bool] | None:
    """The call a failed assert's PC is at, and whether the PC is the call's return address
    (the lane is inside the call) rather than the call itself; None when the PC is neither.

    Seen both ways: a lane stopped at the ``CALL`` and, on an H100 with driver 580, a lane
    inside the call whose PC is the next instruction (fixtures/real/torch_index_assert_real).
    """
    if exception != _WARP_ASSERT:
        return None
    at = listing.at(offset)
    if at is not None and at.base_opcode == "CALL":
        return at, False
    before = listing.before(offset)
    if before is not None and before.base_opcode == "CALL":
        return before, True
    return None


def decode_assert(
    core: Coredump,
    code_map: CodeMap,
    module: Module,
    listing: SassListing,
    offset: int,
    faults: Sequence[Fault],
) -> DeviceAssert | None:
    """Decodes the failed assert whose lanes (`faults`) stopped at `offset` of `listing`.

    Returns:
        The assert, or None when the PC is not at an ``__assertfail`` call.
    """
    found = find_assert_call(listing, offset, faults[0].exception if faults else None)
    if found is None:
        return None
    call, inside = found
    cfg = ControlFlowGraph(listing)
    data = module_data(code_map, module)
    callee = find_callee(cfg, call, data)
    if callee is not None and callee != ASSERTFAIL:
        return None
    reader = CallReader(core, data, cfg, call)
    static = {p.name: reader.from_code(p) for p in ASSERTFAIL_PARAMETERS}
    per_lane: list[dict[str, Argument]] = []
    if not inside:
        for fault in faults:
            registers = core.registers(fault.lane_record) if fault.lane_record else None
            if registers:
                per_lane.append(
                    {
                        p.name: reader.from_lane(p, registers, static[p.name])
                        for p in ASSERTFAIL_PARAMETERS
                    }
                )
    parts, others = _choose(static, per_lane)
    return DeviceAssert(
        parts["message"], parts["file"], parts["line"], parts["function"],
        call.offset, callee, len(faults), inside, others,
    )  # fmt: skip


def _choose(
    static: dict[str, Argument], per_lane: list[dict[str, Argument]]
) -> tuple[dict[str, Argument], tuple[tuple[str, int], ...]]:
    """The parts most lanes agree on, and the other messages with their lane counts."""
    if not per_lane:
        return static, ()
    counts = Counter(str(lane["message"].value) for lane in per_lane)
    ranked = counts.most_common()
    top = ranked[0][0]
    chosen = next(lane for lane in per_lane if str(lane["message"].value) == top)
    return chosen, tuple(ranked[1 : 1 + _VARIANTS_KEPT])
