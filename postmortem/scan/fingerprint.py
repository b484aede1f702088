"""A cheap content fingerprint of a dump: what the scan cache is keyed by, with path, size, mtime.

A dump of up to 8 MiB is hashed whole (one read is cheaper than many small ones). For a
larger one the hash covers the ELF header, every section header and the bytes of the tables
(devices, contexts, modules, grids, SMs, CTAs, warps, lanes, metadata), which is what a
signature is computed from, never the memory or register sections, so a dump with gigabytes
of memory costs only its tables. A gzip file is fingerprinted by its trailer (CRC-32 and size
of the uncompressed data) and its first bytes, without decompressing it. A file whose headers
cannot be parsed is fingerprinted by its first and last 64 KiB: broken dumps are cached too.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.elf import SHDR_DTYPE

_TABLE_TYPES = np.array(
    [t.DEV_TABLE, t.CTX_TABLE, t.SM_TABLE, t.GRID_TABLE, t.CTA_TABLE, t.WP_TABLE, t.LN_TABLE,
     t.MOD_TABLE, t.CB_TABLE, t.META_DATA],
    dtype=np.uint32,
)  # fmt: skip
_EDGE = 64 * 1024
_WHOLE = 8 << 20
_MAX_SECTIONS = 1 << 24


def fingerprint(path: Path, whole_below: int = _WHOLE) -> str:
    """A hex digest of the parts of the dump at `path` a scan result depends on.

    A file of at most `whole_below` bytes is hashed whole.

    Raises:
        OSError: The file cannot be read.
    """
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        head = file.read(_EDGE)
        digest = hashlib.sha256()
        digest.update(size.to_bytes(8, "little"))
        if size <= whole_below:
            digest.update(b"whole" + head + file.read())
        elif head[:2] == b"\x1f\x8b":
            file.seek(size - 8)
            digest.update(b"gzip" + head[:4096] + file.read(8))
        elif not _tables(file, head, size, digest):
            digest.update(b"raw" + head)
            file.seek(max(size - _EDGE, 0))
            digest.update(file.read(_EDGE))
    return digest.hexdigest()[:32]


def _tables(file: BinaryIO, head: bytes, size: int, digest: Any) -> bool:
    # False when the headers do not hold together (the caller then hashes raw bytes).
    if len(head) < 64 or head[:4] != b"\x7fELF":
        return False
    shoff, shnum = struct.unpack_from("<Q", head, 0x28)[0], struct.unpack_from("<H", head, 0x3C)[0]
    if shoff + 64 > size:
        return False
    file.seek(shoff)
    if shnum == 0:  # extended numbering: the count is section 0's sh_size
        shnum = int(np.frombuffer(file.read(64), SHDR_DTYPE, 1)[0]["size"])
        file.seek(shoff)
    if not 0 < shnum <= _MAX_SECTIONS or shoff + shnum * 64 > size:
        return False
    raw = file.read(shnum * 64)
    digest.update(head[:64] + raw)
    headers = np.frombuffer(raw, SHDR_DTYPE, shnum)
    for index in np.flatnonzero(np.isin(headers["type"], _TABLE_TYPES)):
        offset, length = int(headers["offset"][index]), int(headers["size"][index])
        if offset + length > size:
            return False
        file.seek(offset)
        digest.update(file.read(length))
    return True
