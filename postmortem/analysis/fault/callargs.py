"""A call's arguments, read from the code before it and from the module's strings.

By the CUDA calling convention a device call takes its arguments in registers from R4 on,
each 64-bit one in the next even pair. ptxas sets constant arguments just before the call:
an integer as an immediate, a string's address from a constant-bank-4 slot the linker
relocates to the string's symbol (``c[0x4][0x10]``) or as relocated immediates
(``32@lo($str)``, ptxas 11). `CallReader` reads one argument two ways, and says where each
value came from or why it is unknown:

- from the code: what every path into the call sets the registers to
  (`postmortem.cubin.regvalues`), and the string at the symbol the slot names
  (`postmortem.cubin.globaldata`): true whatever the registers became later;
- from a lane's registers, which hold the call's arguments only while the lane's PC is the
  call itself; used when the code does not say (one call reached from several places).
"""

from __future__ import annotations

from dataclasses import dataclass

from postmortem.codemap import CodeMap
from postmortem.coredump import Coredump
from postmortem.cubin.cfg import ControlFlowGraph, branch_label
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
from postmortem.cubin.sass import SassInstruction
from postmortem.errors import MalformedElf
from postmortem.model import Module

__all__ = ["Argument", "CallReader", "Parameter", "find_callee", "module_data"]


@dataclass(frozen=True, slots=True)
class Parameter:
    """One parameter of a called function, where the calling convention puts it."""

    name: str
    first: int
    """Its first register (the first parameter is in R4)."""
    pointer: bool
    """A string's address (a register pair); else a 32-bit integer."""


@dataclass(frozen=True, slots=True)
class Argument:
    """One argument of a call."""

    value: str | int | None
    """The string or the integer; None when unknown."""
    source: str
    """Where it came from, or why it is unknown, in words."""

    @property
    def known(self) -> bool:
        return self.value is not None


def module_data(code_map: CodeMap, module: Module) -> ModuleData | None:
    """The module's bank-4 slots and data symbols; None when its image cannot be read."""
    try:
        image = code_map.elf_image(module)
        return ModuleData(image) if image is not None else None
    except MalformedElf:
        return None


def find_callee(
    cfg: ControlFlowGraph, call: SassInstruction, data: ModuleData | None
) -> str | None:
    """The function a call jumps to: named in the operand (``CALL.ABS.NOINC `(__assertfail)``,
    ptxas 11), or through the constant-bank slot its target register was loaded from."""
    named = branch_label(call)
    if named is not None:
        return named
    target = call.operands[0] if call.operands else ""
    if data is None or not target.startswith("R"):
        return None
    low = value_before(cfg, call.offset, target.split(".")[0])
    if not isinstance(low, BankWord):
        return None
    slot = data.slot(low.bank, low.offset)
    return slot[0].name if slot else None


class CallReader:
    """Reads a call's arguments from the code before it, or from a lane's registers."""

    def __init__(
        self, core: Coredump, data: ModuleData | None, cfg: ControlFlowGraph, call: SassInstruction
    ) -> None:
        self._core, self._data, self._cfg, self._call = core, data, cfg, call

    def from_code(self, parameter: Parameter) -> Argument:
        registers = _registers(parameter)
        values = [value_before(self._cfg, self._call.offset, r) for r in registers]
        unknown = next((v for v in values if isinstance(v, Unknown)), None)
        if unknown is not None:
            return Argument(None, f"not set by the code before the call: {unknown.reason}")
        if not parameter.pointer:
            return _integer_from_code(values[0], registers[0])
        return self._string_from_code(values, registers)

    def _string_from_code(
        self, values: list[RegisterValue], registers: tuple[str, ...]
    ) -> Argument:
        low, high = values
        pair = f"{registers[1]}:{registers[0]}"
        if self._data is None:
            return Argument(None, f"{pair}: the module's image is not readable")
        if isinstance(low, SymbolWord) and isinstance(high, SymbolWord):
            if low.symbol != high.symbol or low.high or not high.high:
                return Argument(None, f"{pair} holds halves of two addresses")
            how = f"{pair} = the address of {low.symbol} (set at /*{low.at:04x}*/)"
            symbol = self._data.symbol(low.symbol)
            if symbol is None:
                return Argument(None, f"{how}, which the image does not define")
            return self._string(how, symbol, 0)
        if not (isinstance(low, BankWord) and isinstance(high, BankWord)) or (
            high.bank != low.bank or high.offset != low.offset + 4
        ):
            return Argument(None, f"{pair} is not loaded from one constant-bank slot")
        how = f"{pair} = c[0x{low.bank:x}][0x{low.offset:x}] (loaded at /*{low.at:04x}*/)"
        slot = self._data.slot(low.bank, low.offset)
        if slot is None:
            return Argument(None, f"{how}, which no relocation of the image fills")
        return self._string(how, *slot)

    def _string(self, how: str, symbol: ElfSymbol, addend: int) -> Argument:
        assert self._data is not None
        address = self._data.address_of(symbol)
        in_memory = self._in_memory(address + addend, symbol.name) if address else None
        found = in_memory or self._data.string(symbol, addend)
        if isinstance(found, StringMissing):
            return Argument(None, f"{how} → {symbol.name}: {found.reason}")
        return Argument(found.text, f"{how} → {found.symbol}, read from {found.how}{_cut(found)}")

    def from_lane(
        self, parameter: Parameter, registers: tuple[int, ...], code: Argument
    ) -> Argument:
        """The parameter as the lane's registers hold it at the call, when the code does not
        say (one call reached from several asserts); the code's value otherwise."""
        numbers = [int(r[1:]) for r in _registers(parameter)]
        if code.known or max(numbers) >= len(registers):
            return code
        held = [registers[n] for n in numbers]
        if not parameter.pointer:
            return Argument(held[0], f"R{numbers[0]} of the lane at the call")
        address = held[0] | held[1] << 32
        pair = f"R{numbers[1]}:R{numbers[0]} = 0x{address:x} in the lane at the call"
        found = self._at_address(address)
        if isinstance(found, StringMissing):
            return Argument(None, f"{pair}: {found.reason}; {code.source}")
        return Argument(found.text, f"{pair} → {found.symbol}, read from {found.how}{_cut(found)}")

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


def _integer_from_code(value: RegisterValue, register: str) -> Argument:
    if isinstance(value, Immediate):
        return Argument(value.value, f"{register} = 0x{value.value:x}, set at /*{value.at:04x}*/")
    return Argument(None, f"{register} is loaded, not set to a constant by the code")


def _registers(parameter: Parameter) -> tuple[str, ...]:
    first = parameter.first
    return (f"R{first}", f"R{first + 1}") if parameter.pointer else (f"R{first}",)


def _cut(found: FoundString) -> str:
    return " (cut at 1,024 bytes)" if found.cut else ""
