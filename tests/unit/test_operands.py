"""The SASS memory-operand decoder, on real nvdisasm 13.5 output for sm_80, sm_90 and sm_100.

The listings are fixtures/transcripts/nvdisasm/13.5/forensics/operands.sm_*.txt, recorded by
fixtures/builder/record_operands.py from fixtures/cu/forensics/operands.cu.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postmortem.analysis.fault.opclass import is_memory_access
from postmortem.cubin.operands import (
    AddressOperand,
    MemoryAccess,
    decode_access,
    effective_address,
    registers_read,
)
from postmortem.cubin.sass import SassInstruction, parse_sass
from tests.conftest import FIXTURES
from tests.tooling import TRANSCRIPTS, examples, load_transcript

ARCHES = ("sm_80", "sm_90", "sm_100")
_FUNCTION_HEADER = re.compile(r"(?m)^(?=//-+ \.text\.)")


def _instructions(arch: str) -> list[SassInstruction]:
    """Every instruction of every kernel in one architecture's transcript."""
    meta, text = load_transcript(
        TRANSCRIPTS / "nvdisasm" / "13.5" / "forensics" / f"operands.{arch}.txt"
    )
    assert set(meta) == {"source", "tool-version", "note"}
    found: list[SassInstruction] = []
    for chunk in _FUNCTION_HEADER.split(text)[1:]:
        found += parse_sass(chunk).instructions
    return found


LISTINGS = {arch: _instructions(arch) for arch in ARCHES}


def _values(registers: dict[str, int]) -> tuple[int, ...]:
    """Register values by number, from {"R2": value} (the ones not named hold 0)."""
    numbers = {int(name.lstrip("UR")): value for name, value in registers.items()}
    return tuple(numbers.get(n, 0) for n in range(max(numbers) + 1))


def _one(text: str) -> SassInstruction:
    """An instruction parsed from its text, as a listing line."""
    listing = parse_sass(f"        /*0000*/                   {text} ;")
    assert len(listing.instructions) == 1, listing.unparsed
    return listing.instructions[0]


def _find(arch: str, text: str) -> SassInstruction:
    for instruction in LISTINGS[arch]:
        if re.sub(r"^@\S+ ", "", instruction.text) == text:
            return instruction
    raise AssertionError(f"{text!r} is not in the {arch} transcript")


# (arch, text as printed, space, kind, width, base, 64-bit base, scale, uniform, 64-bit uniform,
#  descriptor, offset, constant bank, data registers)
CASES = [
    # sm_80: no descriptors; .64 pairs, .X4/.X16 scaled shared indices, absolute shared offsets.
    ("sm_80", "STG.E.128 [R4.64], R8", "global", "store", 16, "R4", True, 1, None, False, None, 0, None, ("R8",)),  # noqa: E501
    ("sm_80", "LDG.E.S8 R17, [R16.64+0x3]", "global", "load", 1, "R16", True, 1, None, False, None, 3, None, ("R17",)),  # noqa: E501
    ("sm_80", "STG.E.U16 [R12.64+0x16], R2", "global", "store", 2, "R12", True, 1, None, False, None, 0x16, None, ("R2",)),  # noqa: E501
    ("sm_80", "STS.128 [R3.X16+0x680], R4", "shared", "store", 16, "R3", False, 16, None, False, None, 0x680, None, ("R4",)),  # noqa: E501
    ("sm_80", "LDS R7, [R10.X4]", "shared", "load", 4, "R10", False, 4, None, False, None, 0, None, ("R7",)),  # noqa: E501
    ("sm_80", "LDS R11, [0x1c]", "shared", "load", 4, None, False, 1, None, False, None, 0x1C, None, ("R11",)),  # noqa: E501
    ("sm_80", "ATOMS.POPC.INC.32 RZ, [R8+URZ+0x600]", "shared", "atomic", 4, "R8", False, 1, None, False, None, 0x600, None, ("RZ",)),  # noqa: E501
    ("sm_80", "RED.E.ADD.64.STRONG.GPU [R8.64], R6", "generic", "reduction", 8, "R8", True, 1, None, False, None, 0, None, ("R6",)),  # noqa: E501
    ("sm_80", "LDGSTS.E.BYPASS.128 [R13], [R2.64+0x40]", "global", "load", 16, "R2", True, 1, None, False, None, 0x40, None, ()),  # noqa: E501
    ("sm_80", "LDSM.16.M88.4 R4, [R6]", "shared", "load", 16, "R6", False, 1, None, False, None, 0, None, ("R4",)),  # noqa: E501
    ("sm_80", "STL.128 [R1+0x10], R4", "local", "store", 16, "R1", False, 1, None, False, None, 0x10, None, ("R4",)),  # noqa: E501
    ("sm_80", "LDL.64 R24, [R28]", "local", "load", 8, "R28", False, 1, None, False, None, 0, None, ("R24",)),  # noqa: E501
    ("sm_80", "ULDC.64 UR4, c[0x0][0x118]", "constant", "load", 8, None, False, 1, None, False, None, 0x118, (0, 0x118), ("UR4",)),  # noqa: E501
    ("sm_80", "LDC.64 R4, c[0x3][R4+0x400]", "constant", "load", 8, "R4", False, 1, None, False, None, 0x400, (3, 0x400), ("R4",)),  # noqa: E501
    ("sm_80", "ST.E [R4.64], R9", "generic", "store", 4, "R4", True, 1, None, False, None, 0, None, ("R9",)),  # noqa: E501
    # The CAS prints its 64-bit base without .64; ATOMG.E.EXCH on the same pointer has it.
    ("sm_80", "ATOMG.E.CAS.STRONG.GPU PT, R0, [R4+0x80], R16, R17", "global", "atomic", 4, "R4", True, 1, None, False, None, 0x80, None, ("R0", "R16", "R17")),  # noqa: E501
    ("sm_80", "ATOMG.E.EXCH.STRONG.GPU PT, R13, [R4.64+0x100], R17", "global", "atomic", 4, "R4", True, 1, None, False, None, 0x100, None, ("R13", "R17")),  # noqa: E501
    # sm_90: desc[URx] memory descriptors, [R+UR] shared, [UR+imm], bulk and TMA copies.
    ("sm_90", "STG.E desc[UR16][R2.64+0x4000], R5", "global", "store", 4, "R2", True, 1, None, False, "UR16", 0x4000, None, ("R5",)),  # noqa: E501
    ("sm_90", "LDG.E.128 R4, desc[UR4][R6.64+0x20]", "global", "load", 16, "R6", True, 1, None, False, "UR4", 0x20, None, ("R4",)),  # noqa: E501
    ("sm_90", "LDS.64 R4, [R16+UR5]", "shared", "load", 8, "R16", False, 1, "UR5", False, None, 0, None, ("R4",)),  # noqa: E501
    ("sm_90", "LDS R9, [UR8+0x1c]", "shared", "load", 4, None, False, 1, "UR8", False, None, 0x1C, None, ("R9",)),  # noqa: E501
    ("sm_90", "ATOMS.CAS R15, [R15], R2, R3", "shared", "atomic", 4, "R15", False, 1, None, False, None, 0, None, ("R15", "R2", "R3")),  # noqa: E501
    ("sm_90", "REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR12][R10.64], R17", "global", "reduction", 4, "R10", True, 1, None, False, "UR12", 0, None, ("R17",)),  # noqa: E501
    ("sm_90", "LD.E R9, desc[UR4][R8.64]", "generic", "load", 4, "R8", True, 1, None, False, "UR4", 0, None, ("R9",)),  # noqa: E501
    ("sm_90", "LDGSTS.E.BYPASS.128 [R17], desc[UR6][R2.64+0x40]", "global", "load", 16, "R2", True, 1, None, False, "UR6", 0x40, None, ()),  # noqa: E501
    ("sm_90", "STSM.16.M88 [R0], R3", "shared", "store", 16, "R0", False, 1, None, False, None, 0, None, ("R3",)),  # noqa: E501
    ("sm_90", "LDC R0, c[0x0][RZ]", "constant", "load", 4, None, False, 1, None, False, None, 0, (0, 0), ("R0",)),  # noqa: E501
    ("sm_90", "ULDC UR4, c[0x3][0xc]", "constant", "load", 4, None, False, 1, None, False, None, 0xC, (3, 0xC), ("UR4",)),  # noqa: E501
    ("sm_90", "UBLKCP.S.G [UR8], [UR4], UR6", "bulk", "bulk-copy", None, None, False, 1, "UR4", True, None, 0, None, ("UR6",)),  # noqa: E501
    ("sm_90", "UBLKCP.G.S [UR4], [UR12], UR10", "bulk", "bulk-copy", None, None, False, 1, "UR4", True, None, 0, None, ("UR10",)),  # noqa: E501
    ("sm_90", "UBLKRED.G.S.ADD.F32.RN [UR6], [UR12], UR10", "bulk", "reduction", None, None, False, 1, "UR6", True, None, 0, None, ("UR10",)),  # noqa: E501
    ("sm_90", "UBLKPF.L2 [UR4], UR6", "bulk", "prefetch", None, None, False, 1, "UR4", True, None, 0, None, ("UR6",)),  # noqa: E501
    # sm_100: uniform constant loads are LDCU; parameters start at c[0x0][0x380].
    ("sm_100", "LDCU.128 UR12, c[0x0][0x380]", "constant", "load", 16, None, False, 1, None, False, None, 0x380, (0, 0x380), ("UR12",)),  # noqa: E501
    ("sm_100", "STS [R9+UR8], R4", "shared", "store", 4, "R9", False, 1, "UR8", False, None, 0, None, ("R4",)),  # noqa: E501
    ("sm_100", "LDS R10, [R10+0xff4]", "shared", "load", 4, "R10", False, 1, None, False, None, 0xFF4, None, ("R10",)),  # noqa: E501
    ("sm_100", "STG.E.U8 desc[UR4][R18.64+0x9], R2", "global", "store", 1, "R18", True, 1, None, False, "UR4", 9, None, ("R2",)),  # noqa: E501
    ("sm_100", "ATOM.E.ADD.STRONG.GPU PT, RZ, desc[UR6][R2.64+0x14], R15", "generic", "atomic", 4, "R2", True, 1, None, False, "UR6", 0x14, None, ("RZ", "R15")),  # noqa: E501
    ("sm_100", "STL.64 [R25], R6", "local", "store", 8, "R25", False, 1, None, False, None, 0, None, ("R6",)),  # noqa: E501
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}:{c[1]}")
def test_real_instruction_decodes_exactly(case):
    arch, text, space, kind, width, base, wide, scale, uniform, wide_uniform = case[:10]
    descriptor, offset, bank, data = case[10:]
    access = decode_access(_find(arch, text))
    assert access is not None
    assert (access.space, access.kind, access.width_bytes) == (space, kind, width)
    assert access.data_registers == data
    assert access.address == AddressOperand(
        base=base,
        base_is_64bit=wide,
        base_scale=scale,
        uniform_base=uniform,
        uniform_is_64bit=wide_uniform,
        descriptor=descriptor,
        offset=offset,
        constant_bank=bank,
        raw=access.address.raw if access.address else "",
    )


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])  # TMA is sm_90+
@pytest.mark.parametrize("opcode", ["UTMALDG.2D", "UTMASTG.2D"])
def test_tensor_map_copies_are_bulk_without_an_address(arch, opcode):
    found = [i for i in LISTINGS[arch] if i.opcode == opcode]
    assert found
    access = decode_access(found[0])
    assert access == MemoryAccess("bulk", "bulk-copy", None, None, (), found[0].text)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_data_access_in_the_listing_decodes_with_an_address(arch):
    decoded = 0
    for instruction in LISTINGS[arch]:
        access = decode_access(instruction)
        if access is None:
            # Cache control (CCTL.IVALL) is the only memory-class opcode left undecoded here.
            assert not is_memory_access(instruction.base_opcode) or instruction.base_opcode in (
                "CCTL",
            ), instruction.text
            continue
        decoded += 1
        if not instruction.base_opcode.startswith("UTMA"):
            assert access.address is not None, instruction.text
    assert decoded > 60


@pytest.mark.parametrize("text", ["IADD3 R0, R1, 0x4, RZ", "BAR.SYNC.DEFER_BLOCKING 0x0", "EXIT"])
def test_non_memory_instructions_decode_to_none(text):
    assert decode_access(_one(text)) is None


INDEX = json.loads((FIXTURES / "cubins" / "index.json").read_text())["cubins"]
FAULTS = sorted(
    (name, entry["fault"]) for name, entry in INDEX.items() if entry["fault"] is not None
)


@pytest.mark.parametrize("name,fault", FAULTS, ids=[name for name, _ in FAULTS])
def test_fixture_fault_instruction_decodes_as_its_opcode_says(name, fault):
    access = decode_access(_one(fault["sass"].rstrip(" ;")))
    if fault["opcode"].startswith(("CALL", "BPT")):  # an assert's call, a trap: no access
        assert access is None
        return
    assert access is not None and access.address is not None
    expected = {"STG.E": ("store", 4), "STG.E.128": ("store", 16), "LDG.E.128": ("load", 16)}
    if fault["opcode"] == "STS":  # the shared-memory overflow: [R7+0x10], no descriptor
        assert (access.space, access.kind, access.width_bytes) == ("shared", "store", 4)
        assert (access.address.base, access.address.offset) == ("R7", 0x10)
        assert not access.address.base_is_64bit
        return
    assert (access.kind, access.width_bytes) == expected[fault["opcode"]]
    assert access.space == "global"
    assert access.address.descriptor == "UR4"
    assert access.address.base_is_64bit
    assert access.address.offset == (4 if "+0x4]" in fault["sass"] else 0)


def test_misaligned_fixture_load_address_is_pointer_plus_four():
    # GIVEN the misaligned fixture's LDG.E.128 R8, desc[UR4][R2.64+0x4]
    access = decode_access(_one("LDG.E.128 R8, desc[UR4][R2.64+0x4]"))
    assert access is not None
    registers = {"R2": 0x0000_1000, "R3": 0x0000_7F00}
    # WHEN the lane's R3:R2 holds 0x7f00_0000_1000
    result = effective_address(access, _values(registers), None)
    # THEN the address is that pointer plus 4, and the descriptor UR4 is not added
    assert result.address == 0x7F00_0000_1004
    assert result.formula == "R3:R2 + 0x4"
    assert result.missing == ()
    assert result.address % access.width_bytes == 4


def test_shared_address_adds_uniform_register_and_offset():
    access = decode_access(_one("LDS R9, [R4+UR8+0x10]"))
    assert access is not None
    result = effective_address(access, _values({"R4": 0x100}), _values({"UR8": 0x2000}))
    assert (result.address, result.formula) == (0x2110, "R4 + UR8 + 0x10")


def test_scaled_index_and_negative_offset():
    access = decode_access(_one("STS.128 [R3.X16-0x10], R4"))
    assert access is not None and access.address is not None
    assert access.address.offset == -0x10
    result = effective_address(access, _values({"R3": 2}), None)
    assert (result.address, result.formula) == (0x10, "R3*16 - 0x10")


def test_global_uniform_base_with_zero_extended_register_is_a_uniform_pair():
    access = decode_access(_one("LDG.E.64 R10, [R6.U32+UR8+0x800]"))
    assert access is not None and access.address is not None
    assert not access.address.base_is_64bit and access.address.uniform_is_64bit
    uniforms = {"UR8": 0x2000_0000, "UR9": 0x7F}
    result = effective_address(access, _values({"R6": 0x40}), _values(uniforms))
    assert (result.address, result.formula) == (0x7F_2000_0840, "R6 + UR9:UR8 + 0x800")


def test_absolute_shared_offset_and_constant_bank_formulas():
    shared = decode_access(_one("LDS R11, [0x1c]"))
    constant = decode_access(_one("LDC.64 R4, c[0x3][R4+0x400]"))
    assert shared is not None and constant is not None
    assert effective_address(shared, None, None).formula == "0x1c"
    result = effective_address(constant, _values({"R4": 8}), None)
    assert (result.address, result.formula) == (0x408, "c[0x3][R4 + 0x400]")


def test_unavailable_high_register_is_named():
    access = decode_access(_one("STG.E desc[UR4][R4.64+0x1c], R7"))
    assert access is not None
    result = effective_address(access, _values({"R4": 0x10}), None)
    assert result == type(result)(None, ("R5",), "R5:R4 + 0x1c", (("R4", 0x10),))


def test_instruction_without_address_operand_says_so():
    access = decode_access(_one("UTMALDG.2D [UR8], [UR4]"))
    assert access is not None
    result = effective_address(access, (0,) * 8, (0,) * 8)
    assert (result.address, result.missing, result.formula) == (None, (), "no address operand")


def test_register_values_wrap_like_the_hardware():
    access = decode_access(_one("STL [R1+-0x8], R2"))
    assert access is not None
    result = effective_address(access, _values({"R1": 4}), None)
    assert result.address == 0xFFFF_FFFC  # 32-bit local window offset


_OPCODES = st.sampled_from(
    ["LDG", "STG", "LD", "ST", "LDS", "STS", "LDL", "STL", "LDC", "ULDC", "LDCU", "ATOM", "ATOMG",
     "ATOMS", "RED", "REDG", "LDGSTS", "LDSM", "STSM", "UTMALDG", "UBLKCP", "UBLKRED", "LDTM",
     "IADD3", "X"]
)  # fmt: skip
_MODIFIERS = st.lists(st.sampled_from(["E", "64", "128", "U8", "S16", "G", "S", "", "X"]))
_OPERAND = st.one_of(
    st.text(max_size=40),
    st.from_regex(r"(desc\[U?R[0-9Z]{1,3}\])?\[[RUZ0-9x.+\-X]{0,30}\]", fullmatch=True),
    st.from_regex(r"c\[[0-9xa-f]{0,6}\]\[[RUZ0-9x.+\-]{0,20}\]", fullmatch=True),
)


@settings(max_examples=examples(4 / 3))
@given(_OPCODES, _MODIFIERS, st.lists(_OPERAND, max_size=5), st.integers(0, 2**40))
def test_decode_and_address_never_raise(base, modifiers, operands, value):
    opcode = ".".join([base, *modifiers])
    instruction = SassInstruction(
        offset=0,
        predicate=None,
        opcode=opcode,
        operands=tuple(operands),
        text=" ".join([opcode, *operands]),
        inline_chain=(),
        labels=(),
    )
    access = decode_access(instruction)
    if access is not None:
        result = effective_address(access, (value,) * 256, None)
        assert result.address is None or result.address >= 0


def test_an_mbarrier_phase_check_reads_its_8_byte_word_in_shared_memory():
    from postmortem.cubin.sass import parse_sass

    text = "  /*bc20*/  SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R16+URZ+0x34830], R13 ;\n"
    access = decode_access(parse_sass(text).instructions[0])
    assert access is not None
    assert (access.space, access.kind, access.width_bytes) == ("shared", "barrier", 8)
    assert access.address is not None and access.address.base == "R16"
    assert access.address.offset == 0x34830


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("STG.E desc[UR4][R2.64], R7", (4, 0)),  # R3:R2; UR4 is the descriptor
        ("LDS R9, [R4+UR8+0x10]", (5, 9)),
        ("LDG.E.64 R10, [R6.U32+UR8+0x800]", (7, 10)),  # UR9:UR8
        ("LDS R11, [0x1c]", (0, 0)),
        ("UTMALDG.2D [UR8], [UR4]", (0, 0)),  # no address operand
    ],
)
def test_an_address_names_how_many_registers_a_lane_needs(text, counts):
    access = decode_access(_one(text))
    assert access is not None
    assert registers_read(access) == counts
