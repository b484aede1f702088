"""A bounds-checked view of a cubin's sections, symbols and notes, for small metadata reads.

pyelftools raises a dozen kinds of exception on a hostile image; this reader raises only
`ElfFormatError`, so `postmortem.cubin.nvinfo` can promise one error class. It reads 64-bit
little-endian images (every cubin since CUDA 3) and copies nothing but what is asked for.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["ElfFormatError", "ElfImage", "ElfNote", "ElfSection"]

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_NOTE = struct.Struct("<III")
_SHT_NOBITS = 8
_MAGIC = b"\x7fELF\x02\x01"  # ELF, 64-bit, little-endian


class ElfFormatError(ValueError):
    """The image is not a 64-bit little-endian ELF file, or a structure runs out of bounds."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        """The structure that is malformed (``ELF header``, a section name)."""
        self.problem = problem
        """What is wrong, with the numbers."""


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


@dataclass(frozen=True, slots=True)
class ElfNote:
    """One note of a SHT_NOTE section."""

    owner: str
    type: int
    desc: bytes


class ElfImage:
    """The section table of an ELF image held in memory."""

    def __init__(self, data: bytes) -> None:
        """Reads the ELF header and the section table.

        Raises:
            ElfFormatError: Not a 64-bit little-endian ELF image, or a truncated one.
        """
        self._data = memoryview(data)
        if len(data) < _HEADER.size or bytes(self._data[:6]) != _MAGIC:
            raise ElfFormatError("ELF header", "not a 64-bit little-endian ELF image")
        header = _HEADER.unpack_from(self._data)
        shoff, shentsize, shnum, shstrndx = header[6], header[11], header[12], header[13]
        if shnum and shentsize < _SECTION.size:
            raise ElfFormatError("ELF header", f"section header size {shentsize} < 64")
        rows = [_SECTION.unpack_from(self._bytes(shoff + i * shentsize, 64, "section table"))
                for i in range(shnum)]  # fmt: skip
        names = self._raw(rows[shstrndx], ".shstrtab") if shstrndx < len(rows) else b""
        self.sections = tuple(
            ElfSection(_string(names, row[0]), i, row[1], row[4], row[5], row[6], row[7])
            for i, row in enumerate(rows)
        )

    def find_section(self, name: str) -> ElfSection | None:
        """The first section of that name, or None."""
        return next((s for s in self.sections if s.name == name), None)

    def section_data(self, name: str) -> bytes | None:
        """The contents of a section, or None when there is no such section."""
        section = self.find_section(name)
        if section is None:
            return None
        if section.type == _SHT_NOBITS:
            return b""
        return bytes(self._bytes(section.offset, section.size_bytes, name))

    def symbol_index(self, name: str) -> int | None:
        """The index in ``.symtab`` of the symbol with that name, or None."""
        table = self.find_section(".symtab")
        if table is None or table.type == _SHT_NOBITS:
            return None
        symbols = self._bytes(table.offset, table.size_bytes, ".symtab")
        strings = b""
        if 0 < table.link < len(self.sections):
            strings = self._raw_section(self.sections[table.link])
        wanted = name.encode("utf-8", "surrogateescape")
        for index in range(len(symbols) // _SYMBOL.size):
            name_offset = _SYMBOL.unpack_from(symbols, index * _SYMBOL.size)[0]
            if _cstring(strings, name_offset) == wanted:
                return index
        return None

    def notes(self, name: str) -> Iterator[ElfNote]:
        """The notes of a SHT_NOTE section (none when the section is absent)."""
        data = self.section_data(name) or b""
        position = 0
        while position + _NOTE.size <= len(data):
            name_size, desc_size, note_type = _NOTE.unpack_from(data, position)
            start = position + _NOTE.size
            desc_start = start + _align4(name_size)
            end = desc_start + desc_size
            if end > len(data):
                raise ElfFormatError(name, f"note at byte {position} runs {end - len(data)} "
                                     "bytes past the section")  # fmt: skip
            owner = _cstring(data, start, name_size).decode("utf-8", "replace")
            yield ElfNote(owner, note_type, bytes(data[desc_start:end]))
            position = desc_start + _align4(desc_size)

    def _raw_section(self, section: ElfSection) -> bytes:
        if section.type == _SHT_NOBITS:
            return b""
        return bytes(self._bytes(section.offset, section.size_bytes, section.name or "section"))

    def _raw(self, row: tuple[int, ...], what: str) -> bytes:
        if row[1] == _SHT_NOBITS:
            return b""
        return bytes(self._bytes(row[4], row[5], what))

    def _bytes(self, offset: int, size: int, what: str) -> memoryview:
        if offset + size > len(self._data):
            raise ElfFormatError(
                what, f"{size} bytes at offset {offset} run past the image's {len(self._data)}"
            )
        return self._data[offset : offset + size]


def _align4(value: int) -> int:
    return (value + 3) & ~3


def _cstring(data: bytes | memoryview, offset: int, limit: int | None = None) -> bytes:
    """The NUL-terminated bytes at `offset` (empty when out of range)."""
    if offset >= len(data):
        return b""
    stop = len(data) if limit is None else min(len(data), offset + limit)
    chunk = bytes(data[offset:stop])
    return chunk.split(b"\0", 1)[0]


def _string(data: bytes, offset: int) -> str:
    return _cstring(data, offset).decode("utf-8", "replace")
