"""The one ELF reader of postmortem: bounds-checked, over any buffer, salvage-minded.

Coredumps (ELF64 ET_CORE files with up to millions of sections, memory-mapped) and the
cubins inside them (ELF64 images of a few dozen sections) are read by this module and no
other. The section header table is decoded into columns, one per field: Python lists for a
table of up to `SMALL_TABLE` headers, numpy arrays for a larger one (`elfcolumns.py`, no
Python object per section). numpy is imported only then: reading a small dump does not
pay for it. Every byte range handed out is checked against the end of the buffer first.

Only an unreadable ELF header or section header table is an error (`MalformedElf`). A
section that runs past the end of the buffer is not: `available()` says how many of its
bytes are there, and the caller decides what to salvage (whole table rows, a memory
segment up to the end) and what to skip.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, NamedTuple, TypeAlias

from postmortem.errors import MalformedElf

Buffer: TypeAlias = mmap.mmap | bytes | bytearray | memoryview
ReadInto: TypeAlias = Callable[[int, memoryview], int]
"""Reads bytes at an offset of the file a buffer maps into a memoryview, and says how many it
read (fewer, or 0, when it could not: the bytes are then copied out of the buffer)."""
Fetch: TypeAlias = Callable[[int, int], None]
"""Called with (offset, size) before those bytes of a buffer are read: a dump in an object
store is a sparse mirror that fetches them (`coredump/remote.py`); a file needs none."""

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
SHT_NULL = 0
SHT_SYMTAB = 2
SHT_STRTAB = 3
SHT_RELA = 4
SHT_NOTE = 7
SHT_NOBITS = 8
SHF_ALLOC = 0x2
SHF_EXECINSTR = 0x4
SHN_LORESERVE = 0xFF00
SHN_XINDEX = 0xFFFF
STT_FUNC = 2
ET_CORE = 4
EM_CUDA = 190
HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_CORE_HEAD = struct.Struct("<4sBB10xHH")  # magic, class, data; e_type, e_machine
SECTION_HEADER_SIZE = 64
# A full H100 dump holds about 550,000 sections, eight of them in one file 4.4 million.
# Past this a header table is not a CUDA dump's, whatever the file holds.
MAX_SECTIONS = 1 << 24
_MAX_STRING = 4096
_NOTE = struct.Struct("<III")
SMALL_TABLE = 16384
"""Up to this many section headers are decoded into Python lists; more into numpy arrays.
Every dump of one small launch is below it; a dump of a GPU full of warps is far above."""

# A section header's fields, in order, and their struct codes (sh_name … sh_entsize).
SECTION_FIELDS = (
    ("name", "I"),
    ("type", "I"),
    ("flags", "Q"),
    ("addr", "Q"),
    ("offset", "Q"),
    ("size", "Q"),
    ("link", "I"),
    ("info", "I"),
    ("addralign", "Q"),
    ("entsize", "Q"),
)
SECTION_HEADER = struct.Struct("<" + "".join(code for _, code in SECTION_FIELDS))
# Each field of a section header, to read one without a column (a struct at its offset).
_HEADER_FIELDS = {
    name: struct.Struct(
        f"<{struct.calcsize('<' + ''.join(c for _, c in SECTION_FIELDS[:at]))}x{code}"
    )
    for at, (name, code) in enumerate(SECTION_FIELDS)
}
_SYMBOL = struct.Struct("<IBBHQQ")
_U64_MAX = (1 << 64) - 1
SYMBOL_SIZE = _SYMBOL.size
HeaderColumn: TypeAlias = Any
"""One field of every section header, indexed by section: a list of ints for a small table,
a numpy array for a large one (`Sections.bulk`). Only bulk code applies array operations."""


class SymbolRow(NamedTuple):
    """One entry of a SHT_SYMTAB section, as stored."""

    name: int
    info: int
    other: int
    shndx: int
    value: int
    size: int


@dataclass(frozen=True, slots=True)
class ElfHeader:
    """The ELF header, with extended section numbering resolved."""

    ident: bytes
    """`e_ident`, 16 bytes."""
    type: int
    """`e_type` (4: ET_CORE, 1: ET_REL, 2: ET_EXEC)."""
    machine: int
    """`e_machine` (190: EM_CUDA)."""
    flags: int
    """`e_flags` (a cubin's SM architecture lives here)."""
    shoff: int
    """File offset of the section header table."""
    section_count: int
    """Number of sections, after resolving extended numbering."""
    shstrndx: int
    """Index of the section-name string table, after resolving extended numbering."""
    extended_numbering: bool
    """True when the counts live in section 0 (65,280 sections or more)."""

    @property
    def abi_version(self) -> int:
        """`e_ident[EI_ABIVERSION]`: 7 in dumps and CUDA 11/12 cubins, 8 in CUDA 13 cubins."""
        return self.ident[8]


def core_header_problem(head: bytes) -> str | None:
    """Why `head` does not start like a CUDA coredump, or None when it does.

    A CUDA coredump starts with an ELF64 little-endian header of type ET_CORE (4) for
    machine EM_CUDA (190).
    """
    if not head:
        return "it is empty"
    if len(head) < _CORE_HEAD.size:
        return f"it is only {len(head)} bytes long"
    magic, elf_class, encoding, e_type, e_machine = _CORE_HEAD.unpack_from(head)
    if magic != b"\x7fELF":
        return f"no ELF magic (it starts with {head[:4].hex(' ')})"
    if elf_class != 2 or encoding != 1:
        return f"ELF class {elf_class}, data encoding {encoding}, expected 2 and 1"
    if e_type != ET_CORE or e_machine != EM_CUDA:
        return f"ELF e_type {e_type}, e_machine {e_machine}, expected 4 and 190"
    return None


def section_table_end(head: bytes) -> int | None:
    """Where the section header table ends, by the ELF header alone (at least one header;
    extended numbering keeps the count in section 0): the least size a whole file has.
    None when `head` holds no whole ELF header."""
    if len(head) < HEADER.size:
        return None
    fields = HEADER.unpack_from(head, 0)
    shoff, shnum = fields[6], fields[12]
    return int(shoff + max(shnum, 1) * SECTION_HEADER_SIZE)


def described_end(buffer: Buffer, size: int) -> int | None:
    """Where a file ends by its own headers: past its section header table and past the
    bytes of its last section. None when the ELF header or the section header table
    cannot be read from the first `size` bytes of `buffer`."""
    try:
        header = read_header(buffer, size)
    except MalformedElf:
        return None
    sections = Sections(buffer, header, size)
    table_end = header.shoff + header.section_count * SECTION_HEADER_SIZE
    return max(table_end, sections.stored_end())


def read_header(buffer: Buffer, size: int | None = None, fetch: Fetch | None = None) -> ElfHeader:
    """Reads and checks the ELF header and the bounds of the section header table.

    Args:
        buffer: The whole file or image.
        size: How many bytes of `buffer` belong to it (all of them when None).
        fetch: Asked for the bytes before they are read (see `Fetch`).

    Raises:
        MalformedElf: Not an ELF64 little-endian file, or its section header table does
            not lie inside the buffer.
    """
    size = len(buffer) if size is None else size
    if fetch is not None:
        fetch(0, HEADER.size)
    if size < 4 or bytes(buffer[:4]) != ELF_MAGIC:
        raise MalformedElf("ELF header", "no ELF magic at the start")
    if size < HEADER.size:
        raise MalformedElf("ELF header", f"cut short at byte {size} of {HEADER.size}")
    fields = HEADER.unpack_from(buffer, 0)
    ident, e_type, machine, _, _, _, shoff, flags, _, _, _, shentsize, shnum, shstrndx = fields
    if ident[4] != ELFCLASS64:
        raise MalformedElf("ELF header", f"ELF class {ident[4]}, expected 2 (64-bit)")
    if ident[5] != ELFDATA2LSB:
        raise MalformedElf("ELF header", f"data encoding {ident[5]}, expected 1 (little-endian)")
    if shentsize != SECTION_HEADER_SIZE:
        raise MalformedElf(
            "ELF header", f"e_shentsize is {shentsize}, expected 64", "e_shentsize", shentsize
        )
    _check_table(shoff, 1, size)
    count, names, extended = shnum, shstrndx, False
    if shnum == 0 or shstrndx == SHN_XINDEX:
        if fetch is not None:
            fetch(shoff, SECTION_HEADER_SIZE)
        extended = True
        count = _HEADER_FIELDS["size"].unpack_from(buffer, shoff)[0] if shnum == 0 else shnum
        if shstrndx == SHN_XINDEX:
            names = _HEADER_FIELDS["link"].unpack_from(buffer, shoff)[0]
    if count == 0:
        raise MalformedElf("ELF header", "the section count is 0", "section count", 0)
    _check_table(shoff, count, size)
    if count > MAX_SECTIONS:
        raise MalformedElf(
            "section header table",
            f"claims {count:,} sections, more than {MAX_SECTIONS:,}",
            "section count",
            count,
        )
    if names >= count:
        raise MalformedElf(
            "ELF header", f"e_shstrndx {names} is past the {count} sections", "e_shstrndx", names
        )
    return ElfHeader(bytes(ident), e_type, machine, flags, shoff, count, names, extended)


def _check_table(shoff: int, count: int, size: int) -> None:
    end = shoff + count * SECTION_HEADER_SIZE
    if end > size:
        raise MalformedElf(
            "section header table",
            f"{count:,} headers at byte {shoff:,} end at byte {end:,}, past the end "
            f"({size:,} bytes)",
            past_end_at=shoff,
        )


class Sections:
    """Every section header of an ELF file or image, as columns; bytes on demand.

    The columns are copies, so a memory map is not pinned by live views of it. They are
    lists for a table of up to `SMALL_TABLE` headers and numpy arrays past it (`bulk`).
    """

    def __init__(
        self,
        buffer: Buffer,
        header: ElfHeader,
        size: int | None = None,
        fetch: Fetch | None = None,
        read_into: ReadInto | None = None,
    ) -> None:
        """`read_into`, when given, reads the header table from the file `buffer` maps."""
        self.buffer = buffer
        self.fetch = fetch
        """Asked for bytes before they are read (None: the buffer holds them all)."""
        self.buffer_size = len(buffer) if size is None else size
        self.header = header
        self.count = header.section_count
        # The table is read a slice at a time into one small scratch buffer, each slice
        # scattered into the columns: copying all of it first (35 MB in a full H100 dump)
        # cost three times more, most of it in page faults on the fresh copy, and a read
        # call costs less than faulting in the pages of a map. The columns are contiguous
        # copies, so a map is never pinned by views of it. Those a dump's reader never reads
        # whole (flags, addresses, alignments, names) are read when asked for.
        start = header.shoff
        if fetch is not None:
            fetch(start, self.count * SECTION_HEADER_SIZE)
        self.bulk = self.count > SMALL_TABLE
        """True when the columns are numpy arrays (a large table), False for lists."""
        columns: dict[str, HeaderColumn]
        if self.bulk:
            from postmortem import elfcolumns

            columns = elfcolumns.read_columns(buffer, start, self.count, read_into)
            self._gathered: dict[str, HeaderColumn] = {}
        else:
            table = _read_table(buffer, start, self.count * SECTION_HEADER_SIZE, read_into)
            values = zip(*SECTION_HEADER.iter_unpack(table), strict=True)
            columns = {
                name: list(column) for (name, _), column in zip(SECTION_FIELDS, values, strict=True)
            }
            self._gathered = columns
        self.type = columns["type"]
        self.offset = columns["offset"]
        self.size = columns["size"]
        self.link = columns["link"]
        self.info = columns["info"]
        self.entsize = columns["entsize"]
        self.in_file = self._bytes_in_file()
        """Bytes of each section that lie inside the buffer (0 for SHT_NOBITS)."""
        self._names = self._range(header.shstrndx)

    @cached_property
    def flags(self) -> HeaderColumn:
        """`sh_flags` of every section."""
        return self._gather("flags")

    @cached_property
    def addr(self) -> HeaderColumn:
        """`sh_addr` of every section."""
        return self._gather("addr")

    @cached_property
    def addralign(self) -> HeaderColumn:
        """`sh_addralign` of every section."""
        return self._gather("addralign")

    def _gather(self, field: str) -> HeaderColumn:
        if field in self._gathered:
            return self._gathered[field]
        from postmortem import elfcolumns

        return elfcolumns.gather(self.buffer, self.header.shoff, self.count, field)

    def header_field(self, index: int, field: str) -> int:
        """One field of one section header (`"addr"`, `"flags"`…), read from the buffer."""
        if not 0 <= index < self.count:
            raise IndexError(f"section {index} of {self.count}")
        spec = _HEADER_FIELDS[field]
        return int(
            spec.unpack_from(self.buffer, self.header.shoff + index * SECTION_HEADER_SIZE)[0]
        )

    def _bytes_in_file(self) -> HeaderColumn:
        if self.bulk:
            from postmortem import elfcolumns

            return elfcolumns.bytes_in_file(self.type, self.offset, self.size, self.buffer_size)
        end = self.buffer_size
        # Comparisons, not min(): a dump has a thousand sections, and this runs for each.
        return [
            0
            if kind == SHT_NOBITS or offset >= end
            else size
            if offset + size <= end
            else end - offset
            for kind, offset, size in zip(self.type, self.offset, self.size, strict=True)
        ]

    def stored_end(self) -> int:
        """The furthest byte any section with bytes claims (offset + size, saturated at
        2**64 - 1, as a 64-bit reader sees it; 0 when no section has bytes)."""
        if self.bulk:
            from postmortem import elfcolumns

            return elfcolumns.stored_end(self.type, self.offset, self.size)
        ends = [
            min(offset + size, _U64_MAX)
            for kind, offset, size in zip(self.type, self.offset, self.size, strict=True)
            if kind != SHT_NOBITS
        ]
        return max(ends, default=0)

    def available(self, index: int) -> int:
        """How many of the section's bytes the buffer holds (0 for SHT_NOBITS)."""
        return int(self.in_file[index])

    def is_complete(self, index: int) -> bool:
        """True when every byte of the section lies inside the buffer."""
        return int(self.type[index]) == SHT_NOBITS or int(self.in_file[index]) == int(
            self.size[index]
        )

    def _range(self, index: int) -> tuple[int, int]:
        return int(self.offset[index]), self.available(index)

    def name(self, index: int) -> str:
        """The section's name (`#index` when the name offset is out of range)."""
        start, size = self._names
        offset = self.header_field(index, "name")
        if offset >= size:
            return f"#{index}"
        return self._string(start + offset, start + size)

    def label(self, index: int) -> str:
        """How messages name a section: its name, or its index when the name is unprintable."""
        name = self.name(index)
        return name if name and name.isprintable() else f"#{index}"

    def find(self, name: str, section_type: int | None = None) -> int | None:
        """The index of the first section called `name` (of `section_type`), or None."""
        if section_type is None:
            candidates: Any = range(self.count)
        elif self.bulk:
            candidates = (self.type == section_type).nonzero()[0].tolist()
        else:
            candidates = (i for i, kind in enumerate(self.type) if kind == section_type)
        return next((int(i) for i in candidates if self.name(int(i)) == name), None)

    def data(self, index: int) -> bytes:
        """The section's bytes that lie inside the buffer (a prefix when it is cut short)."""
        offset, size = self._range(index)
        if self.fetch is not None:
            self.fetch(offset, size)
        return bytes(self.buffer[offset : offset + size])

    def complete_data(self, index: int, what: str) -> bytes:
        """All of the section's bytes.

        Raises:
            MalformedElf: The section runs past the end of the buffer.
        """
        if not self.is_complete(index):
            raise MalformedElf(
                what,
                f"{int(self.size[index]):,} bytes at byte {int(self.offset[index]):,} run past "
                f"the end ({self.buffer_size:,} bytes)",
            )
        return self.data(index)

    def records(self, index: int, record: struct.Struct, count: int) -> list[tuple[Any, ...]]:
        """The first `count` records of `record` (its size is the stride) in the section.

        The caller has checked that they lie inside the section's available bytes.
        """
        if count <= 0:
            return []  # the offset may be anything then, even past 2**63
        offset, size = int(self.offset[index]), count * record.size
        assert size <= self.available(index)
        if self.fetch is not None:
            self.fetch(offset, size)
        return list(record.iter_unpack(self.buffer[offset : offset + size]))

    def symbol_stride(self, index: int) -> int:
        """The bytes from one symbol of a SHT_SYMTAB section to the next."""
        return int(self.entsize[index]) or SYMBOL_SIZE

    def symbols(self, index: int) -> list[SymbolRow]:
        """The whole symbols of a SHT_SYMTAB section that the buffer holds."""
        entsize = self.symbol_stride(index)
        # An entry is 24 bytes; a stride past the section holds no whole symbol.
        if not SYMBOL_SIZE <= entsize <= max(self.available(index), SYMBOL_SIZE):
            return []
        record = _symbol_struct(entsize)
        rows = self.records(index, record, self.available(index) // entsize)
        return [SymbolRow._make(row) for row in rows]

    def string_at(self, table: int, offset: int) -> str:
        """The NUL-terminated string at `offset` of string table section `table` ("" if none)."""
        if not 0 <= table < self.count or int(self.type[table]) == SHT_NOBITS:
            return ""
        start, size = self._range(table)
        if offset >= size:
            return ""
        return self._string(start + offset, start + size)

    def _string(self, start: int, end: int) -> str:
        if self.fetch is not None:
            self.fetch(start, min(end - start, _MAX_STRING))
        return c_string(self.buffer, start, end)


def _read_table(buffer: Buffer, start: int, size: int, read_into: ReadInto | None) -> bytes:
    """A small header table's bytes: read from the file when there is one (a read call costs
    less than faulting in the pages of a map), else copied out of the buffer."""
    if read_into is not None:
        table = bytearray(size)
        if read_into(start, memoryview(table)) == size:
            return bytes(table)
    return bytes(buffer[start : start + size])


@lru_cache(maxsize=8)
def _symbol_struct(entsize: int) -> struct.Struct:
    return struct.Struct(f"{_SYMBOL.format}{entsize - _SYMBOL.size}x")


@dataclass(frozen=True, slots=True)
class Note:
    """One note of a SHT_NOTE section."""

    owner: str
    type: int
    desc: bytes


def iter_notes(data: bytes, what: str) -> Iterator[Note]:
    """The notes of a SHT_NOTE section's bytes.

    Raises:
        MalformedElf: A note runs past the end of the section.
    """
    position = 0
    while position + _NOTE.size <= len(data):
        name_size, desc_size, note_type = _NOTE.unpack_from(data, position)
        start = position + _NOTE.size
        desc_start = start + _align4(name_size)
        end = desc_start + desc_size
        if end > len(data):
            raise MalformedElf(
                what, f"note at byte {position} runs {end - len(data)} bytes past the section"
            )
        owner = data[start : start + name_size].split(b"\0", 1)[0].decode("utf-8", "replace")
        yield Note(owner, note_type, bytes(data[desc_start:end]))
        position = desc_start + _align4(desc_size)


def _align4(value: int) -> int:
    return (value + 3) & ~3


def c_string(buffer: Buffer, start: int, end: int) -> str:
    """The NUL-terminated string at `start`, read no further than `end` (4 KiB at most)."""
    end = min(end, start + _MAX_STRING)
    raw = bytes(buffer[start:end])
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
