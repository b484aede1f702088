"""The structure of a dump: tables decoded by their stride, links followed and checked.

`TableIndex` knows nothing of devices or lanes: it decodes a table section into records
(only the fields its `sh_entsize` holds), finds the sections hanging from a row through
`sh_link`/`sh_info`, and scans one column of every table of a kind in a single gather.
It sees only what the `Survey` made when the dump was opened let through: every link
checked against the section type it must name, tables read up to their last whole row,
so a cyclic, dangling or truncated part is set aside (and named), never followed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postmortem.coredump import tables as t
from postmortem.coredump.elf import DumpFile, SectionTable
from postmortem.coredump.rows import Row
from postmortem.coredump.survey import SmallSurvey, Survey
from postmortem.elf import HeaderColumn, Sections
from postmortem.errors import CorruptSection
from postmortem.model import RowRef

_ROWS_CACHE_LIMIT = 4096


def survey(sections: Sections) -> Survey:
    """The survey of a dump's sections, by the surveyor that fits how they were read."""
    _one_record_strides(sections)
    if sections.bulk:
        from postmortem.coredump.survey_bulk import BulkSurvey

        return BulkSurvey(sections)
    return SmallSurvey(sections)


def _one_record_strides(sections: Sections) -> None:
    """Reads a metadata section with `sh_entsize` 0 as one row of its whole size.

    Driver r580 writes the one metadata record so (every dump of fixtures/real), and
    cuda-gdb 13 reads it; any other table with stride 0 stays corrupt. The columns are the
    reader's own copies (`Sections`), so this changes nothing outside the dump's reading.
    """
    types, strides, sizes = sections.type, sections.entsize, sections.size
    if sections.bulk:
        import numpy as np

        zero = np.flatnonzero((types == t.META_DATA) & (strides == 0) & (sizes > 0))
        strides[zero] = sizes[zero]
        return
    for index, kind in enumerate(types):
        if kind == t.META_DATA and strides[index] == 0 and sizes[index] > 0:
            strides[index] = sizes[index]


@dataclass(frozen=True, slots=True)
class Column:
    """One field of many rows: parallel sequences of table section, row number and value
    (lists for a small dump, numpy arrays for a large one, as `Sections.bulk` says)."""

    section: HeaderColumn
    row: HeaderColumn
    values: HeaderColumn


class TableIndex:
    """Decoded tables and the parent/child links between sections."""

    def __init__(self, mapped: DumpFile, sections: SectionTable) -> None:
        self.path: Path = mapped.path
        self.file = mapped
        self.sections = sections
        self.survey = survey(sections)
        self._rows_cache: dict[int, list[Row]] = {}
        if mapped.sparse:
            self._prefetch_tables()

    def _prefetch_tables(self) -> None:
        # A dump in an object store: every table and the string table in one batch of
        # ranged reads, rather than a request per table as the reader walks them.
        s = self.sections
        ranges = self.survey.table_ranges()
        if s.strtab is not None:
            ranges.append((int(s.offset[s.strtab]), s.available(s.strtab)))
        self.file.ensure_ranges(ranges)

    def clear(self) -> None:
        """Drop cached rows (they are copies, so the map can close)."""
        self._rows_cache.clear()

    def of_type(self, section_type: int) -> HeaderColumn:
        """Indices of every usable section of `section_type`, in file order."""
        return self.survey.usable_of(section_type)

    def attached(self, section_type: int) -> HeaderColumn:
        """`of_type`, less the root-level images (sections that hang from no row)."""
        return self.survey.attached_of(section_type)

    def rows(self, section: int, section_type: int) -> list[Row]:
        """The usable rows of a table section, with only the fields its stride holds."""
        cached = self._rows_cache.get(section)
        if cached is not None:
            return cached
        count = int(self.survey.rows[section])
        if count <= 0:  # nothing usable: a stride the file cannot hold (2**63) gives no row
            return []
        layout = t.LAYOUTS[section_type]
        form = layout.row_format(int(self.sections.entsize[section]))
        records = self.sections.records(section, form.record, count)
        rows = [dict(zip(form.names, values, strict=True)) for values in records]
        if len(self._rows_cache) > _ROWS_CACHE_LIMIT:
            self._rows_cache.clear()
        self._rows_cache[section] = rows
        return rows

    def data(self, section: int, limit: int | None = None) -> bytes:
        """The usable bytes of a section (up to the end of the file for a cut memory
        segment), at most `limit` of them."""
        size = int(self.survey.size[section])
        if limit is not None and limit < size:
            size = limit
        offset = int(self.sections.offset[section])
        self.file.ensure(offset, size)
        return bytes(self.file.map[offset : offset + size])

    def data_of(self, sections: Sequence[int | None], limit: int) -> list[bytes | None]:
        """`data` of each section (None for None), at most `limit` bytes each, their places
        looked up together: the register tables of 135,000 faulting lanes."""
        known = [section for section in sections if section is not None]
        offsets = _values_at(self.sections.offset, known)
        sizes = _values_at(self.survey.size, known)
        spans = {
            section: (offset, min(size, limit))
            for section, offset, size in zip(known, offsets, sizes, strict=True)
        }
        self.file.ensure_ranges(spans.values())
        mapped = self.file.map
        found: list[bytes | None] = []
        for section in sections:
            if section is None:
                found.append(None)
            else:
                offset, size = spans[section]
                found.append(bytes(mapped[offset : offset + size]))
        return found

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
        return self.survey.children(parent, child_type)

    def only_child(self, parent: RowRef, child_type: int) -> int | None:
        """The first section of `child_type` hanging from `parent`, if any."""
        children = self.children(parent, child_type)
        return children[0] if children else None

    def first_children(self, parents: Sequence[RowRef], child_type: int) -> list[int | None]:
        """`only_child` of each parent, in one query (thousands of faulting lanes)."""
        return self.survey.first_children(parents, child_type)

    def rows_under(self, parent: RowRef, table_type: int) -> Iterator[tuple[RowRef, Row]]:
        """Every row of every table of `table_type` hanging from `parent`, with its ref."""
        for section in self.children(parent, table_type):
            for row, values in enumerate(self.rows(section, table_type)):
                yield RowRef(section, row), values

    def column(self, section_type: int, field: str, default: int | None = None) -> Column:
        """One field of every row of every table of `section_type`, table by table in file
        order.

        Tables whose stride lacks the field are skipped, or, with a `default`, give it for
        every row (so that columns of several fields line up row for row). Over a large
        dump this is one gather over the mapped file (`column_bulk.gather`), not a
        Python object per row: finding the few faulting lanes among 270,000 stays cheap.
        """
        if self.sections.bulk:
            from postmortem.coredump.column_bulk import gather

            return Column(
                *gather(self.file, self.sections, self.survey, section_type, field, default)
            )
        spec = t.LAYOUTS[section_type].field(field)
        sections: list[int] = []
        rows: list[int] = []
        values: list[int] = []
        for table in self.of_type(section_type):
            has = int(self.sections.entsize[table]) >= spec.end
            if not has and default is None:
                continue
            for row, decoded in enumerate(self.rows(table, section_type)):
                sections.append(table)
                rows.append(row)
                values.append(decoded[field] if has else default)  # type: ignore[arg-type]
        return Column(sections, rows, values)

    def nonzero_rows(self, section_type: int, field: str) -> list[RowRef]:
        """Rows, across every table of `section_type`, whose `field` is non-zero."""
        column = self.column(section_type, field)
        if self.sections.bulk:
            from postmortem.coredump.column_bulk import nonzero

            positions = nonzero(column.values)
        else:
            positions = [i for i, value in enumerate(column.values) if value]
        return [RowRef(int(column.section[i]), int(column.row[i])) for i in positions]

    def column_arrays(self, section_type: int, field: str, default: int | None = None) -> Column:
        """`column` as numpy arrays, however the dump was read: for analyses that work on
        columns in bulk."""
        column = self.column(section_type, field, default)
        if self.sections.bulk:
            return column
        from postmortem.coredump.column_bulk import as_arrays

        spec = t.LAYOUTS[section_type].field(field)
        return Column(*as_arrays(column.section, column.row, column.values, spec.end - spec.offset))

    def row_count(self, section_type: int) -> int:
        """Usable rows in all tables of `section_type` together."""
        return self.survey.row_total(section_type)


def _values_at(column: Any, positions: list[int]) -> list[int]:
    """`column[p]` for each position, as ints: one gather from a numpy column."""
    if isinstance(column, list):
        return [int(column[p]) for p in positions]
    values: list[int] = column[positions].tolist() if positions else []
    return values
