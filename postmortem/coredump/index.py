"""The structure of a dump: tables decoded by their stride, links followed and checked.

`TableIndex` knows nothing of devices or lanes: it decodes a table section into records
(only the fields its `sh_entsize` holds), finds the sections hanging from a row through
`sh_link`/`sh_info`, and scans one column of every table of a kind in a single gather.
Every link is checked against the section type it must name, once, in bulk, when the
dump is opened, so corruption anywhere is reported up front and a cyclic or dangling
link is never followed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.elf import SHT_NOBITS, MappedFile, SectionTable
from postmortem.errors import CorruptSection
from postmortem.model import RowRef

_ROWS_CACHE_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class Column:
    """One field of many rows: parallel arrays of table section, row number and value."""

    section: np.ndarray[Any, Any]
    row: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]


class TableIndex:
    """Decoded tables and the parent/child links between sections."""

    def __init__(self, mapped: MappedFile, sections: SectionTable) -> None:
        self.path: Path = mapped.path
        self.file = mapped
        self.sections = sections
        self._children_index: dict[int, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}
        self._rows_cache: dict[int, np.ndarray[Any, Any]] = {}
        self._validate()

    def clear(self) -> None:
        """Drop cached rows (they are copies, so the map can close)."""
        self._rows_cache.clear()

    def of_type(self, section_type: int) -> np.ndarray[Any, Any]:
        """Indices of every section of `section_type`, in file order."""
        return np.flatnonzero(self.sections.type == section_type)

    def rows(self, section: int, section_type: int) -> np.ndarray[Any, Any]:
        """The decoded rows of a table section, with only the fields its stride holds."""
        cached = self._rows_cache.get(section)
        if cached is not None:
            return cached
        rows = self._decode(section, section_type)
        if len(self._rows_cache) > _ROWS_CACHE_LIMIT:
            self._rows_cache.clear()
        self._rows_cache[section] = rows
        return rows

    def _decode(self, section: int, section_type: int) -> np.ndarray[Any, Any]:
        layout = t.LAYOUTS[section_type]
        entsize, size = int(self.sections.entsize[section]), int(self.sections.size[section])
        if entsize < layout.min_size:
            raise CorruptSection(
                self.path, self.sections.label(section), "sh_entsize", entsize,
                f"a {layout.table} row is at least {layout.min_size} bytes",
            )  # fmt: skip
        if size % entsize:
            raise CorruptSection(
                self.path, self.sections.label(section), "sh_size", size,
                f"not a multiple of sh_entsize {entsize}",
            )  # fmt: skip
        return self.sections.view(section, layout.dtype(entsize), size // entsize)

    def _validate(self) -> None:
        s, size = self.sections, self.file.size
        in_file = s.type != SHT_NOBITS
        past = in_file & ((s.offset > size) | (s.size > size - np.minimum(s.offset, size)))
        for section in np.flatnonzero(past)[:1]:
            s.data(int(section))  # raises TruncatedDump with the numbers
        rows = np.zeros(s.count, dtype=np.uint64)
        for section_type, layout in t.LAYOUTS.items():
            tables = self.of_type(section_type)
            strides = np.maximum(s.entsize[tables], 1)
            bad = (s.entsize[tables] < layout.min_size) | (s.size[tables] % strides != 0)
            for section in tables[bad][:1]:
                self._decode(int(section), section_type)  # raises CorruptSection
            rows[tables] = s.size[tables] // strides
        for child_type, parent_type in t.PARENT_TYPE.items():
            members = self.of_type(child_type)
            links = np.minimum(s.link[members], s.count - 1)
            wrong = (s.link[members] >= s.count) | (s.type[links] != parent_type)
            wrong |= s.info[members] >= rows[links]
            for section in members[wrong][:1]:
                self.parent_of(int(section))  # raises CorruptSection naming the link

    def parent_of(self, section: int) -> RowRef:
        """The row a section hangs from, checked: right table type, row in range."""
        s = self.sections
        expected = t.PARENT_TYPE[int(s.type[section])]
        link, info = int(s.link[section]), int(s.info[section])
        if link >= s.count or int(s.type[link]) != expected:
            found = "no section" if link >= s.count else self._type_name(link)
            raise CorruptSection(
                self.path, s.label(section), "sh_link", link,
                f"must name a {t.SECTION_TYPE_NAMES[expected]}, found {found}",
            )  # fmt: skip
        count = len(self.rows(link, expected))
        if info >= count:
            raise CorruptSection(
                self.path, s.label(section), "sh_info", info,
                f"row out of range: {s.label(link)} has {count} rows",
            )  # fmt: skip
        return RowRef(link, info)

    def _type_name(self, section: int) -> str:
        section_type = int(self.sections.type[section])
        return t.SECTION_TYPE_NAMES.get(section_type, f"section type 0x{section_type:x}")

    def children(self, parent: RowRef, child_type: int) -> list[int]:
        """Sections of `child_type` whose sh_link/sh_info name `parent`, in file order."""
        index = self._children_index.get(child_type)
        if index is None:
            members = self.of_type(child_type)
            keys = (self.sections.link[members].astype(np.uint64) << np.uint64(32)) | (
                self.sections.info[members].astype(np.uint64)
            )
            order = np.argsort(keys, kind="stable")
            index = (keys[order], members[order])
            self._children_index[child_type] = index
        keys, members = index
        key = np.uint64((parent.section << 32) | parent.row)
        lo, hi = np.searchsorted(keys, key, "left"), np.searchsorted(keys, key, "right")
        return [int(s) for s in members[lo:hi]]

    def only_child(self, parent: RowRef, child_type: int) -> int | None:
        """The first section of `child_type` hanging from `parent`, if any."""
        children = self.children(parent, child_type)
        return children[0] if children else None

    def rows_under(self, parent: RowRef, table_type: int) -> Iterator[tuple[RowRef, Any]]:
        """Every row of every table of `table_type` hanging from `parent`, with its ref."""
        for section in self.children(parent, table_type):
            for row, values in enumerate(self.rows(section, table_type)):
                yield RowRef(section, row), values

    def column(self, section_type: int, field: str) -> Column:
        """One field of every row of every table of `section_type`, in one gather.

        Reading just that column over the mapped file costs one pass, not a Python object
        per row: finding the few faulting lanes among 270,000 stays cheap. Tables whose
        stride lacks the field are skipped.
        """
        s, spec = self.sections, t.LAYOUTS[section_type].field(field)
        tables = self.of_type(section_type)
        tables = tables[s.entsize[tables] >= spec.end]
        counts = (s.size[tables] // s.entsize[tables]).astype(np.int64)
        total = int(counts.sum())
        owner = np.repeat(np.arange(len(tables)), counts)
        row = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        start = s.offset[tables].astype(np.int64)[owner] + spec.offset
        positions = start + row * s.entsize[tables].astype(np.int64)[owner]
        raw = np.frombuffer(self.file.map, np.uint8)
        width = spec.end - spec.offset
        gathered = raw[positions[:, None] + np.arange(width)] if total else np.zeros((0, width))
        del raw  # release the export so the map can close
        values = np.ascontiguousarray(gathered, dtype=np.uint8).view("<u" + str(width)).ravel()
        return Column(tables[owner], row, values)

    def nonzero_rows(self, section_type: int, field: str) -> list[RowRef]:
        """Rows, across every table of `section_type`, whose `field` is non-zero."""
        column = self.column(section_type, field)
        return [
            RowRef(int(column.section[i]), int(column.row[i]))
            for i in np.flatnonzero(column.values)
        ]

    def row_count(self, section_type: int) -> int:
        """Rows in all tables of `section_type` together (validated strides)."""
        tables = self.of_type(section_type)
        strides = np.maximum(self.sections.entsize[tables], 1)
        return int(np.sum(self.sections.size[tables] // strides))
