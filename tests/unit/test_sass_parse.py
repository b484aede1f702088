"""parse_sass over recorded nvdisasm/cuobjdump transcripts (exact), plus fuzzing.

Transcripts live in fixtures/transcripts/nvdisasm/<version>/: 13.5 ones are recorded from the
fixture cubins by fixtures/builder/record_nvdisasm.py and checked against index.json; the
others are published output (their `# source:` says where) with hand-checked expectations.
"""

from __future__ import annotations

import json
import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postmortem.cubin.sass import SassListing, SourceFrame, parse_sass
from tests.tooling import REPO, TRANSCRIPTS, load_transcript

NVDISASM = TRANSCRIPTS / "nvdisasm"
ALL = sorted(NVDISASM.glob("*/*.txt"))
RECORDED = [p for p in ALL if p.parent.name == "13.5"]
INDEX = json.loads((REPO / "fixtures" / "cubins" / "index.json").read_text())["cubins"]


def _id(path):
    return f"{path.parent.name}/{path.name}"


def _parse(name):
    _, text = load_transcript(NVDISASM / name)
    return parse_sass(text)


def _chain(instruction):
    return [[posixpath.basename(f.file), f.line] for f in instruction.inline_chain]


def test_corpus_has_recorded_and_published_transcripts():
    assert len(RECORDED) == len(INDEX)
    assert len(ALL) - len(RECORDED) >= 6


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_transcript_has_header_and_parses_cleanly(path):
    meta, text = load_transcript(path)
    assert set(meta) == {"source", "tool-version", "note"}
    listing = parse_sass(text)
    offsets = [i.offset for i in listing.instructions]
    assert offsets == sorted(offsets)
    assert all(listing.at(i.offset) is not None for i in listing.instructions)


# --- 13.5, recorded from the fixture cubins: everything checked against index.json ----------


@pytest.mark.parametrize("path", RECORDED, ids=_id)
def test_recorded_listing_is_one_kernel_fully_understood(path):
    entry = INDEX[path.stem]
    listing = _parse(f"13.5/{path.name}")
    kernels = {k["name"] for k in entry["kernels"]}
    assert listing.function in kernels
    assert listing.section == f".text.{listing.function}"
    assert listing.other_functions == ()
    assert listing.unparsed == ()
    assert listing.has_line_info is entry["lineinfo"]
    assert listing.instructions[0].offset == 0
    assert listing.instructions[0].labels == (listing.function, listing.section)


@pytest.mark.parametrize("path", [p for p in RECORDED if INDEX[p.stem]["fault"]], ids=_id)
def test_recorded_fault_instruction_matches_index(path):
    fault = INDEX[path.stem]["fault"]
    listing = _parse(f"13.5/{path.name}")
    instruction = listing.at(fault["offset"])
    assert instruction is not None
    assert instruction.text == fault["sass"].removesuffix(" ;")
    assert instruction.opcode == fault["opcode"]
    expected = fault["expected_chain"] if INDEX[path.stem]["lineinfo"] else []
    assert _chain(instruction) == expected


@pytest.mark.parametrize("path", [p for p in RECORDED if INDEX[p.stem]["stalls"]], ids=_id)
def test_recorded_stall_instructions_match_index(path):
    listing = _parse(f"13.5/{path.name}")
    for stall in INDEX[path.stem]["stalls"].values():
        instruction = listing.at(stall["offset"])
        assert instruction is not None
        assert instruction.text == stall["sass"].removesuffix(" ;")


def test_oob_store_v8_line_blocks_carry_to_following_instructions():
    listing = _parse("13.5/oob_store.sm_90.v8.txt")
    exit_ = listing.at(0x70)
    assert (exit_.predicate, exit_.opcode, exit_.operands) == ("P0", "EXIT", ())
    assert exit_.text == "@P0 EXIT"
    assert exit_.labels == (".L_x_1",)
    # No //## block right above 0x70: the one above 0x50 still applies.
    assert _chain(exit_) == [["oob_store.cu", 15], ["oob_store.cu", 26]]
    assert listing.at(0x80).inline_chain == (
        SourceFrame("include/store.cuh", 10),
        SourceFrame("include/store.cuh", 16),
        SourceFrame("oob_store.cu", 19),
        SourceFrame("oob_store.cu", 26),
    )
    assert _chain(listing.at(0x90)) == [["oob_store.cu", 19], ["oob_store.cu", 26]]
    assert listing.at(0xE0).labels == (".L_x_2",)
    self_loop = listing.at(0xF0)
    assert (self_loop.opcode, self_loop.operands, self_loop.labels) == (
        "BRA",
        ("`(.L_x_0)",),
        (".L_x_0",),
    )
    assert _chain(self_loop) == [["oob_store.cu", 27]]
    assert listing.at(0x170).text == "NOP"
    assert len(listing.instructions) == 24


def test_device_assert_v7_operands_with_backticks_and_relocations():
    listing = _parse("13.5/device_assert.sm_90.v7.txt")
    branch = listing.at(0x90)
    assert (branch.predicate, branch.opcode, branch.operands) == ("!P0", "BRA", ("`(.L_x_0)",))
    assert listing.at(0xB0).operands == ("R8", "-RZ", "RZ", "0", "5.9604644775390625e-07")
    assert listing.at(0x190).operands == ("R20", "32@lo((_Z13assert_kernelPKfPfi + .L_x_0@srel))")
    call = listing.at(0x1B0)
    assert (call.base_opcode, call.modifiers, call.operands) == (
        "CALL",
        ("ABS", "NOINC"),
        ("`(__assertfail)",),
    )
    # The SYMBOLS part lists __assertfail with ".type …,@function": not a second function.
    assert listing.other_functions == ()


def test_cutlass_like_v8_store_splits_descriptor_operand():
    store = _parse("13.5/cutlass_like.sm_90.v8.txt").at(2240)
    assert (store.base_opcode, store.modifiers) == ("STG", ("E", "128"))
    assert store.operands == ("desc[UR4][R2.64]", "R4")
    assert len(store.inline_chain) == 9


# --- published output of other versions --------------------------------------------------


def test_vllm_blog_relocated_offsets_and_three_frame_chain():
    listing = _parse("unstated/vllm-blog-index-elementwise.txt")
    assert (listing.function, listing.section) == (None, None)
    assert listing.unparsed == ("...", "...")
    assert [i.offset for i in listing.instructions] == [0x7FF533BB9190 + 16 * n for n in range(5)]
    assert listing.at(0x7FF533BB9190).inline_chain == ()
    load = listing.at(0x7FF533BB91D0)
    assert (load.opcode, load.operands) == ("LDG.E.U8", ("R3", "desc[UR36][R2.64]"))
    assert _chain(load) == [
        ["IndexKernel.cu", 203],
        ["IndexKernel.cu", 118],
        ["IndexKernel.cu", 37],
    ]
    assert listing.at(0x7FF533BB91A0).labels == (".L_x_27840",)
    assert listing.at(0x7FF533BB91B0).operands == ("R2", "P0", "P1", "R22", "UR4", "R2")


def test_vllm_blog_twelve_frame_chain_innermost_first():
    listing = _parse("unstated/vllm-blog-flash-attn-inline-chain.txt")
    store = listing.at(0x7EEBF5E9EB80)
    assert (store.opcode, store.operands) == ("STSM.16.M88.4", ("[R13]", "R4"))
    chain = _chain(store)
    assert len(chain) == 12
    assert chain[0] == ["copy_sm90.hpp", 93]
    assert chain[8] == ["epilogue_fwd.hpp", 265]
    assert chain[-1] == ["device_kernel.h", 122]
    assert listing.at(0x7EEBF5E9EB90).inline_chain == store.inline_chain


def test_numba_gi_listing():
    listing = _parse("unstated/numba-pr9035-gi.txt")
    assert listing.has_line_info
    assert _chain(listing.at(0x0)) == [["1083830147.py", 3]]
    assert _chain(listing.at(0x30)) == [["1083830147.py", 5], ["1083830147.py", 3]]
    assert listing.at(0x30).operands == ("R0", "R0", "c[0x0][0x0]", "R3")


def test_cudajl_header_names_function_without_instructions():
    listing = _parse("unstated/cudajl-pr2247-cublas-header.txt")
    assert listing.function == "_Z15scal_kernel_refI7double2dEv19cublasScalParamsRefIT_T0_E"
    assert listing.section == ".text." + listing.function
    assert (listing.instructions, listing.unparsed) == ((), ("...",))


def test_celeritas_two_functions_keeps_first_names_second():
    listing = _parse("unstated/celeritas-rotate-approx-two-functions.txt")
    assert listing.function == "_Z9my_rsqrtff"
    assert listing.other_functions == ("_Z10rotate_modRKN9celeritas5ArrayIdLj3EEES3_",)
    assert len(listing.instructions) == 32
    assert _chain(listing.at(0x0)) == [["rotate-approx.cu", 5]]
    assert _chain(listing.at(0xE0)) == [["rotate-approx.cu", 8]]
    assert listing.at(0xE0).operands == ("`(__frsqrt_rn)",)
    assert listing.at(0x170).operands == ("R20 0x0",)
    assert listing.at(0x50).labels == (".L_x_22",)
    assert listing.at(0x180).text == "BRA `(.L_x_24)"


def test_celeritas_constant_bank_symbol_operand():
    listing = _parse("unstated/celeritas-rotate-approx-const-operand.txt")
    setp = listing.at(0xCC0)
    assert setp.operands == (
        "P0",
        "PT",
        "R22",
        "c[`(_Z10rotate_modRKN9celeritas5ArrayIdLj3EEES3_.const2.0.8)]",
        "PT",
    )
    assert _chain(setp) == [["rotate-approx.cu", 70]]
    assert _chain(listing.at(0xCB0)) == [["rotate-approx.cu", 66]]


def test_maxwell_dual_issue_braces_and_encodings():
    listing = _parse("unstated/cuobjdump-maxas-issue10-dual-issue.txt")
    assert [i.offset for i in listing.instructions] == [0x48, 0x50, 0x58, 0x68, 0x70, 0x78, 0x88]
    assert listing.at(0x48).text == "MOV32I R7, 0x5"
    assert listing.at(0x50).text == "STG.E [R2], R0"
    assert listing.at(0x68).operands == ("[R2+0x8]", "R7")
    assert listing.at(0x70).operands == ("R5", "RZ", "c[0x0][0x14c]")
    assert listing.at(0x88).text == "EXIT"
    assert listing.unparsed == ()


def test_kepler_cuobjdump_listing():
    listing = _parse("10.2/cuobjdump-celeritas-log2-sm35.txt")
    assert listing.function == "_Z6mylog2Pd"
    assert len(listing.instructions) == 78
    dmul = listing.at(0x60)
    assert (dmul.predicate, dmul.opcode) == ("!P0", "DMUL")
    assert dmul.operands == ("R4", "R4", "1.80143985094819840000e+16")
    assert listing.at(0xB8).operands == ("R6", "R4", "+INF", "R6")
    assert listing.at(0x20).operands == ("R2.CC", "R0", "c[0x0][0x140]", "0x3")
    assert listing.at(0x280).text == "BRA 0x280"
    assert not listing.has_line_info
    assert "\tcode for sm_35" in listing.unparsed


# --- constructed lines (not tool output): syntax seen in older printers ---------------------


def test_scheduling_tokens_comments_and_absolute_values_are_handled():
    # Constructed to exercise the rules; not recorded from a tool.
    text = (
        "        /*0010*/  @!PT LDS.U.32 RZ, [RZ] &wr=0x0 ?trans1 ;  /* a ; comment */\n"
        "        /*0020*/  FADD R0, |R1|, -R2 ?WAIT4_END_GROUP ;\n"
        "        /*0030*/  EXIT &req={0} ?trans5 ;\n"
    )
    listing = parse_sass(text)
    first, second, third = listing.instructions
    assert (first.predicate, first.operands) == ("!PT", ("RZ", "[RZ]"))
    assert second.operands == ("R0", "|R1|", "-R2")
    assert (third.opcode, third.operands) == ("EXIT", ())
    assert listing.unparsed == ()


def test_window_and_at():
    listing = _parse("13.5/oob_store.sm_90.v8.txt")
    assert [i.offset for i in listing.window(0xD0, 2, 1)] == [0xB0, 0xC0, 0xD0, 0xE0]
    assert [i.offset for i in listing.window(0x0, 3, 0)] == [0x0]
    assert [i.offset for i in listing.window(0xD8, 1, 1)] == [0xD0, 0xE0]
    assert listing.at(0xD8) is None
    assert listing.at(0x1000) is None


def test_empty_text():
    assert parse_sass("") == SassListing(None, None, (), (), False)


# --- fuzzing: never raises ---------------------------------------------------------------

_FRAGMENTS = st.sampled_from(
    [
        "        /*00d0*/                   STG.E desc[UR4][R2.64], R7 ;",
        "        /*0070*/               @P0 EXIT ;",
        '\t//## File "a.cuh", line 2 inlined at "b.cu", line 4',
        '\t//## File "b.cu", line 4',
        ".L_x_1:",
        "//--------------------- .text._Z1kv --------------------------",
        "//--------------------- SYMBOLS --------------------------",
        '\t.section\t.text._Z1kv,"ax",@progbits',
        "        .type           _Z1kv,@function",
        "\t\tFunction : _Z1kv",
        "        /*0048*/         {         MOV32I R7, 0x5;      /* 0x010000000057f007 */",
        "        /*0050*/                   STG.E [R2], R0;        }",
        "        /*0060*/ ;",
        "        /*0060*/ { } ,",
        "        /*zz*/ X",
        "/*",
        "@",
        "...",
    ]
)


@given(st.lists(st.one_of(_FRAGMENTS, st.text(max_size=40)), max_size=30))
def test_parse_never_raises_on_mixed_lines(lines):
    listing = parse_sass("\n".join(lines))
    offsets = [i.offset for i in listing.instructions]
    assert offsets == sorted(offsets)
    for instruction in listing.instructions:
        assert listing.at(instruction.offset).offset == instruction.offset
        assert instruction.opcode


@given(st.text())
def test_parse_never_raises_on_any_text(text):
    parse_sass(text)


def test_a_file_name_holding_line_separators_stays_in_its_frame():
    # GIVEN a real listing whose line table names a file with CR, VT and U+2028 in it
    odd = "in\rclude/st\x0bore\u2028.cuh"
    _, text = load_transcript(NVDISASM / "13.5/oob_store.sm_90.v8.txt")
    text = text.replace("include/store.cuh", odd)
    # WHEN it is parsed THEN the frames are those of the clean listing, renamed
    listing = parse_sass(text)
    assert listing.at(0x80).inline_chain == (
        SourceFrame(odd, 10),
        SourceFrame(odd, 16),
        SourceFrame("oob_store.cu", 19),
        SourceFrame("oob_store.cu", 26),
    )
