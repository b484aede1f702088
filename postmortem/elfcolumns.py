"""A large section header table as numpy columns (`Sections.bulk`): a full dump holds
550,000 headers, and a Python object per header would cost more than the rest of `info`.

Only tables past `elf.SMALL_TABLE` headers come here, so reading a small dump never
imports numpy. `elf.py` imports this module when it needs it; this one imports nothing of
ours (the layout below is `elf.SECTION_FIELDS` as a numpy record, which a test checks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

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
SECTION_HEADER_SIZE = SECTION_DTYPE.itemsize
SHT_NOBITS = 8
_COLUMNS = ("type", "offset", "size", "link", "info", "entsize")
_SLICE_HEADERS = 1 << 14  # 1 MiB of headers per read


def read_columns(
    buffer: Any, start: int, count: int, read_into: Callable[[int, memoryview], int] | None
) -> dict[str, np.ndarray[Any, Any]]:
    """The columns every dump's reader reads whole (type, offset, size, link, info, entsize).

    The table is read a slice at a time into one small scratch buffer, each slice scattered
    into the columns: copying all of it first (35 MB in a full H100 dump) cost three times
    more, most of it in page faults on the fresh copy, and a read call costs less than
    faulting in the pages of a map. The columns are contiguous copies, so a map is never
    pinned by views of it. The others (flags, addresses, alignments) are `gather`ed when
    asked for.
    """
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


def gather(buffer: Any, start: int, count: int, field: str) -> np.ndarray[Any, Any]:
    """One field of every header, copied out of the table."""
    headers = np.frombuffer(buffer, SECTION_DTYPE, count, start)
    column: np.ndarray[Any, Any] = np.ascontiguousarray(headers[field])
    del headers  # release the export so a map can close
    return column


def bytes_in_file(
    kind: np.ndarray[Any, Any], offset: np.ndarray[Any, Any], size: np.ndarray[Any, Any], end: int
) -> np.ndarray[Any, Any]:
    """Bytes of each section inside the first `end` bytes (0 for SHT_NOBITS)."""
    limit = np.uint64(end)
    start = np.minimum(offset, limit)
    # min(size, end - start) without overflow: offsets and sizes may be anything.
    present: np.ndarray[Any, Any] = np.minimum(size, limit - start)
    present[kind == SHT_NOBITS] = 0
    return present


def stored_end(
    kind: np.ndarray[Any, Any], offset: np.ndarray[Any, Any], size: np.ndarray[Any, Any]
) -> int:
    """The furthest end (offset + size, saturated at 2**64 - 1) of a section with bytes."""
    # offset + size without overflow: a hostile header may hold anything.
    room = np.iinfo(np.uint64).max - offset
    ends = np.where(size > room, room + offset, offset + size)[kind != SHT_NOBITS]
    return int(ends.max()) if len(ends) else 0
