"""A cheap content fingerprint of a dump: what the scan cache is keyed by, with path, size, mtime.

The hash covers the ELF header, every section header and the bytes of the tables (devices,
contexts, modules, grids, SMs, CTAs, warps, lanes, constbanks, metadata), which is what a
signature is computed from, never the memory or register sections, so a dump with gigabytes
of memory costs only its tables. A dump of up to 8 MiB is read in one go (cheaper than many
small reads); a larger one is read table by table. A gzip file is fingerprinted by its
trailer (CRC-32 and size of the uncompressed data) and its first bytes, without
decompressing it. A file whose headers do not hold together is fingerprinted by its first
and last 64 KiB: broken dumps are cached too.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.elf import SHDR_DTYPE

_TABLES = (
    t.DEV_TABLE, t.CTX_TABLE, t.SM_TABLE, t.GRID_TABLE, t.CTA_TABLE, t.WP_TABLE, t.LN_TABLE,
    t.MOD_TABLE, t.CB_TABLE, t.META_DATA,
)  # fmt: skip
# Section type - SHT_LOUSER -> is it a table: a lookup instead of a set test per section.
_IS_TABLE = np.zeros(64, dtype=bool)
_IS_TABLE[[kind - t.SHT_LOUSER for kind in _TABLES]] = True
_EDGE = 64 * 1024
_IN_ONE_READ = 8 << 20
_MAX_SECTIONS = 1 << 24

Read = Callable[[int, int], bytes]


def fingerprint(path: Path, one_read_below: int = _IN_ONE_READ) -> str:
    """A hex digest of the parts of the dump at `path` a scan result depends on.

    A file of at most `one_read_below` bytes is read in one go; the digest is the same.

    Raises:
        OSError: The file cannot be read.
    """
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        digest = hashlib.sha256(size.to_bytes(8, "little"))
        if size <= one_read_below:
            data = file.read()
            head = data[:_EDGE]
            read: Read = partial(_slice, data)
        else:
            head = file.read(_EDGE)
            read = partial(_read_at, file)
        if head[:2] == b"\x1f\x8b":
            digest.update(b"gzip" + head[:4096] + read(size - 8, 8))
        elif not _tables(read, head, size, digest):
            digest.update(b"raw" + head + read(max(size - _EDGE, 0), _EDGE))
    return digest.hexdigest()[:32]


def _slice(data: bytes, offset: int, length: int) -> bytes:
    return data[offset : offset + length]


def _read_at(file: BinaryIO, offset: int, length: int) -> bytes:
    file.seek(offset)
    return file.read(length)


def _tables(read: Read, head: bytes, size: int, digest: Any) -> bool:
    # False when the headers do not hold together (the caller then hashes raw bytes).
    if len(head) < 64 or head[:4] != b"\x7fELF":
        return False
    shoff, shnum = struct.unpack_from("<Q", head, 0x28)[0], struct.unpack_from("<H", head, 0x3C)[0]
    if shoff + 64 > size:
        return False
    if shnum == 0:  # extended numbering: the count is section 0's sh_size
        shnum = int(np.frombuffer(read(shoff, 64), SHDR_DTYPE, 1)[0]["size"])
    if not 0 < shnum <= _MAX_SECTIONS or shoff + shnum * 64 > size:
        return False
    raw = read(shoff, shnum * 64)
    digest.update(head[:64] + raw)
    headers = np.frombuffer(raw, SHDR_DTYPE, shnum)
    kinds = headers["type"] - np.uint32(t.SHT_LOUSER)  # wraps for the standard types
    tables = np.flatnonzero((kinds < 64) & _IS_TABLE[kinds & 63])
    offsets, lengths = headers["offset"][tables].tolist(), headers["size"][tables].tolist()
    for offset, length in zip(offsets, lengths, strict=True):
        if offset + length > size:
            return False
        digest.update(read(offset, length))
    return True
