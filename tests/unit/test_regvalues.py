"""What a register holds before an instruction, read from the code alone: on the recorded
nvdisasm listing of our assert kernel (fixtures/transcripts/nvdisasm/13.5) and on listings
written in nvdisasm's form to give the shapes no fixture has (two paths into a call)."""

from __future__ import annotations

from postmortem.cubin.cfg import ControlFlowGraph
from postmortem.cubin.regvalues import BankWord, Immediate, SymbolWord, Unknown, value_before
from postmortem.cubin.sass import parse_sass
from tests.conftest import FIXTURES

TRANSCRIPTS = FIXTURES / "transcripts" / "nvdisasm" / "13.5"


def graph_of(name: str) -> ControlFlowGraph:
    text = (TRANSCRIPTS / f"{name}.txt").read_text()
    return ControlFlowGraph(
        parse_sass("\n".join(line for line in text.splitlines() if not line.startswith("# ")))
    )


def call_of(graph: ControlFlowGraph) -> int:
    return next(i.offset for i in graph.listing.instructions if i.base_opcode == "CALL")


def test_the_arguments_of_ptxas_13_s_assert_call():
    graph = graph_of("device_assert.sm_90.v8")
    call = call_of(graph)
    # the line is an immediate, the strings bank-4 words (a uniform register moved into R4),
    # charSize a half-precision pair (HFMA2.MMA …, 0, 5.96e-08 is 1)
    assert isinstance(line := value_before(graph, call, "R8"), Immediate) and line.value == 10
    low, high = value_before(graph, call, "R4"), value_before(graph, call, "R5")
    assert isinstance(low, BankWord) and isinstance(high, BankWord)
    assert (low.bank, high.offset - low.offset) == (4, 4)
    assert value_before(graph, call, "R12") == Immediate(1, value_before(graph, call, "R12").at)
    # the call's target: LDC.64 R2, c[0x4][R0] with R0 = 0
    target = value_before(graph, call, "R2")
    assert isinstance(target, BankWord) and (target.bank, target.offset) == (4, 0)


def test_the_arguments_of_ptxas_11_s_assert_call():
    graph = graph_of("device_assert.sm_90.v7")
    call = call_of(graph)
    low, high = value_before(graph, call, "R4"), value_before(graph, call, "R5")
    assert low == SymbolWord("$str", False, low.at) and high == SymbolWord("$str", True, high.at)


def listing(body: str) -> ControlFlowGraph:
    head = '\t.section\t.text.k,"ax",@progbits\nk:\n.text.k:\n'
    return ControlFlowGraph(parse_sass(head + body))


TWO_PATHS = """
        /*0000*/                   ISETP.GE.AND P0, PT, R0, 0x4, PT ;
        /*0010*/               @P0 BRA `(.L_x_1) ;
        /*0020*/                   IMAD.MOV.U32 R8, RZ, RZ, 0x{a} ;
        /*0030*/                   BRA `(.L_x_2) ;
.L_x_1:
        /*0040*/                   IMAD.MOV.U32 R8, RZ, RZ, 0x{b} ;
.L_x_2:
        /*0050*/                   @P1 MOV R9, 0x7 ;
        /*0060*/                   IADD3 R10, R8, 0x1, RZ ;
        /*0070*/                   CALL.ABS.NOINC R2 ;
        /*0080*/                   EXIT ;
"""


def test_a_value_two_paths_set_alike_is_known_and_one_they_set_apart_is_not():
    same = listing(TWO_PATHS.format(a="14", b="14"))
    assert value_before(same, 0x70, "R8") == Immediate(0x14, 0x20)
    apart = listing(TWO_PATHS.format(a="14", b="15"))
    found = value_before(apart, 0x70, "R8")
    assert isinstance(found, Unknown) and "different values on the paths" in found.reason


def test_a_guarded_computed_or_unset_register_is_unknown_and_says_why():
    graph = listing(TWO_PATHS.format(a="14", b="14"))
    assert "under a guard" in value_before(graph, 0x70, "R9").reason
    assert "computed (IADD3 R10" in value_before(graph, 0x70, "R10").reason
    assert "not set in this function" in value_before(graph, 0x70, "R11").reason
    assert value_before(graph, 0x70, "RZ") == Immediate(0, 0x70)
