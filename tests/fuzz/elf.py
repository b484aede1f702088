"""Just enough ELF64 to find what to mutate: the header, the section headers, their names.

Independent of the reader under test on purpose. Parsing is forgiving (a mutant of a
mutant still parses as far as it can) and writing goes through `put`, at absolute offsets.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
SHDR = struct.Struct("<IIQQQQIIQQ")
SHDR_SIZE = 64

# Offsets and widths of the ELF header fields the mutators edit.
EHDR_FIELDS = {
    "e_type": (16, 2),
    "e_machine": (18, 2),
    "e_version": (20, 4),
    "e_shoff": (40, 8),
    "e_flags": (48, 4),
    "e_ehsize": (52, 2),
    "e_shentsize": (58, 2),
    "e_shnum": (60, 2),
    "e_shstrndx": (62, 2),
}
# Offsets and widths inside one 64-byte section header.
SHDR_FIELDS = {
    "sh_name": (0, 4),
    "sh_type": (4, 4),
    "sh_flags": (8, 8),
    "sh_addr": (16, 8),
    "sh_offset": (24, 8),
    "sh_size": (32, 8),
    "sh_link": (40, 4),
    "sh_info": (44, 4),
    "sh_addralign": (48, 8),
    "sh_entsize": (56, 8),
}
SHF_EXECINSTR = 4
SHT_SYMTAB = 2
SHT_STRTAB = 3
SHT_NOBITS = 8
SHN_XINDEX = 0xFFFF
MAX_SECTIONS = 1 << 20


@dataclass(frozen=True, slots=True)
class Section:
    """One section header, where it lies, and its name."""

    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int
    header_at: int
    """Absolute offset of this section's header in the buffer."""

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True, slots=True)
class Elf:
    """An ELF64 image inside a buffer, at `base`."""

    base: int
    shoff: int
    count: int
    shstrndx: int
    sections: tuple[Section, ...]

    def of_type(self, *types: int) -> list[Section]:
        return [s for s in self.sections if s.type in types]

    def named(self, prefix: str) -> list[Section]:
        return [s for s in self.sections if s.name.startswith(prefix)]

    def data(self, buffer: bytes | bytearray, section: Section) -> bytes:
        start = self.base + section.offset
        return bytes(buffer[start : start + section.size])


def parse(buffer: bytes | bytearray, base: int = 0, limit: int | None = None) -> Elf | None:
    """The ELF image at `buffer[base:limit]`, or None when it has no readable header."""
    end = len(buffer) if limit is None else min(limit, len(buffer))
    if end - base < EHDR.size or buffer[base : base + 4] != b"\x7fELF":
        return None
    fields = EHDR.unpack_from(buffer, base)
    shoff, shnum, shstrndx = fields[6], fields[12], fields[13]
    if shoff + SHDR_SIZE > end - base:
        return Elf(base, shoff, 0, shstrndx, ())
    first = SHDR.unpack_from(buffer, base + shoff)
    count = shnum or first[5]
    if shstrndx == SHN_XINDEX:
        shstrndx = first[6]
    count = min(count, MAX_SECTIONS, (end - base - shoff) // SHDR_SIZE)
    raw = [SHDR.unpack_from(buffer, base + shoff + i * SHDR_SIZE) for i in range(count)]
    names = _names(buffer, base, end, raw[shstrndx] if shstrndx < count else None)
    sections = tuple(
        Section(i, names(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[9],
                base + shoff + i * SHDR_SIZE)
        for i, r in enumerate(raw)
    )  # fmt: skip
    return Elf(base, shoff, count, shstrndx, sections)


def _names(buffer: bytes | bytearray, base: int, end: int, strtab: tuple[int, ...] | None):
    start = base + strtab[4] if strtab else end
    stop = min(end, start + strtab[5]) if strtab else end

    def name(offset: int) -> str:
        if start + offset >= stop:
            return ""
        nul = buffer.find(b"\0", start + offset, stop)
        return bytes(buffer[start + offset : nul if nul >= 0 else stop]).decode("latin-1")

    return name


def put(buffer: bytearray, at: int, width: int, value: int) -> None:
    """Write `value` (wrapped to `width` bytes, little-endian) at `at`, if it fits."""
    if at >= 0 and at + width <= len(buffer):
        buffer[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")


def get(buffer: bytes | bytearray, at: int, width: int) -> int:
    """The little-endian unsigned integer at `at` (0 past the end)."""
    if at < 0 or at + width > len(buffer):
        return 0
    return int.from_bytes(buffer[at : at + width], "little")


def put_shdr(buffer: bytearray, section: Section, field: str, value: int) -> None:
    """Set one field of `section`'s header."""
    offset, width = SHDR_FIELDS[field]
    put(buffer, section.header_at + offset, width, value)


def put_ehdr(buffer: bytearray, field: str, value: int, base: int = 0) -> None:
    """Set one field of the ELF header at `base`."""
    offset, width = EHDR_FIELDS[field]
    put(buffer, base + offset, width, value)
