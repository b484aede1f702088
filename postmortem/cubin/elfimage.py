"""A cubin's sections, symbols and notes as small objects, for metadata reads and edits.

Read through `postmortem.elf`, the one bounds-checked ELF layer, so a hostile image raises
only `MalformedElf`. Each section and symbol knows the file offset of its header or entry,
which is what `postmortem.cubin.normalize` needs to patch a copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from postmortem.elf import (
    SECTION_HEADER_SIZE,
    SHT_SYMTAB,
    Note,
    Sections,
    iter_notes,
    read_header,
)

__all__ = ["ElfImage", "ElfSection", "ElfSymbol"]


@dataclass(frozen=True, slots=True)
class ElfSection:
    """One section header."""

    name: str
    index: int
    type: int
    offset: int
    size_bytes: int
    link: int
    info: int
    addr: int = 0
    """``sh_addr``: the load address (non-zero in a relocated image)."""
    flags: int = 0
    """``sh_flags`` (SHF_ALLOC = 0x2, SHF_EXECINSTR = 0x4)."""
    addralign: int = 0
    entsize: int = 0
    header_offset: int = 0
    """File offset of this section's header in the image."""


@dataclass(frozen=True, slots=True)
class ElfSymbol:
    """One entry of ``.symtab``."""

    index: int
    name: str
    info: int
    """``st_info``: type in the low 4 bits (STT_FUNC = 2), binding in the high 4."""
    other: int
    shndx: int
    """Index of the section the symbol is defined in (0: undefined; >= 0xff00: special)."""
    value: int
    size_bytes: int
    entry_offset: int
    """File offset of this symbol's entry in the image."""


class ElfImage:
    """The sections, symbols and notes of an ELF image held in memory."""

    def __init__(self, data: bytes) -> None:
        """Reads the ELF header and the section table.

        Raises:
            MalformedElf: Not a 64-bit little-endian ELF image, or its section header table
                runs past the end.
        """
        self._data = data
        self._table = Sections(data, read_header(data))
        table = self._table
        shoff = table.header.shoff
        self.sections = tuple(
            ElfSection(
                table.name(i), i, int(table.type[i]), int(table.offset[i]), int(table.size[i]),
                int(table.link[i]), int(table.info[i]), addr=int(table.addr[i]),
                flags=int(table.flags[i]), addralign=int(table.addralign[i]),
                entsize=int(table.entsize[i]), header_offset=shoff + i * SECTION_HEADER_SIZE,
            )
            for i in range(table.count)
        )  # fmt: skip

    def find_section(self, name: str) -> ElfSection | None:
        """The first section of that name, or None."""
        return next((s for s in self.sections if s.name == name), None)

    def section_data(self, name: str) -> bytes | None:
        """The contents of a section, or None when there is no such section.

        Raises:
            MalformedElf: The section runs past the end of the image.
        """
        section = self.find_section(name)
        if section is None:
            return None
        return self._table.complete_data(section.index, name)

    def symbol_index(self, name: str) -> int | None:
        """The index in ``.symtab`` of the symbol with that name, or None."""
        return next((s.index for s in self.symbols() if s.name == name), None)

    def symbols(self) -> tuple[ElfSymbol, ...]:
        """Every entry of ``.symtab`` the image holds (none without a symbol table)."""
        table = self.find_section(".symtab")
        if table is None or table.type != SHT_SYMTAB:
            return ()
        step = self._table.symbol_stride(table.index)
        return tuple(
            ElfSymbol(
                index, self._table.string_at(table.link, row.name), row.info, row.other,
                row.shndx, row.value, row.size, table.offset + index * step,
            )
            for index, row in enumerate(self._table.symbols(table.index))
        )  # fmt: skip

    def notes(self, name: str) -> Iterator[Note]:
        """The notes of a SHT_NOTE section (none when the section is absent).

        Raises:
            MalformedElf: A note runs past the end of the section.
        """
        yield from iter_notes(self.section_data(name) or b"", name)
