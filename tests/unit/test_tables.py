"""Row layouts: every generation's row size, and decoding only what the stride holds."""

import pytest

from postmortem.coredump import tables as t

# Row sizes per generation, as coredump-format.md lists them.
DOCUMENTED_SIZES = {
    "device table": {72: "r346", 80: "r400", 88: "r575"},
    "context table": {40: "r346"},
    "module table": {8: "r346"},
    "grid table": {104: "r346", 120: "r525", 136: "r565"},
    "constbank table": {16: "r550"},
    "SM table": {8: "r346", 24: "r555", 40: "r565", 48: "r580"},
    "CTA table": {24: "r346", 40: "r525", 56: "r565"},
    "warp table": {32: "r346", 40: "r525", 48: "r570", 64: "r575", 80: "r590"},
    "lane table": {48: "r346", 56: "r575", 64: "r615"},
    "backtrace": {24: "r346"},
    "metadata": {32: "r565"},
}


@pytest.mark.parametrize("layout", t.LAYOUTS.values(), ids=lambda layout: layout.table)
def test_each_documented_row_size_maps_to_its_generation(layout):
    for size, generation in DOCUMENTED_SIZES[layout.table].items():
        assert layout.generation(size) == generation


@pytest.mark.parametrize("layout", t.LAYOUTS.values(), ids=lambda layout: layout.table)
def test_fields_of_the_newest_layout_fit_its_row(layout):
    newest = max(DOCUMENTED_SIZES[layout.table])
    assert all(f.end <= newest for f in layout.fields)
    assert layout.present(newest) == layout.fields


def test_longer_rows_than_known_are_labelled_newer():
    assert t.WARP.generation(96) == "newer than r590"


def test_fields_past_the_stride_are_absent():
    # GIVEN an r525 warp row (40 bytes): numRegs present, sharedMemSize (r570) absent
    names = t.WARP.row_format(40).names
    assert "num_regs" in names
    assert "shared_mem_size" not in names


def test_row_format_decodes_fields_at_their_offsets():
    row = bytearray(64)
    row[8:12] = (7).to_bytes(4, "little")  # warpId
    row[40:44] = (39184).to_bytes(4, "little")  # sharedMemSize
    row[56:60] = (0xFFFFFFFF).to_bytes(4, "little")  # cbuExitedLanesMask
    form = t.WARP.row_format(64)
    decoded = dict(zip(form.names, form.record.unpack(bytes(row)), strict=True))
    assert decoded["warp_id"] == 7
    assert decoded["shared_mem_size"] == 39184
    assert decoded["cbu_exited_lanes_mask"] == 0xFFFFFFFF
    assert decoded["error_pc"] == 0


@pytest.mark.parametrize("layout", t.LAYOUTS.values(), ids=lambda layout: layout.table)
def test_every_stride_unpacks_one_row_with_the_fields_it_holds(layout):
    # Rows of every stride from 8 bytes to past the newest: the struct spans the stride.
    for entsize in range(8, max(DOCUMENTED_SIZES[layout.table]) + 24, 4):
        form = layout.row_format(entsize)
        assert form.record.size == entsize
        assert form.names == tuple(f.name for f in layout.present(entsize))


def test_every_child_type_names_a_table_parent():
    assert all(parent in t.LAYOUTS for parent in t.PARENT_TYPE.values())
