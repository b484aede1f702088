"""The ELF container of a coredump: identity, section headers, bounds-checked bytes.

A full H100 dump has over half a million sections, so the section header table is read
as one numpy record array over the memory-mapped file (no object per section), and only
the columns the reader needs are copied out. Every byte range handed out is checked
against the file size first, so a hostile header becomes a `TruncatedDump`, not a crash.
"""

from __future__ import annotations

import contextlib
import gzip
import mmap
import os
import shutil
import stat
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from postmortem.errors import (
    CompressedDumpError,
    CorruptSection,
    NotACudaCoredump,
    NotAnElfFile,
    TruncatedDump,
    UnreadableFile,
)

ET_CORE = 4
EM_CUDA = 190
ELFOSABI_CUDA = 0x33
SHT_NOBITS = 8
SHT_STRTAB = 3
SHN_XINDEX = 0xFFFF
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR_SIZE = 64
_GZIP_MAGIC = b"\x1f\x8b"
_MAX_NAME = 4096

SHDR_DTYPE = np.dtype(
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


@dataclass(frozen=True, slots=True)
class ElfIdentity:
    """What the ELF header says about the file."""

    abi_version: int
    """`e_ident[EI_ABIVERSION]`; 7 in the dumps seen so far."""
    section_count: int
    """Number of sections, after resolving extended numbering."""
    shstrndx: int
    """Index of the section-name string table."""
    extended_numbering: bool
    """True when the counts live in section 0 (more than 65,279 sections)."""


class MappedFile:
    """A read-only memory map of a dump, decompressed first when it is gzip."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.compressed = False
        self._tempdir: str | None = None
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise UnreadableFile(path, "not a regular file")
            self._file = open(path, "rb")  # noqa: SIM115 - lives as long as the map
        except OSError as error:
            raise UnreadableFile(path, error.strerror or str(error)) from None
        try:
            if self._file.read(2) == _GZIP_MAGIC:
                self._file.close()
                self._file = self._decompress(path)
                self.compressed = True
            size = os.fstat(self._file.fileno()).st_size
            if size == 0:
                raise NotAnElfFile(path, "the file is empty")
            self.size = size
            self.map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        except BaseException:
            self.close()
            raise

    def _decompress(self, path: Path) -> Any:
        # A private directory (mode 0700) and an unlinked file: nobody else can read the
        # decompressed dump, and nothing is left behind if we are killed.
        self._tempdir = tempfile.mkdtemp(prefix="postmortem-")
        out = tempfile.TemporaryFile(dir=self._tempdir)  # noqa: SIM115 - returned open
        free = shutil.disk_usage(self._tempdir).free
        try:
            with gzip.open(path, "rb") as stream:
                while chunk := stream.read(1 << 20):
                    if out.tell() + len(chunk) > free:
                        raise CompressedDumpError(path, "decompressed dump exceeds free disk space")
                    out.write(chunk)
        except (OSError, EOFError, zlib.error) as error:
            out.close()
            raise CompressedDumpError(path, str(error) or type(error).__name__) from None
        out.flush()
        return out

    def check(self, offset: int, size: int, what: str) -> None:
        """Raise `TruncatedDump` unless `[offset, offset + size)` lies inside the file."""
        if offset < 0 or size < 0:
            raise TruncatedDump(self.path, self.size, max(size, 0), what)
        if offset + size > self.size:
            start = min(offset, self.size)
            raise TruncatedDump(self.path, start, offset + size - start, what)

    def read(self, offset: int, size: int, what: str) -> bytes:
        """The bytes at `[offset, offset + size)`, bounds-checked."""
        self.check(offset, size, what)
        return self.map[offset : offset + size]

    def close(self) -> None:
        mapping = getattr(self, "map", None)
        if mapping is not None:
            # numpy views still alive: the map closes when they go
            with contextlib.suppress(BufferError):
                mapping.close()
        self._file.close()
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None


def read_identity(mapped: MappedFile) -> ElfIdentity:
    """Validate the ELF header of a CUDA coredump and resolve the section counts."""
    path = mapped.path
    if mapped.size < 4 or mapped.map[:4] != b"\x7fELF":
        raise NotAnElfFile(path, "no ELF magic at the start of the file")
    if mapped.size < _EHDR.size:
        raise NotAnElfFile(path, f"ELF header cut short at byte {mapped.size}")
    ident, e_type, e_machine, _, _, _, e_shoff, _, _, _, _, e_shentsize, e_shnum, e_shstrndx = (
        _EHDR.unpack_from(mapped.map, 0)
    )
    if ident[4] != 2:
        raise NotAnElfFile(path, f"ELF class {ident[4]}, expected 2 (64-bit)")
    if ident[5] != 1:
        raise NotAnElfFile(path, f"ELF data encoding {ident[5]}, expected 1 (little-endian)")
    if e_type != ET_CORE:
        raise NotACudaCoredump(path, "e_type", e_type, ET_CORE)
    if e_machine != EM_CUDA:
        raise NotACudaCoredump(path, "e_machine", e_machine, EM_CUDA)
    if e_shentsize != _SHDR_SIZE:
        raise CorruptSection(path, "ELF header", "e_shentsize", e_shentsize, "expected 64")
    mapped.check(e_shoff, _SHDR_SIZE, "section header 0")
    count, shstrndx, extended = e_shnum, e_shstrndx, False
    if e_shnum == 0 or e_shstrndx == SHN_XINDEX:
        section0 = np.frombuffer(mapped.map, SHDR_DTYPE, 1, e_shoff)[0]
        extended = True
        if e_shnum == 0:
            count = int(section0["size"])
        if e_shstrndx == SHN_XINDEX:
            shstrndx = int(section0["link"])
    if count == 0:
        raise CorruptSection(path, "ELF header", "section count", 0, "a coredump has sections")
    mapped.check(e_shoff, count * _SHDR_SIZE, f"the table of {count} section headers")
    if shstrndx >= count:
        raise CorruptSection(path, "ELF header", "e_shstrndx", shstrndx, f"only {count} sections")
    return ElfIdentity(ident[8], count, shstrndx, extended)


def _section_header_offset(mapped: MappedFile) -> int:
    return int(struct.unpack_from("<Q", mapped.map, 0x28)[0])


class SectionTable:
    """All section headers, as columns; names and bytes on demand."""

    def __init__(self, mapped: MappedFile, identity: ElfIdentity) -> None:
        self._mapped = mapped
        headers = np.frombuffer(
            mapped.map, SHDR_DTYPE, identity.section_count, _section_header_offset(mapped)
        )
        # Copies of the columns we use, so the mapping is not pinned by live views.
        self.type = headers["type"].copy()
        self.link = headers["link"].copy()
        self.info = headers["info"].copy()
        self.offset = headers["offset"].copy()
        self.size = headers["size"].copy()
        self.addr = headers["addr"].copy()
        self.entsize = headers["entsize"].copy()
        self.flags = headers["flags"].copy()
        self._name = headers["name"].copy()
        del headers
        self.count = identity.section_count
        self._shstr = self._string_table_bounds(identity.shstrndx)
        self.strtab: tuple[int, int] | None = self._find_strtab()

    def _string_table_bounds(self, index: int) -> tuple[int, int]:
        offset, size = int(self.offset[index]), int(self.size[index])
        self._mapped.check(offset, size, "the section-name string table")
        return offset, size

    def _find_strtab(self) -> tuple[int, int] | None:
        for index in np.flatnonzero(self.type == SHT_STRTAB):
            if self.name(int(index)) == ".strtab":
                return self._string_table_bounds(int(index))
        return None

    def name(self, index: int) -> str:
        """The section's name from `.shstrtab` ("?" when the index is out of range)."""
        start, size = self._shstr
        offset = int(self._name[index])
        if offset >= size:
            return f"#{index}"
        return _c_string(self._mapped.map, start + offset, start + size)

    def label(self, index: int) -> str:
        """How errors name a section: its name, or its index when the name is bad."""
        name = self.name(index)
        return name if name and name.isprintable() else f"#{index}"

    def data(self, index: int) -> bytes:
        """The section's bytes, bounds-checked (empty for SHT_NOBITS)."""
        if int(self.type[index]) == SHT_NOBITS:
            return b""
        offset, size = int(self.offset[index]), int(self.size[index])
        return self._mapped.read(offset, size, f"section {self.label(index)}")

    def view(self, index: int, dtype: np.dtype[Any], count: int) -> np.ndarray[Any, Any]:
        """`count` records of `dtype` at the start of the section, bounds-checked."""
        offset, size = int(self.offset[index]), count * dtype.itemsize
        if offset + size > self._mapped.size:  # the label is built only for the error
            self._mapped.check(offset, size, f"section {self.label(index)}")
        rows: np.ndarray[Any, Any] = np.frombuffer(self._mapped.map, dtype, count, offset).copy()
        return rows

    def string(self, offset: int, what: str) -> str:
        """A string from `.strtab`."""
        if self.strtab is None:
            raise CorruptSection(self._mapped.path, ".strtab", what, offset, "no .strtab section")
        start, size = self.strtab
        if offset >= size:
            raise CorruptSection(
                self._mapped.path, ".strtab", what, offset, f"past its end ({size} bytes)"
            )
        return _c_string(self._mapped.map, start + offset, start + size)


def _c_string(buffer: mmap.mmap, start: int, end: int) -> str:
    end = min(end, start + _MAX_NAME)
    stop = buffer.find(b"\0", start, end)
    raw = buffer[start : stop if stop >= 0 else end]
    return raw.decode("utf-8", "replace")
