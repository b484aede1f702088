"""A dump reads the same whichever way its section headers are decoded: as a small dump
(Python lists, `SmallSurvey`, rows one by one) or in bulk (numpy columns, `BulkSurvey`, one
gather over the file). The reader picks by the number of sections; these tests read every
fixture dump, and mutants of their headers, both ways and compare everything."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from postmortem import elf
from postmortem.coredump import open_coredump
from postmortem.coredump import tables as t
from postmortem.coredump.index import survey
from postmortem.errors import PostmortemError
from postmortem.summary import summarize
from tests.conftest import FIXTURES, dump_paths
from tests.fuzz.mutant import NotApplicable, build, dump_names, mutators

FOREIGN = sorted((FIXTURES / "foreign").glob("*.nvcudmp"))
# The mutators of section headers and of the file's extent: what the survey judges.
HEADER_MUTATORS = (
    "shdr_many",
    "link_cycle",
    "section_swap",
    "truncate_boundary",
    "overlap_tables",
    "ehdr_shnum",
    "ehdr_shstrndx",
    *(name for name in mutators() if name.startswith("shdr_") and name != "shdr_many"),
)


def _both(monkeypatch: pytest.MonkeyPatch, read: Any) -> tuple[Any, Any]:
    small = read()
    with monkeypatch.context() as patch:
        patch.setattr(elf, "SMALL_TABLE", 0)
        bulk = read()
    return small, bulk


def _surveyed(data: bytes) -> Any:
    try:
        header = elf.read_header(data)
    except PostmortemError as error:
        return str(error)
    sections = elf.Sections(data, header)
    found = survey(sections)
    columns = {
        name: [int(v) for v in getattr(found, name)]
        for name in ("usable", "rows", "size", "is_root_image", "kinds")
    }
    in_file = [int(v) for v in sections.in_file]
    queries = {
        section_type: (
            [int(i) for i in found.members(section_type)],
            [int(i) for i in found.usable_of(section_type)],
            [int(i) for i in found.attached_of(section_type)],
            found.row_total(section_type),
        )
        for section_type in t.SECTION_TYPE_NAMES
    }
    return (
        sections.bulk,
        columns,
        in_file,
        sections.stored_end(),
        found.root_images,
        found.kind_counts(),
        found.damage,
        queries,
    )


def _agree(small: Any, bulk: Any) -> None:
    if isinstance(small, str) or isinstance(bulk, str):
        assert small == bulk
        return
    assert (small[0], bulk[0]) == (False, True)
    assert small[1:] == bulk[1:]


def _read(path: Path) -> Any:
    """Everything the reader says of a dump, as plain values (or its error)."""
    try:
        with open_coredump(path) as core:
            walk: list[Any] = []
            for device in core.devices:
                walk.append(core.grids(device))
                walk.extend((core.params(g), core.constbanks(g)) for g in core.grids(device))
                for sm in core.sms(device):
                    for cta in core.ctas(sm):
                        walk.append((cta, core.shared_memory(cta)))
                        for warp in core.warps(cta):
                            walk.append((warp, core.uniform_registers(warp)))
                            walk.extend(
                                (lane, core.registers(lane), core.backtrace(lane))
                                for lane in core.lanes(warp)
                            )
            try:
                summary: Any = dataclasses.replace(summarize(core), path="")
            except PostmortemError as error:
                summary = type(error).__name__
            return (
                walk,
                core.all_modules(),
                core.memory_segments(),
                core.section_counts(),
                core.layout_generation,
                core.damage,
                summary,
            )
    except PostmortemError as error:
        return str(error)


@pytest.mark.parametrize("path", dump_paths() + FOREIGN, ids=lambda p: p.name)
def test_every_fixture_dump_reads_the_same_both_ways(path, monkeypatch):
    small, bulk = _both(monkeypatch, lambda: _read(path))
    assert not isinstance(small, str), small
    assert small == bulk


@pytest.mark.parametrize("mutator", HEADER_MUTATORS)
def test_header_mutants_are_surveyed_the_same_both_ways(mutator, monkeypatch):
    # Every fixture dump, mutated by one mutator of headers, four seeds each.
    compared = 0
    for dump in dump_names():
        for seed in range(4):
            try:
                mutant = build(dump, mutator, seed)
            except NotApplicable:
                continue
            if mutant.compressed or mutant.size:
                continue
            small, bulk = _both(monkeypatch, lambda data=mutant.data: _surveyed(data))
            _agree(small, bulk)
            compared += 1
    assert compared


@pytest.mark.parametrize("mutator", ["shdr_many", "link_cycle", "truncate_boundary"])
def test_header_mutants_read_the_same_both_ways(mutator, monkeypatch, tmp_path):
    for dump in dump_names()[::3]:
        try:
            mutant = build(dump, mutator, 0)
        except NotApplicable:
            continue
        path = tmp_path / "mutant.nvcudmp"
        mutant.write(path)
        small, bulk = _both(monkeypatch, lambda mutant_path=path: _read(mutant_path))
        assert small == bulk, dump


def _registers_in_one_query(path: Path) -> list[Any]:
    """Each warp's lanes' registers found in one query (`registers_of`), whole and cut to
    R0..R2, beside the lane-by-lane reads they must equal."""
    found: list[Any] = []
    with open_coredump(path) as core:
        for device in core.devices:
            for warp in core.iter_warps(device):
                lanes = core.lanes(warp)
                one_by_one = [core.registers(lane) for lane in lanes]
                assert core.registers_of(lanes) == one_by_one
                cut = [None if r is None else r[:3] for r in one_by_one]
                assert core.registers_of(lanes, 3) == cut
                found.append(one_by_one)
    return found


@pytest.mark.parametrize("name", ["oob_store", "hang_barrier", "two_devices_fault", "calls"])
def test_registers_found_in_one_query_are_the_lanes_own_both_ways(name, monkeypatch):
    path = FIXTURES / "dumps" / f"{name}.nvcudmp"
    small, bulk = _both(monkeypatch, lambda: _registers_in_one_query(path))
    assert small == bulk and any(r is not None for rs in small for r in rs)


def test_the_numpy_section_record_is_the_struct_layout():
    from postmortem.elfcolumns import SECTION_DTYPE

    assert SECTION_DTYPE.itemsize == elf.SECTION_HEADER.size == elf.SECTION_HEADER_SIZE
    fields = SECTION_DTYPE.fields or {}
    assert list(fields) == [name for name, _ in elf.SECTION_FIELDS]
    for name, code in elf.SECTION_FIELDS:
        assert fields[name][0].itemsize == (4 if code == "I" else 8)
        assert fields[name][1] == elf._HEADER_FIELDS[name].size - fields[name][0].itemsize
