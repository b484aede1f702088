"""Decode what a SASS memory instruction touches: space, kind, width and address operand.

The forms below are what nvdisasm 13.5 prints (fixtures/transcripts/nvdisasm/13.5/
forensics/operands.sm_*.txt, from fixtures/cu/forensics/operands.cu)::

    sm_80   STG.E.128 [R4.64], R8            STS.128 [R3.X16+0x680], R4
            ATOMS.POPC.INC.32 RZ, [R8+URZ+0x600]          LDS R11, [0x1c]
    sm_90   STG.E desc[UR4][R2.64+0x4000], R5             LDS R5, [R4+UR4]
            LDS R9, [UR8+0x1c]      UBLKCP.S.G [UR8], [UR4], UR6     UTMALDG.2D [UR8], [UR4]
    sm_100  as sm_90, and LDCU.64 UR6, c[0x0][0x380] (uniform constant loads)
    all     LDC.64 R4, c[0x3][R4+0x400]   STL [R1+0x10], R2   ATOMG.E.CAS... PT, R0, [R4+0x80], ...

In ``desc[UR4][R2.64]`` UR4 is a memory descriptor (cache policy, not an addend). ``.E``
means 64-bit ("extended") addressing, never a width: the base of a ``.E`` global or generic
access is a register pair even when nvdisasm omits ``.64``, as it does for ``ATOMG.E.CAS``
(the same kernel's ``ATOMG.E.EXCH`` prints ``[R4.64+0x100]`` for the same pointer) and as
Volta listings do (``STG.E.SYS [R2]``). `decode_access` never raises.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from postmortem.cubin.sass import SassInstruction

__all__ = [
    "AddressOperand",
    "AddressPlan",
    "AddressResult",
    "MemoryAccess",
    "address_formula",
    "address_plan",
    "decode_access",
    "effective_address",
    "registers_read",
]


@dataclass(frozen=True, slots=True)
class AddressOperand:
    """The address operand of a memory instruction, as printed, split into its terms."""

    base: str | None
    """The general register added (``R2``); None when absent or ``RZ``."""
    base_is_64bit: bool
    """True when `base` is the low half of a pair (``R2.64`` or a ``.E`` access: R3:R2)."""
    base_scale: int
    """The factor applied to `base`: 4 for ``R3.X4`` (sm_80 shared indexing), else 1."""
    uniform_base: str | None
    """The uniform register added (``UR4`` in ``[R2+UR4]`` or ``[UR4+0x8]``); None when absent
    or ``URZ``. Never the descriptor of a ``desc[UR4][…]`` operand."""
    uniform_is_64bit: bool
    """True when `uniform_base` is the low half of a pair (64-bit global/generic addressing)."""
    descriptor: str | None
    """The memory descriptor of ``desc[UR4][R2.64]`` (``UR4``): not part of the address."""
    offset: int
    """The immediate added, in bytes; may be negative."""
    constant_bank: tuple[int, int] | None
    """``(bank, immediate offset)`` of a ``c[0x0][0x210]`` operand; None for other spaces."""
    raw: str
    """The operand as printed."""


@dataclass(frozen=True, slots=True)
class MemoryAccess:
    """What one memory instruction accesses, from its opcode and operands alone."""

    space: str
    """``global``, ``shared``, ``local``, ``constant``, ``generic``, ``bulk`` (TMA and bulk
    copies) or ``tensor-memory``."""
    kind: str
    """``load``, ``store``, ``atomic``, ``reduction``, ``bulk-copy``, ``prefetch`` or
    ``barrier`` (an mbarrier's word)."""
    width_bytes: int | None
    """Bytes accessed per thread at the address (``.128`` → 16, ``.U8`` → 1, default 4);
    a row of 16 bytes per lane for ``LDSM``/``STSM``; None for bulk and tensor copies."""
    address: AddressOperand | None
    """The address operand: the global side of an ``LDGSTS`` or ``UBLK*`` copy; None for
    ``UTMA*`` (their operands are a tensor map and a shared destination) or when unreadable."""
    data_registers: tuple[str, ...]
    """Registers of the other operands, as printed: the destination of a load, the stored
    value of a store, the operands of an atomic (``R4`` for ``STG.E.128 [..], R4``, which
    stores R4..R7). Predicates and immediates are left out."""
    raw: str
    """The instruction text."""


@dataclass(frozen=True, slots=True)
class AddressResult:
    """An effective address computed from register values, or why it could not be."""

    address: int | None
    """The address (64-bit for global/generic, a 32-bit window offset for shared/local, the
    byte offset in the bank for constants); None when a register was unavailable."""
    missing: tuple[str, ...]
    """Registers whose values were unavailable."""
    formula: str
    """How it is computed, e.g. ``R3:R2 + 0x1c``."""
    registers: tuple[tuple[str, int], ...] = ()
    """The register values it was computed from, in formula order (zero registers left out)."""


# opcode → (space, kind). RED and ATOM are generic-addressed; REDG, ATOMG are global
# (NVIDIA's instruction set reference). UTMA*/UBLK* are Hopper's TMA and bulk copies.
_OPCODES: dict[str, tuple[str, str]] = {
    "LDG": ("global", "load"), "STG": ("global", "store"), "LD": ("generic", "load"),
    "ST": ("generic", "store"), "LDS": ("shared", "load"), "STS": ("shared", "store"),
    "LDL": ("local", "load"), "STL": ("local", "store"), "LDC": ("constant", "load"),
    "ULDC": ("constant", "load"), "LDCU": ("constant", "load"), "ATOM": ("generic", "atomic"),
    "ATOMG": ("global", "atomic"), "ATOMS": ("shared", "atomic"), "RED": ("generic", "reduction"),
    "REDG": ("global", "reduction"), "REDAS": ("shared", "reduction"),
    "LDGSTS": ("global", "load"), "LDSM": ("shared", "load"), "STSM": ("shared", "store"),
    "UTMALDG": ("bulk", "bulk-copy"), "UTMASTG": ("bulk", "bulk-copy"),
    "UTMAREDG": ("bulk", "reduction"), "UTMAPF": ("bulk", "prefetch"),
    "UBLKCP": ("bulk", "bulk-copy"), "UBLKRED": ("bulk", "reduction"),
    # An mbarrier's 64-bit word in shared memory: arrivals, phase checks (`SYNCS.*`).
    "SYNCS": ("shared", "barrier"),
    "UBLKPF": ("bulk", "prefetch"), "LDTM": ("tensor-memory", "load"),
    "STTM": ("tensor-memory", "store"),
}  # fmt: skip

_WIDTHS: dict[str, int] = {
    "U8": 1, "S8": 1, "8": 1, "U16": 2, "S16": 2, "F16": 2, "BF16": 2, "16": 2, "32": 4,
    "U32": 4, "S32": 4, "F32": 4, "F16X2": 4, "BF16X2": 4, "64": 8, "U64": 8, "S64": 8,
    "F64": 8, "128": 16, "256": 32,
}  # fmt: skip
_MATRIX_ROW_BYTES = 16  # ldmatrix/stmatrix: each lane addresses one row of 8 × b16
_SIXTY_FOUR = (1 << 64) - 1
_THIRTY_TWO = (1 << 32) - 1

_REGISTER = re.compile(r"^(?P<name>U?R(?:\d{1,3}|Z))(?P<suffixes>(?:\.[A-Za-z0-9]+)*)$")
_IMMEDIATE = re.compile(r"^(?P<sign>-?)(?:0x(?P<hex>[0-9a-fA-F]{1,16})|(?P<dec>\d{1,20}))$")
_MEMORY = re.compile(r"^(?:desc\[(?P<desc>[^\[\]]*)\])?\[(?P<inner>[^\[\]]*)\]$")
_CONSTANT = re.compile(r"^c\[(?P<bank>[^\[\]]*)\]\[(?P<inner>[^\[\]]*)\]$")
_TERM = re.compile(r"([+-]?)([^+-]+)")
_PREDICATE = re.compile(r"^!?U?P(?:\d|T)$")


def decode_access(instruction: SassInstruction) -> MemoryAccess | None:
    """Decodes the memory space, kind, width and address operand of an instruction.

    Args:
        instruction: One parsed SASS instruction.

    Returns:
        The access, or None for an instruction that is not a load, store, atomic, reduction
        or bulk copy this module knows (surface, texture and cache-control ones included).
        An address operand that cannot be read gives ``address=None``, never an exception.
    """
    base_opcode = instruction.base_opcode
    if base_opcode not in _OPCODES:
        return None
    space, kind = _OPCODES[base_opcode]
    modifiers = tuple(m.upper() for m in instruction.modifiers)
    wide = "E" in modifiers and space in ("global", "generic")
    index = _address_index(base_opcode, modifiers, instruction.operands)
    address = None
    if index is not None and base_opcode not in ("UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF"):
        # The global side of a bulk copy is a 64-bit address held in a uniform pair.
        address = _parse_address(instruction.operands[index], wide or space == "bulk")
    data = tuple(
        operand
        for position, operand in enumerate(instruction.operands)
        if position != index and "[" not in operand and _is_data_register(operand)
    )
    return MemoryAccess(
        space=space,
        kind=kind,
        width_bytes=_width(base_opcode, space, modifiers),
        address=address,
        data_registers=data,
        raw=instruction.text,
    )


def _address_index(
    base_opcode: str, modifiers: tuple[str, ...], operands: tuple[str, ...]
) -> int | None:
    """Which operand holds the address that can fault."""
    memory = [i for i, operand in enumerate(operands) if "[" in operand]
    if not memory:
        return None
    if base_opcode == "LDGSTS":
        return memory[-1]  # [shared destination], [global source]
    if base_opcode in ("UBLKCP", "UBLKRED") and len(memory) >= 2 and modifiers[:1] == ("S",):
        return memory[1]  # UBLKCP.S.G [shared], [global]; .G.S copies to the first
    return memory[0]


def _width(base_opcode: str, space: str, modifiers: tuple[str, ...]) -> int | None:
    if space in ("bulk", "tensor-memory"):
        return None
    if base_opcode in ("LDSM", "STSM"):
        return _MATRIX_ROW_BYTES  # their ".16" is the element size, not the access
    if base_opcode == "SYNCS":
        return 8  # the mbarrier word
    for modifier in modifiers:
        if modifier in _WIDTHS:
            return _WIDTHS[modifier]
    return 4


def _is_data_register(operand: str) -> bool:
    return _REGISTER.match(operand) is not None and _PREDICATE.match(operand) is None


def _parse_address(operand: str, wide: bool) -> AddressOperand | None:
    """Splits ``desc[UR4][R2.64+0x4]``, ``[R2+UR4+0x10]``, ``c[0x3][R4+0x400]`` into terms."""
    text = "".join(operand.split())
    bank: int | None = None
    descriptor: str | None = None
    match = _CONSTANT.match(text)
    if match:
        bank = _immediate(match.group("bank"))
        if bank is None:
            return None
    else:
        match = _MEMORY.match(text)
        if match is None:
            return None
        descriptor = match.group("desc")
        if descriptor is not None and _REGISTER.match(descriptor) is None:
            return None
    terms = _Terms.parse(match.group("inner"), wide)
    if terms is None:
        return None
    return AddressOperand(
        base=terms.base,
        base_is_64bit=terms.base_is_64bit,
        base_scale=terms.base_scale,
        uniform_base=terms.uniform,
        uniform_is_64bit=terms.uniform_is_64bit,
        descriptor=descriptor,
        offset=terms.offset,
        constant_bank=None if bank is None else (bank, terms.offset),
        raw=operand,
    )


class _Terms:
    """The terms between the brackets: at most one register, one uniform register, and
    immediates (summed)."""

    def __init__(self) -> None:
        self.base: str | None = None
        self.base_is_64bit = False
        self.base_scale = 1
        self.uniform: str | None = None
        self.uniform_is_64bit = False
        self.offset = 0
        self.registers = 0

    @classmethod
    def parse(cls, inner: str, wide: bool) -> _Terms | None:
        terms = cls()
        # nvdisasm writes a negative immediate as "+-0x10"; a leading "-" alone also occurs.
        text = inner.replace("+-", "-")
        if not text or _TERM.sub("", text):
            return None
        for sign, term in _TERM.findall(text):
            if not terms.add(sign, term, wide):
                return None
        return terms

    def add(self, sign: str, term: str, wide: bool) -> bool:
        value = _immediate(("-" if sign == "-" else "") + term)
        if value is not None:
            self.offset += value
            return True
        match = _REGISTER.match(term)
        if match is None or sign == "-":
            return False
        name, suffixes = match.group("name"), match.group("suffixes").split(".")[1:]
        if name.startswith("U"):
            if self.uniform is not None:
                return False
            self.uniform = None if name == "URZ" else name
            self.uniform_is_64bit = wide or "64" in suffixes
            return True
        if self.registers:
            return False
        self.registers += 1
        self.base = None if name == "RZ" else name
        self.base_is_64bit = "64" in suffixes or (wide and "U32" not in suffixes)
        self.base_scale = next((int(s[1:]) for s in suffixes if s in ("X4", "X8", "X16")), 1)
        return True


def _immediate(text: str) -> int | None:
    match = _IMMEDIATE.match(text.strip())
    if match is None:
        return None
    digits = match.group("hex")
    value = int(digits, 16) if digits is not None else int(match.group("dec"))
    return -value if match.group("sign") else value


Registers = Sequence[int] | None
"""R0..Rn (or UR0..URn) of one lane or warp, as the dump holds them; None when it holds none."""


@dataclass(frozen=True, slots=True)
class _Term:
    """One register term of an address: a register, or a pair (low, high), times a scale.
    Each register is (name, number, shift): its number indexes the lane's registers (None for
    one that reads zero, R255), its shift places it in the value (32 for a pair's high half)."""

    registers: tuple[tuple[str, int | None, int], ...]
    uniform: bool
    scale: int


@dataclass(frozen=True, slots=True)
class AddressPlan:
    """How an access's address is formed, worked out once for every lane that runs it (a
    grid-wide fault computes 270,000 addresses from one operand)."""

    terms: tuple[_Term, ...]
    offset: int
    mask: int
    formula: str

    def evaluate(self, registers: Registers, uniforms: Registers) -> AddressResult:
        """The address one lane accessed, from its registers (R0 first, uint32 each; None
        when the dump does not hold them) and its warp's uniform registers."""
        total = self.offset
        read: list[tuple[str, int]] = []
        missing: list[str] = []
        for term in self.terms:
            values = uniforms if term.uniform else registers
            value = 0
            for name, number, shift in term.registers:
                if number is None:
                    continue
                if values is None or not 0 <= number < len(values):
                    missing.append(name)
                    continue
                read.append((name, values[number]))
                value |= (values[number] & _THIRTY_TWO) << shift
            total += value * term.scale
        if missing:
            return AddressResult(None, tuple(missing), self.formula, tuple(read))
        return AddressResult(total & self.mask, (), self.formula, tuple(read))


# R255 and UR63 read as zero: nvdisasm prints them RZ/URZ, but a decoded number can name them.
_ZERO_REGISTERS = frozenset({"R255", "UR63"})


def address_plan(access: MemoryAccess) -> AddressPlan | None:
    """How `access` forms its address; None when it has no address operand."""
    return None if access.address is None else _plan(access.address)


@lru_cache(maxsize=256)
def _plan(operand: AddressOperand) -> AddressPlan:
    terms: list[_Term] = []
    labels: list[str] = []
    for name, pair, scale, uniform in (
        (operand.base, operand.base_is_64bit, operand.base_scale, False),
        (operand.uniform_base, operand.uniform_is_64bit, 1, True),
    ):
        if name is None:
            continue
        names = (name, _next_register(name)) if pair else (name,)
        label = ":".join(reversed(names))
        labels.append(label if scale == 1 else f"{label}*{scale}")
        registers = tuple((n, _number(n), shift) for n, shift in zip(names, (0, 32), strict=False))
        terms.append(_Term(registers, uniform, scale))
    wide = operand.base_is_64bit or operand.uniform_is_64bit
    mask = _SIXTY_FOUR if wide else _THIRTY_TWO
    return AddressPlan(tuple(terms), operand.offset, mask, _formula(labels, operand))


def _number(name: str) -> int | None:
    if name in _ZERO_REGISTERS:
        return None
    digits = name[2:] if name.startswith("UR") else name[1:]
    return int(digits) if digits.isdigit() else -1  # -1: a name no register has


def registers_read(access: MemoryAccess) -> tuple[int, int]:
    """How many of a lane's general registers (R0 on) and of its warp's uniform registers the
    address reads at most: a caller need not read the rest."""
    plan = address_plan(access)
    counts = [0, 0]
    for term in plan.terms if plan else ():
        for _, number, _ in term.registers:
            if number is not None:
                counts[term.uniform] = max(counts[term.uniform], number + 1)
    return counts[0], counts[1]


def effective_address(
    access: MemoryAccess, registers: Registers, uniforms: Registers
) -> AddressResult:
    """Computes the address one lane accessed, from that lane's register values.

    Args:
        access: The decoded instruction.
        registers: The lane's general registers, R0 first (uint32 each), or None when the
            dump does not hold them.
        uniforms: Its warp's uniform registers, UR0 first, or None.

    Returns:
        The address, or None with the unavailable registers listed; the formula and the
        values read either way. An access without an address operand gives None, no missing
        registers and a formula that says so. For many lanes, `address_plan` once and its
        `evaluate` per lane.
    """
    plan = address_plan(access)
    if plan is None:
        return AddressResult(None, (), "no address operand")
    return plan.evaluate(registers, uniforms)


def address_formula(access: MemoryAccess) -> str:
    """How the address is formed, without register values: ``R3:R2 + UR4 + 0x1c``."""
    return effective_address(access, (), ()).formula


def _formula(labels: list[str], operand: AddressOperand) -> str:
    """``R3:R2 + 0x1c``, ``R1 - 0x8``, ``0x100``, ``c[0x3][R4 + 0x400]``."""
    text = " + ".join(labels)
    if not labels:
        text = f"{operand.offset:#x}"
    elif operand.offset:
        text += f" {'-' if operand.offset < 0 else '+'} {abs(operand.offset):#x}"
    if operand.constant_bank is not None:
        text = f"c[{operand.constant_bank[0]:#x}][{text}]"
    return text


def _next_register(name: str) -> str:
    prefix = "UR" if name.startswith("UR") else "R"
    return f"{prefix}{int(name[len(prefix) :]) + 1}"
