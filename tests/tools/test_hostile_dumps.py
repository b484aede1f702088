"""Hostile dumps from the security campaign, rebuilt from their descriptions: the reader's
work stays bounded by the bytes the file holds, and the rest of the dump is still read.

Times and memory are measured by bench/bench_hostile.py, not asserted here; these tests
assert what bounds them (rows decoded, sections set aside).
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import pytest

from postmortem import CodeMap, CorruptSection, find_faults, open_coredump
from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.coredump import tables as t
from postmortem.coredump.survey import DamageKind
from postmortem.summary import summarize
from tests.conftest import DUMPS
from tests.tooling import require_tool

_SHDR = struct.Struct("<IIQQQQIIQQ")


def _headers(data: bytes) -> tuple[int, list[list[int]]]:
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    count = struct.unpack_from("<H", data, 0x3C)[0] or _SHDR.unpack_from(data, shoff)[5]
    return shoff, [list(_SHDR.unpack_from(data, shoff + 64 * i)) for i in range(count)]


def _write(data: bytearray, shoff: int, headers: list[list[int]], path: Path) -> Path:
    for i, fields in enumerate(headers):
        _SHDR.pack_into(data, shoff + 64 * i, *fields)
    path.write_bytes(bytes(data))
    return path


def test_tables_that_all_span_the_whole_file_are_set_aside(tmp_path):
    # GIVEN every lane table pointed at the whole file (each overlaps all the others)
    data = bytearray((DUMPS / "two_devices_fault.nvcudmp").read_bytes())
    shoff, headers = _headers(data)
    lane_tables = [h for h in headers if h[1] == t.LN_TABLE]
    for fields in lane_tables:
        fields[4], fields[5] = 0, len(data) // 48 * 48
    path = _write(data, shoff, headers, tmp_path / "overlap.nvcudmp")
    # WHEN it is read
    with open_coredump(path) as core:
        summary = summarize(core)
        overlap = [d for d in core.damage if d.kind is DamageKind.OVERLAP]
        lanes = core.tables.row_count(t.LN_TABLE)
    # THEN the overlapping tables are named, at most one is read, the rest of the dump is
    assert overlap and overlap[0].type_name == "lane table"
    assert sum(d.count for d in overlap) >= len(lane_tables) - 1
    assert lanes <= t.LANE.max_rows
    assert len(summary.devices) == 2 and summary.launches


def test_one_huge_table_does_not_push_out_the_real_ones_it_covers(tmp_path):
    # GIVEN the first lane table stretched over the whole file, the others left alone
    data = bytearray((DUMPS / "oob_store.nvcudmp").read_bytes())
    shoff, headers = _headers(data)
    first = next(h for h in headers if h[1] == t.LN_TABLE)
    first[4], first[5] = 0, len(data) // 48 * 48
    path = _write(data, shoff, headers, tmp_path / "one_huge.nvcudmp")
    with open_coredump(path) as core:
        faults = summarize(core).faults
    # THEN only the stretched table is set aside, and the fault is still found
    assert [d.count for d in core.damage if d.kind is DamageKind.OVERLAP] == [1]
    assert {f.lane for f in faults} == {3, 4, 5, 6, 7}


def test_a_table_over_a_sparse_hole_is_read_only_as_far_as_such_a_table_goes(tmp_path):
    # GIVEN a CTA table that claims 3 GiB of zeros in a sparse file
    data = bytearray((DUMPS / "oob_store.nvcudmp").read_bytes())
    shoff, headers = _headers(data)
    table = next(h for h in headers if h[1] == t.CTA_TABLE)
    hole = 3 << 30
    table[4], table[5] = len(data), hole // 24 * 24
    path = _write(data, shoff, headers, tmp_path / "hole.nvcudmp")
    with path.open("r+b") as file:
        file.truncate(len(data) + hole)
    # WHEN it is read
    tracemalloc.start()
    try:
        with open_coredump(path) as core:
            summary = summarize(core)
            rows = int(core.tables.survey.rows[headers.index(table)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # THEN at most as many rows as a CTA table can mean are decoded, and that is said
    assert rows == t.CTA.max_rows
    assert any(d.kind is DamageKind.TOO_MANY_ROWS for d in core.damage)
    assert summary.devices
    assert peak < 64 << 20, f"{peak:,} bytes traced"


def test_a_section_count_past_any_dump_is_refused_before_it_is_read(tmp_path):
    data = bytearray((DUMPS / "oob_store.nvcudmp").read_bytes())
    struct.pack_into("<H", data, 0x3C, 0)  # extended numbering: section 0 holds the count
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    struct.pack_into("<Q", data, shoff + 32, 1 << 25)
    path = tmp_path / "count.nvcudmp"
    path.write_bytes(bytes(data))
    with path.open("r+b") as file:
        file.truncate(shoff + 64 * (1 << 25))  # the table fits the (sparse) file
    with pytest.raises(CorruptSection, match="more than 16,777,216"):
        open_coredump(path)


def _patch_handles(source: Path, path: Path, handle: int) -> Path:
    """A copy of `source` whose every module (and the grids naming one) has `handle`."""
    data = bytearray(source.read_bytes())
    _, headers = _headers(bytes(data))
    for fields in headers:
        if fields[1] == t.MOD_TABLE:
            for row in range(fields[5] // 8):
                struct.pack_into("<Q", data, fields[4] + 8 * row, handle)
        if fields[1] == t.GRID_TABLE:
            for row in range(fields[5] // fields[9]):
                struct.pack_into("<Q", data, fields[4] + fields[9] * row + 32, handle)
    path.write_bytes(bytes(data))
    return path


def test_two_devices_with_the_same_module_handle_keep_their_own_code(tmp_path):
    # GIVEN both devices' modules under one handle value
    path = _patch_handles(DUMPS / "two_devices_fault.nvcudmp", tmp_path / "same.nvcudmp", 0x1000)
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        faults = find_faults(core, code_map)
        # THEN each device's faults are located in that device's own module
        assert {f.device_index for f in faults} == {0, 1}
        for fault in faults:
            assert fault.location is not None
            assert fault.location.module.device_index == fault.device_index
            assert code_map.summary(fault.location.module) is not None


def test_a_module_handle_of_0_is_a_module_like_any_other(tmp_path):
    require_tool("nvdisasm")
    path = _patch_handles(DUMPS / "oob_store.nvcudmp", tmp_path / "zero.nvcudmp", 0)
    site = analyze_dump(path, AnalyzeOptions(cuda_gdb=False)).sites[0]
    assert site.module_handle == 0
    assert site.instruction is not None and site.instruction.opcode.startswith("STG")
