"""Kernel arguments from parameter memory, and the pointer a faulting address came from."""

from __future__ import annotations

import struct

from postmortem import open_coredump
from postmortem.analysis.arguments import KernelArgument, read_arguments
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
    # AND the nearest pointer is `out`, just above, not `in`, far below
    assert arguments.nearest.ordinal == 1


def test_without_the_cubin_the_parameters_are_read_as_8_byte_slots(tmp_path):
    arguments, _ = _read(tmp_path, IN + 0x10, params=PARAMS, with_cubin=False)
    assert arguments.layout == "8-byte slots"
    assert [(a.ordinal, a.offset, a.value) for a in arguments.arguments] == [
        (None, 0, IN),
        (None, 8, OUT),
    ]
    assert arguments.nearest.offset == 0 and arguments.nearest.distance == 0x10


def test_without_an_address_no_argument_is_nearest(tmp_path):
    arguments, _ = _read(tmp_path, None, params=PARAMS)
    assert arguments.nearest is None
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
    assert arguments.nearest.distance == 8


def test_no_parameter_memory_is_a_reason_not_an_error(tmp_path):
    arguments, why = _read(tmp_path, OUT)
    assert arguments is None
    assert why.startswith("the dump holds no parameter memory for the grid")
