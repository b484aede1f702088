"""Kernel arguments from parameter memory, typed from the kernel's demangled signature, and
the pointer a faulting address came from."""

from __future__ import annotations

import struct

import pytest

from postmortem import open_coredump
from postmortem.analysis.forensics.arguments import (
    KernelArgument,
    attribute,
    decode_arguments,
    read_arguments,
)
from postmortem.analysis.forensics.paramtypes import argument_kind
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
    # THEN the three parameters come at their .nv.info offsets and sizes, typed by the
    # demangled signature, consumer(float const*, float*, int)
    assert why is None
    assert (arguments.source, arguments.layout) == (".cudbg.param", ".nv.info")
    assert arguments.arguments == (
        KernelArgument(0, 0, 8, IN, True, OUT - 4 - IN, "float const*", "pointer"),
        KernelArgument(1, 8, 8, OUT, True, -4, "float*", "pointer"),
        KernelArgument(2, 16, 4, 1024, False, None, "int", "integer"),
    )
    assert arguments.types_unknown is None
    assert [a.label for a in arguments.arguments] == [
        "arg0 (float const*)",
        "arg1 (float*)",
        "arg2 (int)",
    ]
    # AND the culprit is `out`, just above (a negative index), not `in`, far below
    assert arguments.culprit.ordinal == 1
    assert arguments.reasoning == "just below arg1 (float*): a negative index?"


def test_without_the_cubin_the_parameters_are_read_as_8_byte_slots(tmp_path):
    arguments, _ = _read(tmp_path, IN + 0x10, params=PARAMS, with_cubin=False)
    assert arguments.layout == "8-byte slots"
    assert [(a.ordinal, a.offset, a.value) for a in arguments.arguments] == [
        (None, 0, IN),
        (None, 8, OUT),
    ]
    assert arguments.culprit.offset == 0 and arguments.culprit.distance == 0x10
    # AND with no layout, the signature's types are not matched to anything
    assert arguments.types_unknown == "no parameter layout to match the signature to"
    assert arguments.culprit.label == "slot 0"
    assert arguments.reasoning.endswith(
        "; the types were not known (no parameter layout to match the signature to), so any "
        "8-byte value in the pointer range counted as a pointer"
    )


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


UNTYPED = (
    "; the types were not known (no signature was read), so any 8-byte value in the pointer "
    "range counted as a pointer"
)
"""What the reasoning says when the arguments carry no types."""


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
        "the address is 0x40000000 bytes past arg0; arg2 is 262144 and arg3 is 1024, and "
        "262144 × 1024 × 4 bytes = 0x40000000: if arg0 holds arg2 × arg3 elements of 4 bytes, "
        "this is the first element past its end" + UNTYPED
    )
    assert arguments.gist == "index = arg2 × arg3: one past the end?"
    # AND a pointer the address lies far below is not even the runner-up
    assert arguments.runner_up is None


def test_an_index_equal_to_a_count_times_the_width_is_one_past_the_end():
    n = 1000
    arguments = _attribute(OUTPUT + n * 4, TABLE, OUTPUT, n)
    assert arguments.culprit.ordinal == 1
    assert arguments.reasoning == (
        "the address is 0xfa0 bytes past arg1; arg2 is 1000, and 1000 × 4 bytes = 0xfa0: if "
        "arg1 holds arg2 elements of 4 bytes, this is the first element past its end" + UNTYPED
    )
    assert arguments.gist == "index = arg2: one past the end?"


def test_a_vector_access_still_finds_the_element_size():
    # A 16-byte access (float4) one element-row past 4-byte elements: 250 x 16 = 1000 x 4.
    arguments = _attribute(OUTPUT + 4000, OUTPUT, 1000, width=16)
    assert "arg1 is 1000, and 1000 × 4 bytes = 0xfa0" in arguments.reasoning


def test_a_negative_index_close_below_a_buffer_beats_a_far_one_above_another():
    arguments = _attribute(OUTPUT - 8, TABLE, OUTPUT, 64)
    assert arguments.culprit.ordinal == 1
    assert arguments.reasoning == "just below arg1: a negative index?" + UNTYPED


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
    assert arguments.reasoning.endswith("; runner-up: arg1 - 0x80000" + UNTYPED)


def test_a_misaligned_access_is_inside_its_buffer():
    arguments = _attribute(TABLE + 2, TABLE, OUTPUT, 1024)
    assert arguments.culprit.ordinal == 0
    assert arguments.reasoning == (
        "the closest pointer below: past the end of arg0, or inside it" + UNTYPED
    )


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


# Typed arguments: the kernel's demangled signature says which argument is a pointer.

BASE = 0x7F00_3000_0000
HALF_BITS = struct.unpack("<I", struct.pack("<f", 0.5))[0]  # 0.5f read as an integer


def _kernel(address, *params, width=4, typed=True):
    """Attribute `address` among `params` ((type, value, size) each) laid out back to back, as
    `.nv.info` would lay them out; with `typed`, typed by the signature, else by value only."""
    data, spans = b"", []
    for ordinal, (_, value, size) in enumerate(params):
        spans.append((ordinal, len(data), size))
        data += value.to_bytes(8, "little").ljust(size, b"\0")[:size]
    types = [type_name for type_name, _, _ in params] if typed else None
    arguments = decode_arguments(data, spans, types, address)
    return attribute(".cudbg.param", ".nv.info", arguments, width, address=address)


def _hinted(arguments):
    """Whether the reasoning says which count the index reached (the extent hint)."""
    return arguments.gist is not None and arguments.gist.startswith("index = ")


@pytest.mark.parametrize(
    ("type_name", "size", "label", "kind"),
    [
        ("float const*", 8, "arg1 (float const*)", "pointer"),
        ("float* __restrict__", 8, "arg1 (float* __restrict__)", "pointer"),
        ("void (*)(int, float)", 8, "arg1 (void (*)(int, float))", "pointer"),
        ("hgemm::GemmProblem", 24, "arg1 (hgemm::GemmProblem, 24 bytes by value)", "aggregate"),
        ("(anonymous namespace)::KdaDecodeStrides", 16,
         "arg1 ((anonymous namespace)::KdaDecodeStrides, 16 bytes by value)", "aggregate"),
        ("int", 4, "arg1 (int)", "integer"),
        ("unsigned long", 8, "arg1 (unsigned long)", "integer"),
        ("float", 4, "arg1 (float)", "floating"),
        ("c10::BFloat16", 2, "arg1 (c10::BFloat16)", "floating"),
        (None, 8, "arg1", "unknown"),
    ],
)  # fmt: skip
def test_an_argument_is_labelled_with_its_type(type_name, size, label, kind):
    types = None if type_name is None else ["int", type_name]
    (argument,) = decode_arguments(bytes(size), [(1, 0, size)], types, None)
    assert (argument.label, argument.kind, argument.type_name) == (label, kind, type_name)
    assert argument_kind(type_name) == kind


def test_a_long_struct_type_is_labelled_with_its_templates_collapsed():
    params = (
        "cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
        "cutlass::gemm::collective::CollectiveMma<cute::C<128> >, void>::Params"
    )
    (argument,) = decode_arguments(bytes(1280), [(0, 0, 1280)], [params], None)
    assert argument.label == (
        "arg0 (cutlass::gemm::kernel::GemmUniversal<…>::Params, 1280 bytes by value)"
    )
    assert argument.type_name == params


def test_a_struct_passed_by_value_is_never_the_culprit_though_it_starts_like_a_pointer():
    # GIVEN k(hgemm::GemmProblem, float const*, int): the struct's first 8 bytes are an
    # address 0x10 below the fault, the pointer is 256 MiB below it
    address = BASE + 0x10
    params = (
        ("hgemm::GemmProblem", BASE, 24),
        ("float const*", BASE - 0x1000_0000, 8),
        ("int", 1000, 4),
    )
    # WHEN typed by the signature
    typed = _kernel(address, *params)
    # THEN the struct is no candidate: the `float const*` is the culprit, and the struct is named
    assert typed.culprit.label == "arg1 (float const*)"
    assert typed.arguments[0].is_pointer_like is False and typed.arguments[0].distance is None
    assert typed.reasoning == (
        "the closest pointer below: past the end of arg1 (float const*), or inside it; "
        "arg0 (hgemm::GemmProblem, 24 bytes by value) is left out: a by-value struct; its "
        f"fields are not known (its word at 0x0 holds 0x{BASE:x}, 0x10 below the address: a "
        "pointer field, perhaps)"
    )
    # AND without the types, today's value rule takes the struct's first slot, and says why
    untyped = _kernel(address, *params, typed=False)
    assert untyped.culprit.ordinal == 0
    assert untyped.reasoning == (
        "the closest pointer below: past the end of arg0, or inside it" + UNTYPED
    )


def test_a_kernel_whose_one_argument_is_a_struct_blames_none_and_says_why():
    params = ("cutlass::gemm::kernel::GemmUniversal<int>::Params", BASE, 1280)
    arguments = _kernel(BASE + 0x40, params)
    assert arguments.culprit is None
    assert arguments.reasoning == (
        "no pointer argument is a plausible origin; arg0 (cutlass::gemm::kernel::"
        "GemmUniversal<int>::Params, 1280 bytes by value) is left out: a by-value struct; its "
        f"fields are not known (its word at 0x0 holds 0x{BASE:x}, 0x40 below the address: a "
        "pointer field, perhaps)"
    )
    # AND with no address there is nothing to explain
    assert _kernel(None, params).reasoning is None


def test_one_past_the_end_of_a_typed_buffer_is_said_with_its_evidence():
    # GIVEN k(float* x, int n): the address is n floats past x
    arguments = _kernel(BASE + 1024 * 4, ("float*", BASE, 8), ("int", 1024, 4))
    # THEN the hint names the count, its value, the product and the hypothesis
    assert arguments.culprit.ordinal == 0
    assert arguments.reasoning == (
        "the address is 0x1000 bytes past arg0 (float*); arg1 (int) is 1024, and 1024 × 4 bytes "
        "= 0x1000: if arg0 holds arg1 float elements, this is the first element past its end"
    )
    assert arguments.gist == "index = arg1: one past the end?"


def test_an_address_inside_the_first_element_past_the_end_says_how_far_into_it():
    arguments = _kernel(BASE + 1024 * 4 + 2, ("float*", BASE, 8), ("int", 1024, 4))
    assert arguments.reasoning.endswith(
        "if arg0 holds arg1 float elements, this is 2 bytes into the first element past its end"
    )


def test_the_pointee_type_gives_the_element_size_not_the_access_width():
    # A 16-byte access over c10::Half elements: 1000 halves, not 125 16-byte vectors
    arguments = _kernel(BASE + 2000, ("c10::Half*", BASE, 8), ("int", 1000, 4), width=16)
    assert "arg1 (int) is 1000, and 1000 × 2 bytes = 0x7d0" in arguments.reasoning
    assert "arg0 holds arg1 c10::Half elements" in arguments.reasoning


def test_one_row_past_a_typed_table_is_said_with_both_counts():
    rows, dim = 0x40000, 1024
    arguments = _kernel(
        TABLE + rows * dim * 4,
        ("float const*", TABLE, 8), ("float*", OUTPUT, 8), ("int", rows, 4), ("int", dim, 4),
    )  # fmt: skip
    assert arguments.culprit.ordinal == 0
    assert arguments.reasoning == (
        "the address is 0x40000000 bytes past arg0 (float const*); arg2 (int) is 262144 and "
        "arg3 (int) is 1024, and 262144 × 1024 × 4 bytes = 0x40000000: if arg0 holds arg2 × "
        "arg3 float elements, this is the first element past its end"
    )


def _fillers(count):
    # Integer arguments that multiply into nothing near the offsets of the table below.
    return tuple(("int", value, 4) for value in (3, 5, 6, 7, 9, 11, 13)[:count])


COINCIDENCES = [
    # (what, parameters, offset of the address past arg0, hinted when typed, when untyped)
    ("a float's bits multiplied by a count", (
        ("float const*", BASE, 8), ("int", 8, 4), ("float", HALF_BITS, 4),
    ), 8 * HALF_BITS * 4, False, True),
    ("a by-value struct's first bytes as the base", (
        ("hgemm::GemmProblem", BASE, 24), ("int", 4096, 4), ("int", 64, 4),
    ), 4096 * 64 * 4, False, True),
    ("a product near the offset but not on it", (
        ("float*", BASE, 8), ("int", 4096, 4), ("int", 64, 4),
    ), 4096 * 64 * 4 + 12, False, False),
    ("two products on the offset", (
        ("float*", BASE, 8), ("int", 64, 4), ("int", 4096, 4), ("int", 256, 4), ("int", 1024, 4),
    ), 1 << 20, False, False),
    ("a product with a count below 8", (
        ("float*", BASE, 8), ("int", 4, 4), ("int", 65536, 4),
    ), 4 * 65536 * 4, False, False),
    ("a product among nine counts", (
        ("float*", BASE, 8), ("int", 4096, 4), ("int", 64, 4), *_fillers(7),
    ), 4096 * 64 * 4, False, False),
    ("a product among eight counts", (
        ("float*", BASE, 8), ("int", 4096, 4), ("int", 64, 4), *_fillers(6),
    ), 4096 * 64 * 4, True, True),
    ("one count times the element size", (
        ("float*", BASE, 8), ("int", 1024, 4),
    ), 1024 * 4, True, True),
    ("one count, one row short of the address", (
        ("float*", BASE, 8), ("int", 1024, 4),
    ), 1024 * 4 + 4, False, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("params", "offset", "typed", "untyped"),
    [row[1:] for row in COINCIDENCES],
    ids=[row[0] for row in COINCIDENCES],
)
def test_the_count_hint_is_said_only_on_evidence(params, offset, typed, untyped):
    assert _hinted(_kernel(BASE + offset, *params)) is typed
    assert _hinted(_kernel(BASE + offset, *params, typed=False)) is untyped


def test_a_coincidence_among_typed_arguments_still_names_the_pointer_without_a_hint():
    # GIVEN k(float const* x, int n, float alpha): 0.5f's bits x n x 4 bytes is the offset
    params = (("float const*", BASE, 8), ("int", 8, 4), ("float", HALF_BITS, 4))
    arguments = _kernel(BASE + 8 * HALF_BITS * 4, *params)
    # THEN x is the culprit, for being the closest pointer below, and nothing more is said
    assert arguments.reasoning == (
        "the closest pointer below: past the end of arg0 (float const*), or inside it"
    )
