"""The `.debug_line` decoder on programs written here byte by byte: the DWARF versions ptxas
writes, NVIDIA's inline-context opcode, and input that lies."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from postmortem.cubin.elfimage import ElfImage
from postmortem.cubin.lines import decode_line_program
from postmortem.errors import MalformedElf

STRINGS = b"_Z5outerv\0_Z5innerv\0"
OUTER, INNER = 0, len(b"_Z5outerv\0")


def uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        done = (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40)
        out.append(byte | (0 if done else 0x80))
        if done:
            return bytes(out)


def ext(sub: int, body: bytes) -> bytes:
    return b"\0" + uleb(len(body) + 1) + bytes([sub]) + body


def set_address(value: int) -> bytes:
    return ext(0x02, struct.pack("<Q", value))


def context(inlined_at: int, function: int) -> bytes:
    return ext(0x90, uleb(inlined_at) + uleb(function))


END = b"\x02" + uleb(16) + ext(0x01, b"")
"""Past the last instruction, then DW_LNE_end_sequence."""


def row(advance_pc: int = 0, advance_line: int = 0) -> bytes:
    """DW_LNS_advance_pc, DW_LNS_advance_line, DW_LNS_copy."""
    return b"\x02" + uleb(advance_pc) + b"\x03" + sleb(advance_line) + b"\x01"


def unit(program: bytes, version: int = 3, files: tuple[tuple[str, int], ...] = ()) -> bytes:
    """A line-program unit of DWARF `version` 2-4 (opcode_base 13, line_base -5)."""
    lengths = bytes([0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1])
    tables = (
        b"include\0\0"
        + b"".join(name.encode() + b"\0" + uleb(directory) + b"\0\0" for name, directory in files)
        + b"\0"
    )
    fields = bytes([1]) + (b"\x01" if version >= 4 else b"") + b"\x01" + struct.pack("<b", -5)
    header = fields + bytes([14, 13]) + lengths + tables
    body = struct.pack("<H", version) + struct.pack("<I", len(header)) + header + program
    return struct.pack("<I", len(body)) + body


FILES = (("k.cu", 0), ("store.cuh", 1))


def test_a_row_that_was_inlined_names_its_function_and_its_call_site():
    # GIVEN the kernel at k.cu:10, then inner() inlined at row 2 (k.cu:12), at store.cuh:4
    program = (
        set_address(0) + row(0, 9) + row(16, 2)
        + context(2, INNER) + b"\x04\x02" + row(0, -8) + row(16, 1)
        + context(0, 0) + b"\x04\x01" + row(16, 10) + row(32) + END
    )  # fmt: skip
    table = decode_line_program(unit(program, files=FILES), STRINGS)
    # WHEN the PCs are looked up
    at_inline = table.chain(0, 0x10)
    after = table.chain(0, 0x30)
    # THEN the last row at an address is the innermost frame, its call site the next
    assert [(f.function, f.file, f.line) for f in at_inline] == [
        ("_Z5innerv", "include/store.cuh", 4),
        (None, "k.cu", 12),
    ]
    assert [(f.function, f.file, f.line) for f in after] == [(None, "k.cu", 15)]
    assert table.chain(0, 0x60) == ()  # past the end of the sequence
    assert table.chain(1, 0x10) == ()  # a section the table does not cover


def test_a_context_holds_for_the_rows_after_it_until_the_next():
    program = (
        set_address(0) + row(0, 9) + context(1, INNER) + row(16, 1) + row(16, 1) + END
    )  # fmt: skip
    table = decode_line_program(unit(program, files=FILES), STRINGS)
    assert [f.line for f in table.chain(0, 0x20)] == [12, 10]
    assert table.chain(0, 0x20)[0].function == "_Z5innerv"


def test_rows_are_numbered_per_sequence():
    # GIVEN two sequences; the second's context points at its own first row
    first = set_address(0) + row(0, 4) + row(16, 1) + row(16, 1) + END
    second = set_address(0x100) + row(0, 19) + context(1, INNER) + row(16, 1) + END
    table = decode_line_program(unit(first + second, files=FILES), STRINGS)
    # THEN the call site is row 1 of the second sequence (line 20), not of the first
    assert [f.line for f in table.chain(0, 0x110)] == [21, 20]


def test_a_row_inheriting_its_context_is_named_after_the_function_called_there():
    # GIVEN call site row 1; outer() written for it first, inner() later (a collapsed chain),
    # then a row that writes no context of its own
    program = (
        set_address(0) + row(0, 9) + context(1, OUTER) + row(16, 1)
        + context(2, INNER) + row(16, 1) + context(1, INNER) + row(16, 1) + row(16, 1) + END
    )  # fmt: skip
    table = decode_line_program(unit(program, files=FILES), STRINGS)
    rows = table.rows(0)
    # THEN the written contexts keep their names, the inheriting row takes outer()
    assert [r.function for r in rows] == [None, "_Z5outerv", "_Z5innerv", "_Z5innerv", "_Z5outerv"]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_dwarf_versions_2_to_4_read_alike(version):
    program = set_address(0) + row(0, 6) + END
    table = decode_line_program(unit(program, version=version, files=FILES), STRINGS)
    assert [(f.file, f.line) for f in table.chain(0, 0)] == [("k.cu", 7)]


def test_dwarf_5_file_tables_are_read():
    # GIVEN a version 5 header: directory and file entries described by their forms
    directories = b"\x01" + uleb(1) + uleb(0x08) + uleb(2) + b"/src\0" + b"/src/include\0"
    files = (
        b"\x02" + uleb(1) + uleb(0x08) + uleb(2) + uleb(0x0B)
        + uleb(2) + b"k.cu\0\x00" + b"store.cuh\0\x01"
    )  # fmt: skip
    lengths = bytes([0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1])
    header = bytes([1, 1, 1]) + struct.pack("<b", -5) + bytes([14, 13]) + lengths
    header += directories + files
    program = set_address(0) + b"\x04\x01" + row(0, 2) + END
    body = struct.pack("<HBB", 5, 8, 0) + struct.pack("<I", len(header)) + header + program
    data = struct.pack("<I", len(body)) + body
    # THEN file 1 (0-based in DWARF 5) is store.cuh under its directory
    assert [(f.file, f.line) for f in decode_line_program(data).chain(0, 0)] == [
        ("/src/include/store.cuh", 3)
    ]


def test_a_context_pointing_ahead_or_at_itself_is_dropped_not_followed():
    program = set_address(0) + row(0, 9) + context(5, INNER) + row(16, 1) + END
    table = decode_line_program(unit(program, files=FILES), STRINGS)
    assert [f.line for f in table.chain(0, 0x10)] == [11]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-3],  # the program cut short
        lambda data: struct.pack("<I", len(data) * 4) + data[4:],  # a unit longer than it
        lambda data: data[:4] + struct.pack("<H", 9) + data[6:],  # an unknown version
        lambda data: data + b"\x01\x00",  # a second unit cut short inside its header
    ],
    ids=["cut", "long-unit", "version", "short-header"],
)
def test_a_lying_program_raises_only_malformed_elf(damage):
    program = set_address(0) + row(0, 9) + context(1, INNER) + row(16, 1) + END
    data = damage(unit(program, files=FILES))
    with pytest.raises(MalformedElf):
        decode_line_program(data, STRINGS)


def test_a_function_name_outside_the_string_table_is_an_error():
    program = set_address(0) + row(0, 9) + context(1, 4096) + row(16, 1) + END
    with pytest.raises(MalformedElf, match="outside the table"):
        decode_line_program(unit(program, files=FILES), STRINGS)


def test_an_endless_leb128_number_is_an_error():
    program = set_address(0) + b"\x02" + b"\xff" * 20 + END
    with pytest.raises(MalformedElf, match="too long"):
        decode_line_program(unit(program, files=FILES), STRINGS)


def test_an_address_in_no_code_section_drops_the_sequence():
    program = set_address(0x5000) + row(0, 9) + END
    table = decode_line_program(unit(program, files=FILES), STRINGS, place=lambda _o, _v: None)
    assert table.sections == ()


def test_mutants_of_a_real_line_program_raise_nothing_but_malformed_elf():
    # GIVEN the line program of a fixture cubin with a nine-frame inline chain
    cubin = Path(__file__).parents[2] / "fixtures" / "cubins" / "cutlass_like.sm_90.v8.cubin"
    image = ElfImage(cubin.read_bytes())
    data, strings = image.section_data(".debug_line"), image.section_data(".debug_str")
    assert data and strings
    rng = random.Random(1)
    # WHEN 2,000 mutants (bytes flipped, runs cut out, garbage spliced in) are decoded
    for _ in range(2000):
        mutant = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(mutant))
            choice = rng.random()
            if choice < 0.6:
                mutant[at] = rng.randrange(256)
            elif choice < 0.8:
                del mutant[at : at + rng.randint(1, 16)]
            else:
                mutant[at:at] = rng.randbytes(rng.randint(1, 16))
        # THEN each decodes, or raises MalformedElf, and a lookup never fails
        try:
            table = decode_line_program(bytes(mutant), strings)
        except MalformedElf:
            continue
        for section in table.sections:
            for offset in range(0, 0x900, 0x40):
                assert len(table.chain(section, offset)) <= 256


def test_a_dwarf_5_table_of_fieldless_entries_is_refused_at_once():
    # A directory format with no fields and a count of 2^63: nothing to read per entry.
    lengths = bytes([0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1])
    header = bytes([1, 1, 1]) + struct.pack("<b", -5) + bytes([14, 13]) + lengths
    header += b"\x00" + uleb(1 << 63 - 1)
    body = struct.pack("<HBB", 5, 8, 0) + struct.pack("<I", len(header)) + header
    with pytest.raises(MalformedElf, match="cannot fit the header"):
        decode_line_program(struct.pack("<I", len(body)) + body)
