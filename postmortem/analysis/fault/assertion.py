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

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from postmortem.codemap import CodeMap
from postmortem.coredump import Coredump
from postmortem.cubin.cfg import ControlFlowGraph
from postmortem.cubin.elfimage import ElfSymbol
from postmortem.cubin.globaldata import FoundString, ModuleData, StringMissing, read_c_string
from postmortem.cubin.regvalues import (
    BankWord,
    Immediate,
    RegisterValue,
    SymbolWord,
    Unknown,
    value_before,
)
from postmortem.cubin.sass import SassInstruction, SassListing
from postmortem.errors import MalformedElf
from postmortem.model import Fault, Module

__all__ = ["AssertPart", "DeviceAssert", "decode_assert", "find_assert_call"]

ASSERTFAIL = "__assertfail"
_WARP_ASSERT = 12
_VARIANTS_KEPT = 8
_NAMED_TARGET = re.compile(r"^`\((?P<name>[^()\s]+)\)$")


@dataclass(frozen=True, slots=True)
class _Parameter:
    name: str
    first: int
    """Its first register (the calling convention puts the first parameter in R4)."""
    pointer: bool


# __assertfail(const char* message, const char* file, unsigned line, const char* function,
# size_t charSize): 64-bit parameters start at an even register.
_PARAMETERS = (
    _Parameter("message", 4, True),
    _Parameter("file", 6, True),
    _Parameter("line", 8, False),
    _Parameter("function", 10, True),
)


@dataclass(frozen=True, slots=True)
class AssertPart:
    """One argument of the failed assert."""

    value: str | int | None
    """The text (message, file, function) or the line number; None when unknown."""
    source: str
    """Where it came from, or why it is unknown, in words."""

    @property
    def known(self) -> bool:
        return self.value is not None


@dataclass(frozen=True, slots=True)
class DeviceAssert:
    """What a failed `assert()` said, as the driver would have printed it."""

    message: AssertPart
    file: AssertPart
    line: AssertPart
    function: AssertPart
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
    try:
        image = code_map.elf_image(module)
        data = ModuleData(image) if image is not None else None
    except MalformedElf:
        data = None
    callee = _callee(cfg, call, data)
    if callee is not None and callee != ASSERTFAIL:
        return None
    reader = _Reader(core, data, cfg, call)
    static = {p.name: reader.from_code(p) for p in _PARAMETERS}
    per_lane: list[dict[str, AssertPart]] = []
    if not inside:
        for fault in faults:
            registers = core.registers(fault.lane_record) if fault.lane_record else None
            if registers:
                per_lane.append(
                    {p.name: reader.from_lane(p, registers, static[p.name]) for p in _PARAMETERS}
                )
    parts, others = _choose(static, per_lane)
    return DeviceAssert(
        parts["message"], parts["file"], parts["line"], parts["function"],
        call.offset, callee, len(faults), inside, others,
    )  # fmt: skip


def _choose(
    static: dict[str, AssertPart], per_lane: list[dict[str, AssertPart]]
) -> tuple[dict[str, AssertPart], tuple[tuple[str, int], ...]]:
    """The parts most lanes agree on, and the other messages with their lane counts."""
    if not per_lane:
        return static, ()
    counts = Counter(str(lane["message"].value) for lane in per_lane)
    ranked = counts.most_common()
    top = ranked[0][0]
    chosen = next(lane for lane in per_lane if str(lane["message"].value) == top)
    return chosen, tuple(ranked[1 : 1 + _VARIANTS_KEPT])


def _callee(cfg: ControlFlowGraph, call: SassInstruction, data: ModuleData | None) -> str | None:
    """The function a call jumps to: named in the operand (``CALL.ABS.NOINC `(__assertfail)``,
    ptxas 11), or through the constant-bank slot its target register was loaded from."""
    target = call.operands[0] if call.operands else ""
    if named := _NAMED_TARGET.match(target):
        return named["name"]
    if data is None or not target.startswith("R"):
        return None
    low = value_before(cfg, call.offset, target.split(".")[0])
    if not isinstance(low, BankWord):
        return None
    slot = data.slot(low.bank, low.offset)
    return slot[0].name if slot else None


class _Reader:
    """Reads one parameter from the code before the call, or from a lane's registers."""

    def __init__(
        self, core: Coredump, data: ModuleData | None, cfg: ControlFlowGraph, call: SassInstruction
    ) -> None:
        self._core, self._data, self._cfg, self._call = core, data, cfg, call

    def from_code(self, parameter: _Parameter) -> AssertPart:
        registers = _registers(parameter)
        values = [value_before(self._cfg, self._call.offset, r) for r in registers]
        unknown = next((v for v in values if isinstance(v, Unknown)), None)
        if unknown is not None:
            return AssertPart(None, f"not set by the code before the call: {unknown.reason}")
        if not parameter.pointer:
            return _line_from_code(values[0], registers[0])
        return self._string_from_code(values, registers)

    def _string_from_code(
        self, values: list[RegisterValue], registers: tuple[str, ...]
    ) -> AssertPart:
        low, high = values
        pair = f"{registers[1]}:{registers[0]}"
        if self._data is None:
            return AssertPart(None, f"{pair}: the module's image is not readable")
        if isinstance(low, SymbolWord) and isinstance(high, SymbolWord):
            if low.symbol != high.symbol or low.high or not high.high:
                return AssertPart(None, f"{pair} holds halves of two addresses")
            how = f"{pair} = the address of {low.symbol} (set at /*{low.at:04x}*/)"
            symbol = self._data.symbol(low.symbol)
            if symbol is None:
                return AssertPart(None, f"{how}, which the image does not define")
            return self._string(how, symbol, 0)
        if not (isinstance(low, BankWord) and isinstance(high, BankWord)) or (
            high.bank != low.bank or high.offset != low.offset + 4
        ):
            return AssertPart(None, f"{pair} is not loaded from one constant-bank slot")
        how = f"{pair} = c[0x{low.bank:x}][0x{low.offset:x}] (loaded at /*{low.at:04x}*/)"
        slot = self._data.slot(low.bank, low.offset)
        if slot is None:
            return AssertPart(None, f"{how}, which no relocation of the image fills")
        return self._string(how, *slot)

    def _string(self, how: str, symbol: ElfSymbol, addend: int) -> AssertPart:
        assert self._data is not None
        address = self._data.address_of(symbol)
        in_memory = self._in_memory(address + addend, symbol.name) if address else None
        found = in_memory or self._data.string(symbol, addend)
        if isinstance(found, StringMissing):
            return AssertPart(None, f"{how} → {symbol.name}: {found.reason}")
        return AssertPart(found.text, f"{how} → {found.symbol}, read from {found.how}{_cut(found)}")

    def from_lane(
        self, parameter: _Parameter, registers: tuple[int, ...], code: AssertPart
    ) -> AssertPart:
        """The parameter as the lane's registers hold it at the call, when the code does not
        say (one call reached from several asserts); the code's value otherwise."""
        numbers = [int(r[1:]) for r in _registers(parameter)]
        if code.known or max(numbers) >= len(registers):
            return code
        held = [registers[n] for n in numbers]
        if not parameter.pointer:
            return AssertPart(held[0], f"R{numbers[0]} of the lane at the call")
        address = held[0] | held[1] << 32
        pair = f"R{numbers[1]}:R{numbers[0]} = 0x{address:x} in the lane at the call"
        found = self._at_address(address)
        if isinstance(found, StringMissing):
            return AssertPart(None, f"{pair}: {found.reason}; {code.source}")
        return AssertPart(
            found.text, f"{pair} → {found.symbol}, read from {found.how}{_cut(found)}"
        )

    def _at_address(self, address: int) -> FoundString | StringMissing:
        if (in_memory := self._in_memory(address, f"0x{address:x}")) is not None:
            return in_memory
        held = self._data.symbol_at(address) if self._data else None
        if held is None or self._data is None:
            return StringMissing(
                "no symbol of the module holds that address, and the dump has no memory there"
            )
        return self._data.string(*held)

    def _in_memory(self, address: int, symbol: str) -> FoundString | None:
        # The dump's own global memory, when it was captured, is what the program had.
        data = self._core.read_memory(address, 1024) if address else None
        if not data:
            return None
        found = read_c_string(data, symbol, f"the dump's global memory at 0x{address:x}")
        return found if isinstance(found, FoundString) else None


def _line_from_code(value: RegisterValue, register: str) -> AssertPart:
    if isinstance(value, Immediate):
        return AssertPart(value.value, f"{register} = 0x{value.value:x}, set at /*{value.at:04x}*/")
    return AssertPart(None, f"{register} is loaded, not set to a constant by the code")


def _registers(parameter: _Parameter) -> tuple[str, ...]:
    first = parameter.first
    return (f"R{first}", f"R{first + 1}") if parameter.pointer else (f"R{first}",)


def _cut(found: FoundString) -> str:
    return " (cut at 1,024 bytes)" if found.cut else ""
