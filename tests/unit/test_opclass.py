"""Which opcodes touch memory, and which exceptions only a memory access raises."""

from __future__ import annotations

import pytest

from postmortem.analysis.fault.opclass import is_memory_access
from postmortem.exceptions import is_memory_exception


@pytest.mark.parametrize(
    ("base_opcode", "memory"),
    [
        ("STG", True), ("LDS", True), ("ATOMG", True), ("RED", True), ("UTMALDG", True),
        ("LDGSTS", True), ("ULDC", True), ("STTM", True),
        ("IMAD", False), ("BAR", False), ("CALL", False), ("EXIT", False), ("BRA", False),
        ("STG.E", False),  # a full opcode is not a base opcode
    ],
)  # fmt: skip
def test_is_memory_access_knows_loads_stores_atomics_and_copies(base_opcode, memory):
    assert is_memory_access(base_opcode) is memory


def test_memory_exceptions_are_the_address_errors_not_assert_or_illegal_instruction():
    assert all(is_memory_exception(code) for code in (1, 5, 6, 14, 17, 29, 30))
    assert not any(is_memory_exception(code) for code in (0, 4, 8, 12, 19, None, 99))
