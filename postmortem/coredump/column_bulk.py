"""One field of every row of a kind of table in a large dump, in one gather over the mapped
file: the bulk side of `TableIndex.column` (a small dump's rows are decoded one by one)."""

from __future__ import annotations

from typing import Any

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.elf import DumpFile
from postmortem.coredump.survey import Survey
from postmortem.elf import Sections

Array = np.ndarray[Any, Any]


def gather(
    file: DumpFile,
    sections: Sections,
    survey: Survey,
    section_type: int,
    field: str,
    default: int | None = None,
) -> tuple[Array, Array, Array]:
    """`TableIndex.column` over numpy columns, as (section, row, value) arrays: the values
    are read at their positions in the file, not decoded row by row."""
    s, spec = sections, t.LAYOUTS[section_type].field(field)
    every: Array = np.asarray(survey.usable_of(section_type))
    tables = every[s.entsize[every] >= spec.end]
    if default is not None and len(tables) < len(every):
        return _with_default(file, sections, survey, every, section_type, field, default)
    counts = survey.rows[tables]
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(tables)), counts)
    row = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    start = s.offset[tables].astype(np.int64)[owner] + spec.offset
    positions = start + row * s.entsize[tables].astype(np.int64)[owner]
    if file.sparse:
        sizes = counts * s.entsize[tables].astype(np.int64)
        file.ensure_ranges(zip(s.offset[tables].tolist(), sizes.tolist(), strict=True))
    width = spec.end - spec.offset
    if total and not (positions % width).any():
        # Every value aligned (as a driver writes them): one gather of whole words.
        words = np.frombuffer(file.map, "<u" + str(width), file.size // width)
        values = words[positions // width]
        del words  # release the export so the map can close
        return tables[owner], row, values
    raw = np.frombuffer(file.map, np.uint8)
    gathered = raw[positions[:, None] + np.arange(width)] if total else np.zeros((0, width))
    del raw
    values = np.ascontiguousarray(gathered, dtype=np.uint8).view("<u" + str(width)).ravel()
    return tables[owner], row, values


def _with_default(
    file: DumpFile,
    sections: Sections,
    survey: Survey,
    every: Array,
    section_type: int,
    field: str,
    default: int,
) -> tuple[Array, Array, Array]:
    counts = survey.rows[every]
    owners = np.repeat(every, counts)
    rows = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    found_section, found_row, found_values = gather(file, sections, survey, section_type, field)
    width = t.LAYOUTS[section_type].field(field)
    values = np.full(len(owners), default, dtype="<u" + str(width.end - width.offset))
    # Both lists run table by table in file order: the found rows are a subsequence.
    keys = (owners.astype(np.uint64) << np.uint64(32)) | rows.astype(np.uint64)
    found_keys = (found_section.astype(np.uint64) << np.uint64(32)) | found_row.astype(np.uint64)
    values[np.searchsorted(keys, found_keys)] = found_values
    return owners, rows, values


def nonzero(values: Array) -> list[int]:
    """The positions of the non-zero values of a gathered column."""
    found: list[int] = np.flatnonzero(values).tolist()
    return found


def as_arrays(
    section: list[int], row: list[int], values: list[int], width: int
) -> tuple[Array, Array, Array]:
    """A column of lists (a small dump's) as arrays, its values `width` bytes wide."""
    return (
        np.asarray(section, dtype=np.int64),
        np.asarray(row, dtype=np.int64),
        np.asarray(values, dtype=f"<u{width}"),
    )


def values_at(
    section: Array, row: Array, values: Array, at_section: Array, at_row: Array
) -> tuple[Array, Array]:
    """The values of a column (`section`, `row`, `values`, as `TableIndex.column_arrays`
    gives them) at the rows (`at_section`, `at_row`), and whether the column holds each: a
    row of a table whose stride lacks the field is not in it."""
    keys = (section.astype(np.uint64) << np.uint64(32)) | row.astype(np.uint64)
    wanted = (at_section.astype(np.uint64) << np.uint64(32)) | at_row.astype(np.uint64)
    if len(keys) > 1 and (keys[1:] < keys[:-1]).any():  # a column runs in file order
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
    if not len(keys):
        return np.zeros(len(wanted), dtype=values.dtype), np.zeros(len(wanted), dtype=bool)
    found = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    present: Array = keys[found] == wanted
    gathered: Array = values[found]
    return gathered, present
