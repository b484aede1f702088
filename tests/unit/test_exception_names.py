"""Exception names as cuda-gdb and LLDB print them: the words users search for."""

from __future__ import annotations

import pytest

from postmortem.exceptions import describe_exception


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (14, "Warp Illegal Address"),
        (29, "Warp Invalid Constant Address"),
        (30, "Warp MMU Fault"),
        (31, "Warp Barrier Arrival Mismatch"),
        (32, "Cluster Shared Memory Issue"),
        (33, "Warp API Stack Error"),
        (34, "Warp Block Not Present"),
        (35, "Warp User Stack Overflow"),
        (0xFFFFFFFF, "Device Unknown Exception"),
    ],
)
def test_each_code_is_named_as_the_debuggers_print_it(code, name):
    assert describe_exception(code) == name


def test_a_code_no_debugger_names_keeps_their_words_and_its_number():
    assert describe_exception(99) == "Device Unknown Exception (code 99, 0x63)"
