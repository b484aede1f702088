"""Normalized copies of a relocated image, for an nvdisasm that refuses the image as dumped.

Relocated images follow one of two conventions (docs/coredump-format.md, "Relocated
images"): only the code sections carry load addresses, or every ``SHF_ALLOC`` section
does, data sections (``.nv.constant0.*``, ``.nv.global.init``, ``.nv.shared.*``)
included, with the symbols in them absolute. nvdisasm 13.5 refuses the second ("Data block
for section .nv.constant0... exceeds section size"). The copies made here, each a
fresh ``bytes`` (the dump is never touched), are what `postmortem.analysis.fault.fault` tries in
turn:

1. `clear_data_addresses`: the data sections' addresses back to 0 and their symbols
   section-relative again: the code-only convention, which nvdisasm reads.
2. `rebase_to_zero`: every address 0, every symbol section-relative, and the debug
   relocations (``.rela.debug_line`` …, R_CUDA_64/R_CUDA_32: S + A) applied again with
   those values, so that the line table still matches the code. nvdisasm then prints
   section offsets, which are function-relative (a lane row's ``physPC``).

Section headers and symbols are read with `postmortem.cubin.elfimage.ElfImage`, which
raises only `MalformedElf`; so do these functions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from functools import lru_cache

from postmortem.cubin.elfimage import ElfImage, ElfSection, ElfSymbol
from postmortem.errors import MalformedElf

__all__ = [
    "DATA_CLEARED",
    "NON_RELOCATED",
    "REBASED",
    "RELOCATED",
    "clear_data_addresses",
    "rebase_to_zero",
]

RELOCATED = "relocated image"
"""The module's relocated image (`.cudbg.relfimg`) as the dump holds it."""
DATA_CLEARED = "relocated image, data-section addresses cleared"
"""`clear_data_addresses` of it."""
REBASED = "relocated image rebased to 0"
"""`rebase_to_zero` of it."""
NON_RELOCATED = "non-relocated image"
"""The module's non-relocated image (`.cudbg.elfimg`), when the dump holds one."""

SHF_ALLOC = 0x2
SHF_EXECINSTR = 0x4
_SHT_RELA = 4
_SHT_NOBITS = 8
_SPECIAL_SHNDX = 0xFF00  # SHN_LORESERVE: ABS, COMMON and XINDEX sit at and above it
_R_CUDA_32 = 1
_R_CUDA_64 = 2
_ADDR = struct.Struct("<Q")  # sh_addr, at byte 16 of a section header
_ADDR_AT = 16
_VALUE = struct.Struct("<Q")  # st_value, at byte 8 of a symbol
_VALUE_AT = 8
_RELA = struct.Struct("<QQq")
_MASK64 = (1 << 64) - 1


def clear_data_addresses(image: bytes) -> bytes | None:
    """A copy whose data sections (SHF_ALLOC, not SHF_EXECINSTR) have address 0 again.

    The symbols defined in those sections become section-relative again; code sections and
    their symbols keep their load addresses.

    Returns:
        The copy, or None when no data section carries an address (nothing to clear).

    Raises:
        MalformedElf: The image's headers or symbol table run out of bounds.
    """
    elf = ElfImage(image)
    cleared = {
        s.index: s
        for s in elf.sections
        if s.addr and s.flags & SHF_ALLOC and not s.flags & SHF_EXECINSTR
    }
    if not cleared:
        return None
    out = bytearray(image)
    _zero_addresses(out, cleared.values())
    _section_relative(out, elf.symbols(), cleared)
    return bytes(out)


def rebase_to_zero(image: bytes) -> bytes | None:
    """A copy with every section at address 0 and every symbol section-relative.

    The relocations of the sections that are not loaded (the debug sections) are applied
    again with the new symbol values, so the line table keeps pointing at the code. The
    last few images up to `REMEMBERED_BYTES` are remembered by content: a scan's dumps of
    one build rebase the same image for its build key and its code key.

    Returns:
        The copy, or None when no section carries an address.

    Raises:
        MalformedElf: The image's headers or symbol table run out of bounds.
    """
    if len(image) > REMEMBERED_BYTES or not isinstance(image, bytes):
        return _rebase(image)
    return _rebase_remembered(image)


REMEMBERED_BYTES = 8 << 20
"""The largest image `rebase_to_zero` remembers (it keeps at most 8, and their copies)."""


@lru_cache(maxsize=8)
def _rebase_remembered(image: bytes) -> bytes | None:
    return _rebase(image)


def _rebase(image: bytes) -> bytes | None:
    elf = ElfImage(image)
    placed = {s.index: s for s in elf.sections if s.addr}
    if not placed:
        return None
    out = bytearray(image)
    _zero_addresses(out, placed.values())
    values = _section_relative(out, elf.symbols(), placed)
    for rela in elf.sections:
        if rela.type == _SHT_RELA and 0 < rela.info < len(elf.sections):
            _apply(out, rela, elf.sections[rela.info], values)
    return bytes(out)


def _zero_addresses(out: bytearray, sections: Iterable[ElfSection]) -> None:
    for section in sections:
        _ADDR.pack_into(out, section.header_offset + _ADDR_AT, 0)


def _section_relative(
    out: bytearray, symbols: Iterable[ElfSymbol], moved: dict[int, ElfSection]
) -> list[int]:
    """Subtract its section's old address from each symbol of a moved section, in `out`;
    return every symbol's value afterwards (by symbol index)."""
    values = []
    for symbol in symbols:
        value = symbol.value
        section = moved.get(symbol.shndx) if 0 < symbol.shndx < _SPECIAL_SHNDX else None
        if section is not None and value >= section.addr:
            value -= section.addr
            _VALUE.pack_into(out, symbol.entry_offset + _VALUE_AT, value)
        values.append(value)
    return values


def _apply(out: bytearray, rela: ElfSection, target: ElfSection, values: list[int]) -> None:
    """Apply S + A relocations aimed at a section that is not loaded (a debug section)."""
    if target.flags & SHF_ALLOC or target.type == _SHT_NOBITS:
        return  # code relocations are the loader's business, not recorded in an image
    step = max(rela.entsize, _RELA.size)
    if rela.offset + rela.size_bytes > len(out):
        raise MalformedElf(rela.name, "relocations run past the end of the image")
    for at in range(rela.offset, rela.offset + rela.size_bytes - _RELA.size + 1, step):
        r_offset, r_info, addend = _RELA.unpack_from(out, at)
        kind, symbol = r_info & 0xFFFFFFFF, r_info >> 32
        width = {_R_CUDA_64: 8, _R_CUDA_32: 4}.get(kind)
        if width is None or symbol >= len(values) or r_offset + width > target.size_bytes:
            continue  # a relocation we do not know, or one out of bounds: left as it is
        where = target.offset + r_offset
        if where + width > len(out):
            continue
        value = (values[symbol] + addend) & _MASK64
        struct.pack_into("<Q" if width == 8 else "<I", out, where, value & ((1 << 8 * width) - 1))
