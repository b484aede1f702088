"""Kernel arguments from parameter memory, and the pointer a faulting address came from."""

from __future__ import annotations

import struct

from postmortem import open_coredump
from postmortem.analysis.forensics.arguments import KernelArgument, attribute, read_arguments
from postmortem.codemap import CodeMap
from tests.tinydump import DeviceSpec, DumpSpec, GridSpec, ModuleSpec, write_tiny_dump

CONSUMER = "_Z8consumerPKfPfi"  # consumer(const float* in, float* out, int n)
IN, OUT = 0x7F00_1000_0000, 0x7F00_2000_0000
PARAMS = struct.pack("<QQi", IN, OUT, 1024)
BANK = 0x7F00_5000_0000


def _read(tmp_path, address, *, with_cubin=True, layout="r400", memory=(), **grid):
    module = ModuleSpec("two_kernels")
    device = DeviceSpec([module], [GridSpec(1, module, CONSUMER, **grid)])
    spec = DumpSpec([device], layout=layout, memory=list(memory))
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", spec)) as core:
        code_map = CodeMap(core)
        (row,) = core.grids(core.devices[0])
        image = code_map.image_bytes(code_map.modules()[0].module) if with_cubin else None
        return read_arguments(core, row, image, CONSUMER if with_cubin else None, address)


def test_parameters_are_laid_out_by_the_cubin_and_the_address_names_its_pointer(tmp_path):
    # GIVEN a fault 4 bytes below `out` (out[-1])
    arguments, why = _read(tmp_path, OUT - 4, params=PARAMS)
    # THEN the three parameters come at their .nv.info offsets and sizes
    assert why is None
    assert (arguments.source, arguments.layout) == (".cudbg.param", ".nv.info")
    assert arguments.arguments == (
        KernelArgument(0, 0, 8, IN, True, OUT - 4 - IN),
        KernelArgument(1, 8, 8, OUT, True, -4),
        KernelArgument(2, 16, 4, 1024, False, None),
    )
    # AND the culprit is `out`, just above (a negative index), not `in`, far below
    assert arguments.culprit.ordinal == 1
    assert arguments.reasoning == "just below arg1: a negative index?"


def test_without_the_cubin_the_parameters_are_read_as_8_byte_slots(tmp_path):
    arguments, _ = _read(tmp_path, IN + 0x10, params=PARAMS, with_cubin=False)
    assert arguments.layout == "8-byte slots"
    assert [(a.ordinal, a.offset, a.value) for a in arguments.arguments] == [
        (None, 0, IN),
        (None, 8, OUT),
    ]
    assert arguments.culprit.offset == 0 and arguments.culprit.distance == 0x10


def test_without_an_address_no_argument_is_the_culprit(tmp_path):
    arguments, _ = _read(tmp_path, None, params=PARAMS)
    assert arguments.culprit is None
    assert all(a.distance is None for a in arguments.arguments)
    assert [a.is_pointer_like for a in arguments.arguments] == [True, True, False]


def test_parameters_are_read_from_constant_bank_0_when_there_is_no_param_section(tmp_path):
    # GIVEN no .cudbg.param, but constant bank 0 captured in global memory (r555 layout)
    bank = bytes(0x210) + PARAMS
    arguments, why = _read(
        tmp_path, OUT + 8, layout="r555", memory=[(BANK, bank)],
        constbanks=[(BANK, len(bank), 0)],
    )  # fmt: skip
    # THEN the same arguments come from there
    assert why is None and arguments.source == "constant bank 0"
    assert [a.value for a in arguments.arguments] == [IN, OUT, 1024]
    assert arguments.culprit.distance == 8


def test_no_parameter_memory_is_a_reason_not_an_error(tmp_path):
    arguments, why = _read(tmp_path, OUT)
    assert arguments is None
    assert why.startswith("the dump holds no parameter memory for the grid")


def _args(address, *values, sizes=None):
    """Arguments as `.nv.info` lays them out: 8-byte pointers, 4-byte counts."""
    out, offset = [], 0
    for ordinal, value in enumerate(values):
        pointer = value >= 1 << 32
        size = (sizes or {}).get(ordinal, 8 if pointer else 4)
        distance = address - value if pointer and address is not None else None
        out.append(KernelArgument(ordinal, offset, size, value, pointer, distance))
        offset += size
    return tuple(out)


def _attribute(address, *values, width=4):
    return attribute(".cudbg.param", ".nv.info", _args(address, *values), width)


TABLE, OUTPUT = 0x7F00_0000_0000, 0x7F00_4800_0000


def test_one_row_past_an_embedding_table_blames_the_table_not_the_nearest_pointer():
    # GIVEN lookup(table, out, rows, dim): the address is one row past the table's end
    # (rows x dim x 4 bytes), and 128 MiB below `out`, which is numerically nearer
    rows, dim = 0x40000, 1024
    address = TABLE + rows * dim * 4
    assert OUTPUT - address == 0x800_0000 < address - TABLE
    # WHEN the arguments are weighed
    arguments = _attribute(address, TABLE, OUTPUT, rows, dim)
    # THEN the table is the culprit, with the count its index reached
    assert arguments.culprit.ordinal == 0
    assert arguments.culprit.relation == "arg0 + 0x40000000"
    assert arguments.reasoning == (
        "offset = arg2 (262144) x arg3 (1024) x 4 bytes: just past the end of arg2 x arg3 elements?"
    )
    # AND a pointer the address lies far below is not even the runner-up
    assert arguments.runner_up is None


def test_an_index_equal_to_a_count_times_the_width_is_one_past_the_end():
    n = 1000
    arguments = _attribute(OUTPUT + n * 4, TABLE, OUTPUT, n)
    assert arguments.culprit.ordinal == 1
    assert arguments.reasoning == "offset = arg2 (1000) x 4 bytes: index arg2, one past the end?"


def test_a_vector_access_still_finds_the_element_size():
    # A 16-byte access (float4) one element-row past 4-byte elements: 250 x 16 = 1000 x 4.
    arguments = _attribute(OUTPUT + 4000, OUTPUT, 1000, width=16)
    assert arguments.reasoning.startswith("offset = arg1 (1000) x 4 bytes")


def test_a_negative_index_close_below_a_buffer_beats_a_far_one_above_another():
    arguments = _attribute(OUTPUT - 8, TABLE, OUTPUT, 64)
    assert arguments.culprit.ordinal == 1
    assert arguments.reasoning == "just below arg1: a negative index?"


def test_far_below_every_buffer_blames_none():
    arguments = _attribute(TABLE - (64 << 20), TABLE, OUTPUT)
    assert arguments.culprit is None and arguments.reasoning is None


def test_between_two_buffers_the_lower_one_leads_and_the_upper_one_is_the_runner_up():
    # GIVEN an address 1.5 MiB past `a` and 0.5 MiB below `b`
    a, b = TABLE, TABLE + (2 << 20)
    arguments = _attribute(a + (3 << 19), a, b)
    # THEN past the end of `a` leads, and `b` - 0x80000 is named as the close call
    assert arguments.culprit.ordinal == 0
    assert arguments.runner_up.ordinal == 1
    assert arguments.reasoning.endswith("; runner-up: arg1 - 0x80000")


def test_a_misaligned_access_is_inside_its_buffer():
    arguments = _attribute(TABLE + 2, TABLE, OUTPUT, 1024)
    assert arguments.culprit.ordinal == 0
    assert arguments.reasoning == "the closest pointer below: past the end of arg0, or inside it"


def test_a_shared_memory_offset_blames_no_argument():
    # A shared-memory access has no device address: forensics passes none.
    arguments = _attribute(None, TABLE, OUTPUT, 1024)
    assert arguments.culprit is None and arguments.runner_up is None
    assert all(a.distance is None for a in arguments.arguments)


def test_an_address_a_terabyte_past_every_pointer_names_no_culprit():
    # GIVEN an address far past both buffers (a garbage index, or no pointer at all)
    far = OUT + (1 << 41)
    pointers = (
        KernelArgument(0, 0, 8, IN, True, far - IN),
        KernelArgument(1, 8, 8, OUT, True, far - OUT),
    )
    arguments = attribute(".cudbg.param", ".nv.info", pointers, 4)
    # THEN neither is blamed
    assert arguments.culprit is None
