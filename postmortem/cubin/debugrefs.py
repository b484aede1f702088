"""What the DWARF sections of a cubin point at: code addresses (through their relocations)
and names (in `.debug_str`), read the same way by the line table (`lines.py`) and the
inlined calls (`dwarfinfo.py`)."""

from __future__ import annotations

import struct

from postmortem.cubin.elfimage import ElfImage, ElfSection, ElfSymbol
from postmortem.errors import MalformedElf

_SHF_EXECINSTR = 0x4
_R_CUDA_64 = 2  # the relocation type ptxas uses for code addresses in debug sections
_RELA = struct.Struct("<QQq")


def code_sections(image: ElfImage) -> list[ElfSection]:
    """The executable sections of the image."""
    return [s for s in image.sections if s.flags & _SHF_EXECINSTR]


def code_relocations(image: ElfImage, name: str) -> dict[int, tuple[int, int]]:
    """The code addresses the relocation section `name` (e.g. ``.rela.debug_line``) sets:
    offset in the relocated section → (code section, offset in it).

    ptxas leaves the addresses out of (or stale in) the debug section's bytes and writes them
    into these relocations: a symbol of the code section plus an addend. In a relocated image
    from a dump the symbols hold load addresses, which the section's `sh_addr` takes back off.
    """
    sections = {s.index: s for s in image.sections}
    found = {}
    for r_offset, symbol, r_addend in symbol_relocations(image, name):
        section = sections.get(symbol.shndx)
        if section is None or not section.flags & _SHF_EXECINSTR:
            continue
        value = symbol.value
        if section.addr and value >= section.addr:
            value -= section.addr
        found[r_offset] = (section.index, value + r_addend)
    return found


def symbol_relocations(image: ElfImage, name: str) -> list[tuple[int, ElfSymbol, int]]:
    """The R_CUDA_64 relocations of section `name` (``.rela.debug_line``,
    ``.rela.nv.constant4``) as (offset in the relocated section, symbol, addend); none when
    the image has no such section.

    Raises:
        MalformedElf: The section runs past the end of the image.
    """
    data = image.section_data(name) if image.find_section(name) else None
    if not data:
        return []
    symbols = {s.index: s for s in image.symbols()}
    found = []
    for r_offset, r_info, r_addend in _RELA.iter_unpack(
        data[: len(data) // _RELA.size * _RELA.size]
    ):
        symbol = symbols.get(r_info >> 32)
        if symbol is not None and r_info & 0xFFFFFFFF == _R_CUDA_64:
            found.append((r_offset, symbol, r_addend))
    return found


def string_at(table: bytes, offset: int) -> str:
    """The NUL-terminated name at `offset` of a string section; bytes that are not UTF-8 are
    shown replaced.

    Raises:
        MalformedElf: `offset` is outside the table.
    """
    if not 0 <= offset < len(table):
        raise MalformedElf(".debug_str", f"a name at offset {offset} is outside the table")
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")
