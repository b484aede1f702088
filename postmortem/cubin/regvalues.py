"""What a register holds at an instruction, read from the code alone.

A call's arguments are usually constants set just before it: an immediate moved into a
register (``IMAD.MOV.U32 R8, RZ, RZ, 0x6f``), a half-precision pair (``HFMA2.MMA R12, -RZ,
RZ, 0, 5.96e-08`` is 1), or a 64-bit address loaded from the constant bank the linker fills
with the addresses of globals (``ULDC.64 UR4, c[0x4][0x10]`` then ``MOV R4, UR4``). This
module walks back from an instruction over the control-flow graph and says, per register,
which of those it holds, and where it was set: a reaching-definitions question asked of the
instructions before the point on every path into it. A value is claimed only when every path
sets the same one; anything else (a register set by arithmetic, under a guard, differently on
two paths, or not at all in the function) is `Unknown`, with the reason.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from postmortem.cubin.cfg import ControlFlowGraph, is_unconditional
from postmortem.cubin.sass import SassInstruction

__all__ = ["BankWord", "Immediate", "RegisterValue", "SymbolWord", "Unknown", "value_before"]


@dataclass(frozen=True, slots=True)
class Immediate:
    """A 32-bit constant written into the register by the code."""

    value: int
    at: int
    """Offset of the instruction that set it."""


@dataclass(frozen=True, slots=True)
class BankWord:
    """The 32-bit word at `offset` of constant bank `bank`, loaded into the register."""

    bank: int
    offset: int
    at: int
    """Offset of the load."""


@dataclass(frozen=True, slots=True)
class SymbolWord:
    """Half of a symbol's address, written by a relocated immediate (``32@lo($str)``)."""

    symbol: str
    high: bool
    """True for the upper 32 bits (``32@hi``)."""
    at: int


@dataclass(frozen=True, slots=True)
class Unknown:
    """The code does not say what the register holds."""

    reason: str


RegisterValue = Immediate | BankWord | SymbolWord | Unknown

_REGISTER = re.compile(r"^(?P<name>U?R)(?P<number>\d{1,3}|Z)$")
_IMMEDIATE = re.compile(r"^(?P<sign>-?)(?:0x(?P<hex>[0-9a-fA-F]{1,8})|(?P<dec>\d{1,10}))$")
_CONSTANT = re.compile(r"^c\[0x(?P<bank>[0-9a-f]{1,2})\]\[(?P<inner>[^\[\]]+)\]$")
_SYMBOL_HALF = re.compile(r"^32@(?P<half>lo|hi)\((?P<symbol>[^()\s]+)\)$")
_PREDICATE = re.compile(r"^!?U?P(?:\d|T)$")
# How a value moves between registers: `MOV d, s`, and the IMAD forms ptxas prefers on
# Hopper, which take the value from their last operand (d = 0 * 0 + s).
_MOVES = frozenset({"MOV", "UMOV", "MOV32I", "IMAD.MOV.U32", "IMAD.MOV", "IMAD.U32"})
_WIDE = frozenset({"64", "WIDE", "U64", "S64", "F64"})
_MAX_BLOCKS = 64
"""Blocks walked back per question: past this the value is said to be unknown."""


def value_before(
    cfg: ControlFlowGraph, offset: int, register: str, *, _depth: int = 0
) -> RegisterValue:
    """What `register` (``R4``, ``UR6``) holds when the instruction at `offset` runs.

    Args:
        cfg: The function's control-flow graph.
        offset: An instruction of the function.
        register: A general or uniform register.

    Returns:
        The immediate or constant-bank word every path sets it to, or `Unknown` saying why not.
    """
    if register in ("RZ", "URZ"):
        return Immediate(0, offset)
    block = cfg.block_of(offset)
    if block is None:
        return Unknown(f"no instruction at /*{offset:04x}*/")
    position = next(n for n, i in enumerate(block.instructions) if i.offset == offset)
    return _search(cfg, block.index, position, register, {}, _depth)


def _search(
    cfg: ControlFlowGraph,
    block: int,
    position: int,
    register: str,
    memo: dict[int, RegisterValue | None],
    depth: int,
) -> RegisterValue:
    for instruction in reversed(cfg.blocks[block].instructions[:position]):
        if register in _writes(instruction):
            return _defined(cfg, instruction, register, depth)
    predecessors = cfg.predecessors(block)
    if not predecessors:
        return Unknown(f"{register} is not set in this function before the call")
    found: list[RegisterValue] = []
    for previous in predecessors:
        if previous not in memo:
            if len(memo) >= _MAX_BLOCKS:
                return Unknown(f"{register} is set too far back to follow")
            memo[previous] = None  # in progress: a path round a loop adds nothing new
            end = len(cfg.blocks[previous].instructions)
            memo[previous] = _search(cfg, previous, end, register, memo, depth)
        if (value := memo[previous]) is not None:
            found.append(value)
    if not found:
        return Unknown(f"{register} changes round a loop")
    first = found[0]
    if isinstance(first, Unknown):
        return first
    if any(_differs(first, other) for other in found[1:]):
        return Unknown(f"{register} is set to different values on the paths that lead here")
    return first


def _differs(a: RegisterValue, b: RegisterValue) -> bool:
    # The same constant set at two places is one value; the offsets say only where.
    if isinstance(a, Immediate) and isinstance(b, Immediate):
        return a.value != b.value
    if isinstance(a, BankWord) and isinstance(b, BankWord):
        return (a.bank, a.offset) != (b.bank, b.offset)
    if isinstance(a, SymbolWord) and isinstance(b, SymbolWord):
        return (a.symbol, a.high) != (b.symbol, b.high)
    return True


def _defined(
    cfg: ControlFlowGraph, instruction: SassInstruction, register: str, depth: int
) -> RegisterValue:
    at = instruction.offset
    if not is_unconditional(instruction):
        return Unknown(f"{register} is set under a guard ({instruction.text} at /*{at:04x}*/)")
    opcode, operands = instruction.opcode, instruction.operands
    base = instruction.base_opcode
    is_move = opcode in _MOVES and operands and operands[0] == register
    if is_move and (base != "IMAD" or operands[1:3] == ("RZ", "RZ")):
        return _operand(cfg, instruction, operands[-1], depth)
    if base == "HFMA2" and len(operands) == 5 and operands[1:3] == ("-RZ", "RZ"):
        return _half_pair(operands[3], operands[4], at)
    if base == "CS2R" and operands[-1:] == ("SRZ",):
        return Immediate(0, at)
    if base in ("LDC", "ULDC") and len(operands) == 2:
        return _bank_word(cfg, instruction, register, depth)
    return Unknown(f"{register} is computed ({instruction.text} at /*{at:04x}*/)")


def _operand(
    cfg: ControlFlowGraph, instruction: SassInstruction, operand: str, depth: int
) -> RegisterValue:
    at = instruction.offset
    if (number := _immediate(operand)) is not None:
        return Immediate(number & 0xFFFFFFFF, at)
    if _REGISTER.match(operand):
        if depth > 8:
            return Unknown(f"{operand} is copied too many times to follow")
        return value_before(cfg, at, operand, _depth=depth + 1)
    constant = _CONSTANT.match(operand)
    if constant and (inner := _immediate(constant["inner"])) is not None:
        return BankWord(int(constant["bank"], 16), inner, at)
    if half := _SYMBOL_HALF.match(operand):
        return SymbolWord(half["symbol"], half["half"] == "hi", at)
    return Unknown(f"{instruction.text} at /*{at:04x}*/ moves a value this reader cannot follow")


def _bank_word(
    cfg: ControlFlowGraph, instruction: SassInstruction, register: str, depth: int
) -> RegisterValue:
    """``LDC.64 R2, c[0x4][R0]`` with R0 known, or ``ULDC.64 UR4, c[0x4][0x10]``: the word of
    the bank this register receives (the second of a pair gets the next word)."""
    at = instruction.offset
    destination, source = instruction.operands
    constant = _CONSTANT.match(source)
    first = _REGISTER.match(destination)
    if constant is None or first is None or first["number"] == "Z":
        return Unknown(f"{register} is loaded from {source} at /*{at:04x}*/")
    index = _register_number(register) - int(first["number"])
    offset = 0
    for term in constant["inner"].split("+"):
        if (number := _immediate(term)) is not None:
            offset += number
            continue
        held = value_before(cfg, at, term, _depth=depth + 1) if _REGISTER.match(term) else None
        if not isinstance(held, Immediate):
            return Unknown(f"{register} is loaded from {source} at /*{at:04x}*/ ({term} unknown)")
        offset += held.value
    return BankWord(int(constant["bank"], 16), offset + 4 * index, at)


def _half_pair(high: str, low: str, at: int) -> RegisterValue:
    # HFMA2 d, -RZ, RZ, a, b computes (-0 * 0 + a, -0 * 0 + b): the two halves of d.
    try:
        bits = [struct.unpack("<H", struct.pack("<e", float(h)))[0] for h in (high, low)]
    except (ValueError, OverflowError, struct.error):
        return Unknown(f"a half-precision pair ({high}, {low}) at /*{at:04x}*/ is not readable")
    return Immediate(bits[0] << 16 | bits[1], at)


def _writes(instruction: SassInstruction) -> frozenset[str]:
    """The registers an instruction may write: its leading register operand (after a
    predicate destination, as in ``SHFL.IDX PT, R3, …``), with the next ones for a 64- or
    128-bit result. Erring on the side of more keeps a value from being claimed wrongly."""
    operands = instruction.operands
    if not operands:
        return frozenset()
    first = operands[0]
    if _PREDICATE.match(first) and len(operands) > 1:
        first = operands[1]
    match = _REGISTER.match(first.split(".")[0])
    if match is None or match["number"] == "Z":
        return frozenset()
    count = _width(instruction)
    number = int(match["number"])
    return frozenset(f"{match['name']}{number + n}" for n in range(count))


def _width(instruction: SassInstruction) -> int:
    modifiers = set(instruction.modifiers)
    base = instruction.base_opcode
    if "MMA" in base or base in ("LDSM", "LDTM"):
        return 8
    if "128" in modifiers:
        return 4
    if modifiers & _WIDE or base in ("LEPC", "CS2R", "DADD", "DMUL", "DFMA", "DSETP"):
        return 2
    return 1


def _register_number(register: str) -> int:
    match = _REGISTER.match(register)
    return int(match["number"]) if match and match["number"] != "Z" else -1


def _immediate(text: str) -> int | None:
    match = _IMMEDIATE.match(text.strip())
    if match is None:
        return None
    value = int(match["hex"], 16) if match["hex"] else int(match["dec"])
    return -value if match["sign"] else value
