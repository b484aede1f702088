"""Row layouts: every generation's row size, and decoding only what the stride holds."""

import numpy as np
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
    names = t.WARP.dtype(40).names
    assert "num_regs" in names
    assert "shared_mem_size" not in names


def test_dtype_decodes_fields_at_their_offsets():
    row = bytearray(64)
    row[8:12] = (7).to_bytes(4, "little")  # warpId
    row[40:44] = (39184).to_bytes(4, "little")  # sharedMemSize
    decoded = np.frombuffer(bytes(row), t.WARP.dtype(64), 1)[0]
    assert int(decoded["warp_id"]) == 7
    assert int(decoded["shared_mem_size"]) == 39184


def test_every_child_type_names_a_table_parent():
    assert all(parent in t.LAYOUTS for parent in t.PARENT_TYPE.values())
