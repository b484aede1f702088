"""The structure of a dump: tables decoded by their stride, links followed and checked.

`TableIndex` knows nothing of devices or lanes: it decodes a table section into records
(only the fields its `sh_entsize` holds), finds the sections hanging from a row through
`sh_link`/`sh_info`, and scans one column of every table of a kind in a single gather.
It sees only what the `Survey` made when the dump was opened let through: every link
checked against the section type it must name, tables read up to their last whole row,
so a cyclic, dangling or truncated part is set aside (and named), never followed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.elf import DumpFile, SectionTable
from postmortem.coredump.survey import Survey
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

    def __init__(self, mapped: DumpFile, sections: SectionTable) -> None:
        self.path: Path = mapped.path
        self.file = mapped
        self.sections = sections
        self.survey = Survey(sections)
        self._children_index: dict[int, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}
        self._rows_cache: dict[int, np.ndarray[Any, Any]] = {}
        if mapped.sparse:
            self._prefetch_tables()

    def _prefetch_tables(self) -> None:
        # A dump in an object store: every table and the string table in one batch of
        # ranged reads, rather than a request per table as the reader walks them.
        s = self.sections
        tables = t.of_types(self.survey.kinds, t.LAYOUTS) & self.survey.usable
        members = np.flatnonzero(tables)
        sizes = self.survey.rows[members] * s.entsize[members].astype(np.int64)
        ranges = list(zip(s.offset[members].tolist(), sizes.tolist(), strict=True))
        if s.strtab is not None:
            ranges.append((int(s.offset[s.strtab]), s.available(s.strtab)))
        self.file.ensure_ranges(ranges)

    def clear(self) -> None:
        """Drop cached rows (they are copies, so the map can close)."""
        self._rows_cache.clear()

    def of_type(self, section_type: int) -> np.ndarray[Any, Any]:
        """Indices of every usable section of `section_type`, in file order."""
        members = self.survey.members(section_type)
        usable: np.ndarray[Any, Any] = members[self.survey.usable[members]]
        return usable

    def attached(self, section_type: int) -> np.ndarray[Any, Any]:
        """`of_type`, less the root-level images (sections that hang from no row)."""
        members = self.of_type(section_type)
        attached: np.ndarray[Any, Any] = members[~self.survey.is_root_image[members]]
        return attached

    def rows(self, section: int, section_type: int) -> np.ndarray[Any, Any]:
        """The usable rows of a table section, with only the fields its stride holds."""
        cached = self._rows_cache.get(section)
        if cached is not None:
            return cached
        layout = t.LAYOUTS[section_type]
        dtype = layout.dtype(int(self.sections.entsize[section]))
        rows = self.sections.records(section, dtype, int(self.survey.rows[section]))
        if len(self._rows_cache) > _ROWS_CACHE_LIMIT:
            self._rows_cache.clear()
        self._rows_cache[section] = rows
        return rows

    def data(self, section: int, limit: int | None = None) -> bytes:
        """The usable bytes of a section (up to the end of the file for a cut memory
        segment), at most `limit` of them."""
        size = int(self.survey.size[section])
        if limit is not None:
            size = min(size, limit)
        offset = int(self.sections.offset[section])
        self.file.ensure(offset, size)
        return bytes(self.file.map[offset : offset + size])

    def parent_of(self, section: int) -> RowRef:
        """The row a usable section hangs from (checked by the survey)."""
        s = self.sections
        link, info = int(s.link[section]), int(s.info[section])
        if not self.survey.usable[section] or link >= s.count or not self.survey.usable[link]:
            raise CorruptSection(
                self.path, s.label(section), "sh_link", link, "names no usable table"
            )
        return RowRef(link, info)

    def children(self, parent: RowRef, child_type: int) -> list[int]:
        """Sections of `child_type` whose sh_link/sh_info name `parent`, in file order."""
        index = self._children_index.get(child_type)
        if index is None:
            members = self.attached(child_type)
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

    def column(self, section_type: int, field: str, default: int | None = None) -> Column:
        """One field of every row of every table of `section_type`, in one gather.

        Reading just that column over the mapped file costs one pass, not a Python object
        per row: finding the few faulting lanes among 270,000 stays cheap. Tables whose
        stride lacks the field are skipped, or, with a `default`, give it for every row
        (so that columns of several fields line up row for row).
        """
        s, spec = self.sections, t.LAYOUTS[section_type].field(field)
        every = self.of_type(section_type)
        tables = every[s.entsize[every] >= spec.end]
        if default is not None and len(tables) < len(every):
            return self._column_with_default(section_type, field, default)
        counts = self.survey.rows[tables]
        total = int(counts.sum())
        owner = np.repeat(np.arange(len(tables)), counts)
        row = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        start = s.offset[tables].astype(np.int64)[owner] + spec.offset
        positions = start + row * s.entsize[tables].astype(np.int64)[owner]
        if self.file.sparse:
            sizes = counts * s.entsize[tables].astype(np.int64)
            self.file.ensure_ranges(zip(s.offset[tables].tolist(), sizes.tolist(), strict=True))
        width = spec.end - spec.offset
        if total and not (positions % width).any():
            # Every value aligned (as a driver writes them): one gather of whole words.
            words = np.frombuffer(self.file.map, "<u" + str(width), self.file.size // width)
            values = words[positions // width]
            del words  # release the export so the map can close
            return Column(tables[owner], row, values)
        raw = np.frombuffer(self.file.map, np.uint8)
        gathered = raw[positions[:, None] + np.arange(width)] if total else np.zeros((0, width))
        del raw
        values = np.ascontiguousarray(gathered, dtype=np.uint8).view("<u" + str(width)).ravel()
        return Column(tables[owner], row, values)

    def _column_with_default(self, section_type: int, field: str, default: int) -> Column:
        every = self.of_type(section_type)
        counts = self.survey.rows[every]
        sections = np.repeat(every, counts)
        rows = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        found = self.column(section_type, field)
        width = t.LAYOUTS[section_type].field(field)
        values = np.full(len(sections), default, dtype="<u" + str(width.end - width.offset))
        # Both lists run table by table in file order: the found rows are a subsequence.
        keys = (sections.astype(np.uint64) << np.uint64(32)) | rows.astype(np.uint64)
        found_keys = (found.section.astype(np.uint64) << np.uint64(32)) | found.row.astype(
            np.uint64
        )
        values[np.searchsorted(keys, found_keys)] = found.values
        return Column(sections, rows, values)

    def nonzero_rows(self, section_type: int, field: str) -> list[RowRef]:
        """Rows, across every table of `section_type`, whose `field` is non-zero."""
        column = self.column(section_type, field)
        return [
            RowRef(int(column.section[i]), int(column.row[i]))
            for i in np.flatnonzero(column.values)
        ]

    def row_count(self, section_type: int) -> int:
        """Usable rows in all tables of `section_type` together."""
        return int(np.sum(self.survey.rows[self.of_type(section_type)]))
