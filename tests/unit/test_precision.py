"""An address fault reported at an instruction that touches no memory is called imprecise."""

from postmortem.analysis.fault.fault import _precision
from postmortem.cubin.sass import SassInstruction


def instruction(offset, opcode, operands=()):
    text = f"{opcode} {', '.join(operands)}".strip()
    return SassInstruction(offset, None, opcode, tuple(operands), text, (), ())


WINDOW = (
    instruction(0xB0, "LDC", ("R7", "c[0x0][0x21c]")),
    instruction(0xC0, "STG.E", ("desc[UR4][R2.64]", "R7")),
    instruction(0xD0, "IMAD.WIDE", ("R2", "R5", "0x4", "R2")),
)


def test_illegal_address_at_an_arithmetic_instruction_is_imprecise():
    (note,) = _precision(WINDOW[2], WINDOW, 14)
    assert note.code.value == "imprecise-pc"
    assert "IMAD.WIDE" in note.message
    assert "STG.E desc[UR4][R2.64], R7 at /*00c0*/" in note.message


def test_illegal_address_at_a_store_is_precise():
    assert _precision(WINDOW[1], WINDOW, 14) == []


def test_misaligned_address_is_checked_too():
    assert _precision(WINDOW[2], WINDOW, 6)[0].code.value == "imprecise-pc"


def test_an_assert_is_not_a_memory_fault():
    call = instruction(0x1B0, "CALL.ABS.NOINC", ("`(__assertfail)",))
    assert _precision(call, (call,), 12) == []


def test_no_memory_instruction_before_says_so_plainly():
    (note,) = _precision(WINDOW[2], WINDOW[2:], 14)
    assert "nearest" not in note.message
