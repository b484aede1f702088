"""A column gathered across every table of a kind (`TableIndex.column`) holds the same
values as the tables' rows decoded one by one, whether the rows lie aligned in the file (one
gather of whole words) or at odd offsets (a gather of bytes), read as a small dump (rows
one by one) or in bulk (a gather over the file)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from postmortem.coredump import open_coredump
from postmortem.coredump import tables as t
from tests.conftest import DUMPS
from tests.tinydump import patch_section

DUMP = DUMPS / "oob_store.nvcudmp"


def _moved_to_an_odd_offset(tmp_path, name):
    # The table's bytes copied to the end of the file, one byte past a word boundary.
    path = tmp_path / "odd.nvcudmp"
    shutil.copyfile(DUMP, path)
    with open_coredump(path) as core:
        section = core.sections.find(name)
        data = core.sections.data(section)
    size = path.stat().st_size
    offset = size + (8 - size % 8) + 1
    with path.open("ab") as file:
        file.write(bytes(offset - size) + data)
    patch_section(path, name, sh_offset=offset)
    return path


def _columns_match_rows(path):
    with open_coredump(path) as core:
        index = core.tables
        for section_type, layout in t.LAYOUTS.items():
            for field in layout.fields:
                column = index.column(section_type, field.name)
                expected = [
                    int(index.rows(int(s), section_type)[int(r)][field.name])
                    for s, r in zip(column.section, column.row, strict=True)
                ]
                assert [int(v) for v in column.values] == expected, (layout.table, field.name)
                assert len(column.values) == sum(
                    int(index.survey.rows[s])
                    for s in index.of_type(section_type)
                    if int(core.sections.entsize[s]) >= field.end
                )


def test_aligned_tables_give_their_rows_values(reading):
    _columns_match_rows(DUMP)


@pytest.mark.parametrize("name", [".cudbg.lntbl.dev0.sm3.cta1.wp2", ".cudbg.wptbl.dev0.sm3.cta1"])
def test_a_table_at_an_odd_offset_gives_the_same_values(tmp_path, name, reading):
    # GIVEN a dump with one table moved to an unaligned offset
    path = _moved_to_an_odd_offset(tmp_path, name)
    with open_coredump(path) as core:
        assert int(core.sections.offset[core.sections.find(name)]) % 2 == 1
        assert not core.damage
    # THEN every column still matches the rows
    _columns_match_rows(path)
    # AND the faults read from it are those of the original
    with open_coredump(DUMP) as original, open_coredump(path) as moved:
        want = original.tables.nonzero_rows(t.LN_TABLE, "exception")
        got = moved.tables.nonzero_rows(t.LN_TABLE, "exception")
        assert len(got) == len(want) > 0
        assert np.array_equal(
            original.tables.column(t.LN_TABLE, "virtual_pc").values,
            moved.tables.column(t.LN_TABLE, "virtual_pc").values,
        )
