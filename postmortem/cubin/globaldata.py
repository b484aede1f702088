"""The strings a module's code points at: constant bank 4's relocations and `.nv.global.init`.

Code takes the address of a global (an assert's message, a `printf` format) from constant
bank 4, whose words the linker fills through the relocations in `.rela.nv.constant4`: a
symbol plus an addend per 8-byte slot. The bytes of a string literal sit in
`.nv.global.init`, at the symbol's offset in a cubin. A relocated image from a dump tells the
offset in one of three ways, all seen: the section carries its load address (offset = value
minus address), the symbols keep their offsets, or (drivers of the 580 series) each symbol
holds its own absolute address and the section none, so that the image no longer says where
in the section a symbol's bytes are. Then the string is found by its length, the symbol's
size, and only when every string of that length in the section is the same text.
"""

from __future__ import annotations

from dataclasses import dataclass

from postmortem.cubin.debugrefs import symbol_relocations
from postmortem.cubin.elfimage import ElfImage, ElfSection, ElfSymbol
from postmortem.errors import MalformedElf

__all__ = ["FoundString", "ModuleData", "StringMissing"]

_SHT_NOBITS = 8
STRING_LIMIT = 1024
"""Bytes read of one string: an assert's message is a line of source, never more."""


@dataclass(frozen=True, slots=True)
class FoundString:
    """A NUL-terminated string read from the module."""

    text: str
    """Decoded as UTF-8 (undecodable bytes replaced), at most `STRING_LIMIT` bytes."""
    symbol: str
    """The symbol that holds it (``$str$14``)."""
    how: str
    """Where the bytes were read, in words."""
    cut: bool = False
    """True when the string ran past `STRING_LIMIT` and was cut there."""


@dataclass(frozen=True, slots=True)
class StringMissing:
    """Why a string could not be read."""

    reason: str


class ModuleData:
    """Bank-4 slots and data symbols of one cubin image."""

    def __init__(self, image: ElfImage) -> None:
        self._image = image
        self._symbols = image.symbols()
        self._sections = {s.index: s for s in image.sections}
        self._slots: dict[int, dict[int, tuple[ElfSymbol, int]]] = {}

    def slot(self, bank: int, offset: int) -> tuple[ElfSymbol, int] | None:
        """The symbol and addend the 8-byte slot at `offset` of constant bank `bank` is
        relocated to, or None when no relocation sets it."""
        if bank not in self._slots:
            self._slots[bank] = self._read_slots(f".rela.nv.constant{bank}")
        return self._slots[bank].get(offset)

    def _read_slots(self, name: str) -> dict[int, tuple[ElfSymbol, int]]:
        try:
            return {o: (symbol, a) for o, symbol, a in symbol_relocations(self._image, name)}
        except MalformedElf:
            return {}

    def symbol(self, name: str) -> ElfSymbol | None:
        """The defined symbol of that name, or None."""
        return next((s for s in self._symbols if s.name == name and s.shndx), None)

    def address_of(self, symbol: ElfSymbol) -> int | None:
        """The absolute address a data symbol was loaded at, when the image says it."""
        section = self._sections.get(symbol.shndx)
        if section is None or symbol.shndx == 0:
            return None
        if section.addr:
            return symbol.value if symbol.value >= section.addr else section.addr + symbol.value
        return symbol.value if symbol.value >= section.size_bytes else None

    def symbol_at(self, address: int) -> tuple[ElfSymbol, int] | None:
        """The data symbol whose absolute address range holds `address`, and the offset in
        it; None when no symbol of the image holds that address."""
        for symbol in self._symbols:
            section = self._sections.get(symbol.shndx)
            if section is None or symbol.size_bytes <= 0 or section.flags & 0x4:
                continue
            start = symbol.value if symbol.value >= section.size_bytes else None
            if section.addr and symbol.value < section.addr:
                start = section.addr + symbol.value
            if start is not None and start <= address < start + symbol.size_bytes:
                return symbol, address - start
        return None

    def string(self, symbol: ElfSymbol, addend: int) -> FoundString | StringMissing:
        """The NUL-terminated string at `symbol` + `addend` in the image's own bytes."""
        section = self._sections.get(symbol.shndx)
        if section is None or symbol.shndx == 0:
            return StringMissing(f"{symbol.name} is not defined in the module")
        if section.type == _SHT_NOBITS:
            return StringMissing(
                f"{symbol.name} is in {section.name}, which the image stores no bytes of"
            )
        try:
            data = self._image.section_data(section.name) or b""
        except MalformedElf as error:
            return StringMissing(f"{section.name} cannot be read: {error}")
        offset = _offset_in(section, symbol)
        if offset is not None:
            where = f"{section.name} at offset 0x{offset + addend:x}"
            return _read(data, offset + addend, symbol.name, f"the module image's {where}")
        return self._by_length(data, section, symbol, addend)

    def _by_length(
        self, data: bytes, section: ElfSection, symbol: ElfSymbol, addend: int
    ) -> FoundString | StringMissing:
        size = symbol.size_bytes
        if size <= 0:
            return StringMissing(
                f"the image gives neither the offset nor the size of {symbol.name}"
            )
        texts = {piece for piece in _pieces(data) if len(piece) == size}
        if len(texts) != 1:
            count = "no string" if not texts else f"{len(texts)} different strings"
            return StringMissing(
                f"the relocated image keeps no offset for {symbol.name} in {section.name}, "
                f"and {count} there {'is' if not texts else 'are'} {size} bytes long"
            )
        found = _read(next(iter(texts)), addend, symbol.name, "")
        how = (
            f"the module image's {section.name}: the only string of {symbol.name}'s length "
            f"({size} bytes; the relocated image keeps no offsets there)"
        )
        return (
            found
            if isinstance(found, StringMissing)
            else FoundString(found.text, found.symbol, how, found.cut)
        )


def read_c_string(data: bytes, symbol: str, how: str) -> FoundString | StringMissing:
    """The NUL-terminated string at the start of `data` (bytes read from elsewhere, such as
    the dump's global memory)."""
    return _read(data, 0, symbol, how)


def _offset_in(section: ElfSection, symbol: ElfSymbol) -> int | None:
    if section.addr and section.addr <= symbol.value < section.addr + section.size_bytes:
        return symbol.value - section.addr
    if not section.addr and symbol.value + max(symbol.size_bytes, 1) <= section.size_bytes:
        return symbol.value
    return None


def _pieces(data: bytes) -> list[bytes]:
    # Every NUL-terminated string of the section, its NUL kept so that lengths are sizes.
    return [piece + b"\0" for piece in data.split(b"\0")[:-1]]


def _read(data: bytes, offset: int, symbol: str, how: str) -> FoundString | StringMissing:
    if not 0 <= offset < len(data):
        return StringMissing(f"{symbol} points outside the bytes it should be in")
    end = data.find(b"\0", offset, offset + STRING_LIMIT + 1)
    cut = end < 0
    raw = data[offset : offset + STRING_LIMIT] if cut else data[offset:end]
    return FoundString(raw.decode("utf-8", "replace"), symbol, how, cut)
