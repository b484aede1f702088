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


def _every_module():
    import importlib
    import pkgutil

    import postmortem

    for info in pkgutil.walk_packages(postmortem.__path__, "postmortem."):
        if info.name != "postmortem.__main__":  # running it is what importing it does
            yield importlib.import_module(info.name)


def test_every_error_class_lives_in_errors_py_and_carries_its_exit_status():
    # GIVEN every module of the package imported
    modules = list(_every_module())
    # WHEN the exception classes they define are listed
    defined = {
        (module.__name__, name)
        for module in modules
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, BaseException)
        and value.__module__ == module.__name__ and not name.startswith("_")
    }  # fmt: skip
    # THEN they are all in postmortem.errors, all PostmortemErrors with a status
    assert {module for module, _ in defined} == {"postmortem.errors"}
    from postmortem import errors

    for _, name in defined:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.PostmortemError), name
        assert isinstance(cls.exit_status, errors.ExitStatus), name


def test_tool_errors_exit_3_and_input_errors_2():
    from postmortem.errors import ExitStatus, OutputExists, ToolFailed, ToolNotFound

    assert ToolNotFound("nvdisasm", (), "").exit_status == ExitStatus.TOOL == 3
    assert ToolFailed("nvdisasm", (), 1, "x").exit_status == ExitStatus.TOOL
    assert OutputExists(Path("x"), 1).exit_status == ExitStatus.BAD_INPUT == 2
    assert CASES[0].exit_status == ExitStatus.BAD_INPUT
