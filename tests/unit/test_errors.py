"""Error messages: one line, naming the file, the place and the numbers."""

from pathlib import Path

import pytest

from postmortem.errors import (
    CorruptSection,
    NotACudaCoredump,
    NotAnElfFile,
    TruncatedDump,
    UnreadableFile,
)

CASES = [
    TruncatedDump(Path("a.nvcudmp"), 4096, 8192, "section .cudbg.wptbl.dev0.sm3.cta1"),
    CorruptSection(Path("a.nvcudmp"), ".cudbg.lntbl", "sh_entsize", 0, "too small"),
    NotAnElfFile(Path("a.txt"), "no ELF magic"),
    NotACudaCoredump(Path("core.123"), "e_machine", 62, 190),
    UnreadableFile(Path("missing"), "No such file or directory"),
]


@pytest.mark.parametrize("error", CASES, ids=lambda e: type(e).__name__)
def test_message_is_one_line_naming_the_file(error):
    text = str(error)
    assert "\n" not in text
    assert str(error.path) in text


def test_truncation_message_gives_offset_and_need():
    text = str(CASES[0])
    assert text == (
        "a.nvcudmp: truncated at byte 4096 (section .cudbg.wptbl.dev0.sm3.cta1 needs 8192 more)"
    )


def test_host_core_file_gets_a_hint():
    assert "host" in (CASES[3].hint or "")
