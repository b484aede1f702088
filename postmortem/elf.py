"""The one ELF reader of postmortem: bounds-checked, over any buffer, salvage-minded.

Coredumps (ELF64 ET_CORE files with up to millions of sections, memory-mapped) and the
cubins inside them (ELF64 images of a few dozen sections) are read by this module and no
other. The section header table is decoded in bulk, as numpy columns over the buffer (no
Python object per section). Every byte range handed out is checked against the end of
the buffer first.

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
from typing import Any, TypeAlias

import numpy as np

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

SECTION_DTYPE = np.dtype(
    [
        ("name", "<u4"),
        ("type", "<u4"),
        ("flags", "<u8"),
        ("addr", "<u8"),
        ("offset", "<u8"),
        ("size", "<u8"),
        ("link", "<u4"),
        ("info", "<u4"),
        ("addralign", "<u8"),
        ("entsize", "<u8"),
    ]
)
# Each field of a section header, to read one without a column (a struct at its offset).
_HEADER_FIELDS = {
    name: struct.Struct(f"<{offset}x{'I' if kind.itemsize == 4 else 'Q'}")
    for name, (kind, offset, *_) in (SECTION_DTYPE.fields or {}).items()
}
SYMBOL_DTYPE = np.dtype(
    [
        ("name", "<u4"),
        ("info", "u1"),
        ("other", "u1"),
        ("shndx", "<u2"),
        ("value", "<u8"),
        ("size", "<u8"),
    ]
)


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

    @property
    def osabi(self) -> int:
        """`e_ident[EI_OSABI]` (0x33 for CUDA, 0x41 in cubins)."""
        return self.ident[7]


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
    stored = sections.type != SHT_NOBITS
    # offset + size without overflow: a hostile header may hold anything.
    room = np.iinfo(np.uint64).max - sections.offset
    ends = np.where(sections.size > room, room, sections.offset + sections.size)[stored]
    table_end = header.shoff + header.section_count * SECTION_HEADER_SIZE
    return max(table_end, int(ends.max()) if len(ends) else 0)


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
        zero = np.frombuffer(buffer, SECTION_DTYPE, 1, shoff)[0]
        extended = True
        count = int(zero["size"]) if shnum == 0 else shnum
        names = int(zero["link"]) if shstrndx == SHN_XINDEX else shstrndx
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

    The columns are copies, so a memory map is not pinned by live views of it.
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
        columns = _read_columns(buffer, start, self.count, read_into)
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
    def flags(self) -> np.ndarray[Any, Any]:
        """`sh_flags` of every section."""
        return self._gather("flags")

    @cached_property
    def addr(self) -> np.ndarray[Any, Any]:
        """`sh_addr` of every section."""
        return self._gather("addr")

    @cached_property
    def addralign(self) -> np.ndarray[Any, Any]:
        """`sh_addralign` of every section."""
        return self._gather("addralign")

    def _gather(self, field: str) -> np.ndarray[Any, Any]:
        headers = np.frombuffer(self.buffer, SECTION_DTYPE, self.count, self.header.shoff)
        column: np.ndarray[Any, Any] = np.ascontiguousarray(headers[field])
        del headers  # release the export so a map can close
        return column

    def header_field(self, index: int, field: str) -> int:
        """One field of one section header (`"addr"`, `"flags"`…), read from the buffer."""
        if not 0 <= index < self.count:
            raise IndexError(f"section {index} of {self.count}")
        spec = _HEADER_FIELDS[field]
        return int(
            spec.unpack_from(self.buffer, self.header.shoff + index * SECTION_HEADER_SIZE)[0]
        )

    def _bytes_in_file(self) -> np.ndarray[Any, Any]:
        end = np.uint64(self.buffer_size)
        start = np.minimum(self.offset, end)
        # min(size, end - start) without overflow: offsets and sizes may be anything.
        present: np.ndarray[Any, Any] = np.minimum(self.size, end - start)
        present[self.type == SHT_NOBITS] = 0
        return present

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
        candidates = (
            range(self.count)
            if section_type is None
            else np.flatnonzero(self.type == section_type).tolist()
        )
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

    def records(self, index: int, dtype: np.dtype[Any], count: int) -> np.ndarray[Any, Any]:
        """The first `count` records of `dtype` in the section, copied out of the buffer.

        The caller has checked that they lie inside the section's available bytes.
        """
        if count <= 0:
            return np.zeros(0, dtype)  # the offset may be anything then, even past 2**63
        offset = int(self.offset[index])
        assert count * dtype.itemsize <= self.available(index)
        if self.fetch is not None:
            self.fetch(offset, count * dtype.itemsize)
        rows: np.ndarray[Any, Any] = np.frombuffer(self.buffer, dtype, count, offset).copy()
        return rows

    def symbols(self, index: int) -> np.ndarray[Any, Any]:
        """The whole symbols of a SHT_SYMTAB section that the buffer holds."""
        entsize = int(self.entsize[index]) or SYMBOL_DTYPE.itemsize
        # An entry is 24 bytes; a stride past the section holds no whole symbol.
        if not SYMBOL_DTYPE.itemsize <= entsize <= max(self.available(index), 24):
            return np.zeros(0, SYMBOL_DTYPE)
        symbols: np.ndarray[Any, Any] = self.records(
            index, _symbol_dtype(entsize), self.available(index) // entsize
        )
        return symbols

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


_COLUMNS = ("type", "offset", "size", "link", "info", "entsize")
_SLICE_HEADERS = 1 << 14  # 1 MiB of headers per read


def _read_columns(
    buffer: Buffer, start: int, count: int, read_into: ReadInto | None
) -> dict[str, np.ndarray[Any, Any]]:
    fields: dict[str, Any] = dict(SECTION_DTYPE.fields or {})
    columns = {name: np.empty(count, fields[name][0]) for name in _COLUMNS}
    scratch = bytearray(min(count, _SLICE_HEADERS) * SECTION_HEADER_SIZE)
    for first in range(0, count, _SLICE_HEADERS):
        rows = min(_SLICE_HEADERS, count - first)
        offset, size = start + first * SECTION_HEADER_SIZE, rows * SECTION_HEADER_SIZE
        if read_into is not None and read_into(offset, memoryview(scratch)[:size]) == size:
            headers = np.frombuffer(scratch, SECTION_DTYPE, rows)
        else:  # no file to read, or a short read: straight from the buffer
            headers = np.frombuffer(buffer, SECTION_DTYPE, rows, offset)
        for name, column in columns.items():
            column[first : first + rows] = headers[name]
        del headers  # release the export of a map
    return columns


@lru_cache(maxsize=8)
def _symbol_dtype(entsize: int) -> np.dtype[Any]:
    fields: dict[str, Any] = dict(SYMBOL_DTYPE.fields or {})
    return np.dtype(
        {
            "names": list(fields),
            "formats": [spec[0] for spec in fields.values()],
            "offsets": [spec[1] for spec in fields.values()],
            "itemsize": entsize,
        }
    )


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
