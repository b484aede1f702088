"""Hostile input: whatever the bytes, the reader raises PostmortemError or nothing else.

Mutations start from real fixture dumps so that they reach deep into the tables, not
just the ELF header check. Bounded example counts keep CI fast.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem import PostmortemError, open_coredump
from tests.conftest import DUMPS
from tests.tooling import examples
from tests.walk import walk

SEEDS = [
    DUMPS / name
    for name in (
        "oob_store.nvcudmp",
        "oob_store_r615.nvcudmp",
        "oob_store_memory.nvcudmp",
        "two_modules.nvcudmp",
        "sm_fault.nvcudmp",
    )
    if (DUMPS / name).exists()
] or sorted(DUMPS.glob("*.nvcudmp"))[:3]

SHDR_FIELDS = {  # offset and width inside a 64-byte section header
    "sh_type": (4, 4),
    "sh_offset": (24, 8),
    "sh_size": (32, 8),
    "sh_link": (40, 4),
    "sh_info": (44, 4),
    "sh_entsize": (56, 8),
}
FUZZ = settings(
    max_examples=examples(1 / 5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _read_or_fail(path: Path) -> None:
    try:
        with open_coredump(path) as core:
            walk(core)
    except PostmortemError as error:
        assert "\n" not in str(error)


def _section_header_table(data: bytes) -> tuple[int, int]:
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shnum = struct.unpack_from("<H", data, 0x3C)[0] or struct.unpack_from("<Q", data, shoff + 32)[0]
    return shoff, shnum


@pytest.fixture(params=SEEDS, ids=lambda p: p.name)
def seed(request):
    return request.param.read_bytes()


@FUZZ
@given(cut=st.floats(0, 1, exclude_max=True))
def test_truncated_dump_raises_only_our_errors(seed, tmp_path, cut):
    path = tmp_path / "cut.nvcudmp"
    path.write_bytes(seed[: int(len(seed) * cut)])
    _read_or_fail(path)


@FUZZ
@given(
    flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=8)
)
def test_flipped_bytes_raise_only_our_errors(seed, tmp_path, flips):
    data = bytearray(seed)
    for where, value in flips:
        data[int(where * len(data))] = value
    path = tmp_path / "flip.nvcudmp"
    path.write_bytes(bytes(data))
    _read_or_fail(path)


@FUZZ
@given(
    edits=st.lists(
        st.tuples(
            st.floats(0, 1, exclude_max=True),
            st.sampled_from(sorted(SHDR_FIELDS)),
            st.one_of(st.integers(0, 64), st.integers(0, 2**32 - 1), st.just(2**63)),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_bogus_section_header_fields_raise_only_our_errors(seed, tmp_path, edits):
    data = bytearray(seed)
    shoff, shnum = _section_header_table(seed)
    for where, field, value in edits:
        offset, width = SHDR_FIELDS[field]
        at = shoff + 64 * int(where * shnum) + offset
        data[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    path = tmp_path / "shdr.nvcudmp"
    path.write_bytes(bytes(data))
    _read_or_fail(path)


def test_link_cycle_is_reported_not_followed(seed, tmp_path):
    # GIVEN two tables whose sh_link name each other
    data = bytearray(seed)
    shoff, shnum = _section_header_table(seed)
    types = [struct.unpack_from("<I", data, shoff + 64 * i + 4)[0] for i in range(shnum)]
    warp_table = types.index(0x80000000 + 14)
    lane_table = types.index(0x80000000 + 15)
    struct.pack_into("<I", data, shoff + 64 * warp_table + 40, lane_table)
    struct.pack_into("<I", data, shoff + 64 * lane_table + 40, warp_table)
    path = tmp_path / "cycle.nvcudmp"
    path.write_bytes(bytes(data))
    # WHEN it is read
    with open_coredump(path) as core:
        walk(core)
        damage = [d.message for d in core.damage]
    # THEN the bad link is named, what hangs from it is set aside, and the rest is read
    assert any("warp table" in m and "sh_link" in m for m in damage), damage
    assert any("lane table" in m and "set aside" in m for m in damage), damage
    assert core.devices


def test_enormous_section_count_is_a_truncation(seed, tmp_path):
    data = bytearray(seed)
    struct.pack_into("<H", data, 0x3C, 0)  # e_shnum = 0: the count moves to section 0
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    struct.pack_into("<Q", data, shoff + 32, 2**40)
    path = tmp_path / "count.nvcudmp"
    path.write_bytes(bytes(data))
    with pytest.raises(PostmortemError, match="truncated"):
        open_coredump(path)
