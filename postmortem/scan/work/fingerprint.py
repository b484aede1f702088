"""A cheap content fingerprint of a dump: what the scan cache is keyed by, with path, size, mtime.

The hash covers the ELF header, every section header and the bytes of the tables (devices,
contexts, modules, grids, SMs, CTAs, warps, lanes, constbanks, metadata), which is what a
signature is computed from, never the memory or register sections, so a dump with gigabytes
of memory costs only its tables. A table, and the section header table, count by their
CRC-32 (a section header holds its table's size and place): a fingerprint tells a changed
dump from an unchanged one at the same path, size and time, which a CRC does at 3 GB/s
where SHA-256 reads 350 MB/s (the tables of a dump of 86,016 lanes, 28 MB: 10 ms against
80), and it is no defence against a forger, who could as well rewrite the file's time. The
file is memory-mapped and read through the same ELF layer as the reader (`postmortem.elf`);
a table cut by the end of the file counts with the bytes it has. A gzip file is
fingerprinted by its trailer (CRC-32 and size of the uncompressed data) and its first bytes,
a zstd or xz file by its first 4 KiB and last 64 bytes (the xz index and footer, a zstd
frame's checksum), never by decompressing it. A file
whose ELF header or section header table cannot be read is fingerprinted by its first and
last 64 KiB: broken dumps are cached too. Only a regular file is read: a FIFO or a device
in a dump's place is refused before a byte is read (and a FIFO never blocks the open).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.codec import sniff_codec
from postmortem.elf import SECTION_HEADER_SIZE, Sections, read_header
from postmortem.errors import MalformedElf
from postmortem.scan.discover.local import open_regular_file

_TABLES = np.array(
    [t.DEV_TABLE, t.CTX_TABLE, t.SM_TABLE, t.GRID_TABLE, t.CTA_TABLE, t.WP_TABLE, t.LN_TABLE,
     t.MOD_TABLE, t.CB_TABLE, t.META_DATA],
    dtype=np.uint32,
)  # fmt: skip
_EDGE = 64 * 1024


def fingerprint(path: Path) -> str:
    """A hex digest of the parts of the dump at `path` a scan result depends on.

    Raises:
        OSError: The file cannot be read, or is not a regular file.
    """
    with open_regular_file(path) as file:
        size = os.fstat(file.fileno()).st_size
        digest = hashlib.sha256(size.to_bytes(8, "little"))
        head = file.read(_EDGE)
        codec = sniff_codec(head)
        if codec == "gzip":
            digest.update(b"gzip" + head[:4096] + _read_at(file, size - 8, 8))
        elif codec is not None:
            digest.update(codec.encode() + head[:4096] + _read_at(file, max(size - 64, 0), 64))
        elif not _tables(file, size, digest):
            digest.update(b"raw" + head + _read_at(file, max(size - _EDGE, 0), _EDGE))
    return digest.hexdigest()[:32]


def _read_at(file: BinaryIO, offset: int, length: int) -> bytes:
    file.seek(offset)
    return file.read(length)


def _tables(file: BinaryIO, size: int, digest: Any) -> bool:
    # False when the ELF header or section header table cannot be read (the caller then
    # hashes raw bytes).
    if size < 64:
        return False
    with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        try:
            header = read_header(mapped, size)
        except MalformedElf:
            return False
        sections = Sections(mapped, header, size)
        table_end = header.shoff + header.section_count * SECTION_HEADER_SIZE
        # A dump of many warps has as many section headers as tables (11 MB of 28): by CRC too.
        digest.update(mapped[:64])
        digest.update(_crc_of_range(mapped, header.shoff, table_end))
        for index in np.flatnonzero(np.isin(sections.type, _TABLES)).tolist():
            digest.update(_crc(sections.data(index)))
        del sections  # its buffer is the map, which closes here
    return True


def _crc(data: Any) -> bytes:
    return zlib.crc32(data).to_bytes(4, "little")


def _crc_of_range(mapped: mmap.mmap, start: int, end: int) -> bytes:
    # The views are released here, whoever still holds them: a profiler that sampled this
    # frame (a Dask worker's does) keeps its locals alive, and a live view of the map would
    # make closing it fail.
    with memoryview(mapped) as whole, whole[start:end] as part:
        return _crc(part)
