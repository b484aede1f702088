"""Text output of a hostile dump, end to end: its names are shown escaped, never obeyed.

A dump is bytes anyone could have written. Copies of fixture dumps are edited in place
(each string keeps its length, found by parsing the ELF) so that the device name, the
kernel's mangled name, a source file name of the line table, the generator and the driver's
message hold terminal escapes, carriage returns, backspaces and a newline followed by
`error: forged`. Every text output must show them escaped, one value a line.
"""

from __future__ import annotations

import io
import re
import sys
import types
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from tests.conftest import DUMPS
from tests.tooling import invoke, require_tool, run_on_terminal

KERNEL = b"_Zk\x1b[2J\x1b]0;pwned\x07\r\nerror: forged\tkernel\x08\x7f\xc2\x9b\\x1b"
KERNEL_SHOWN = "_Zk\\x1b[2J\\x1b]0;pwned\\x07\\r\\nerror: forged\\tkernel\\x08\\x7f\\x9b\\\\x1b"
# as long as the "NVIDIA H100 80GB HBM3" and "GH100" they replace
DEVICE = b"\x1b[2J\x1b]0;pwned\x07\nerror:"
DEVICE_SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07\\nerror:"
DEVICE_TYPE = b"G\r\xc2\x9b\x08"  # U+009B is the one-character CSI
DEVICE_TYPE_SHOWN = "G\\r\\x9b\\x08"
SOURCE = b"\x1b]0;t\x07\x1b[2J\t\x08\x7f.cu"  # as long as "hostile_names.cu"
SOURCE_SHOWN = "\\x1b]0;t\\x07\\x1b[2J\\t\\x08\\x7f.cu"
DRIVER = b"\x1b[2J\x1b]0;pwned\x07\r\nerror: forged by the GPU!"
DRIVER_SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07\\r\\nerror: forged by the GPU!"
GENERATOR = b"gen\x1b[1A\x1b[2K\nerror: forged!"
GENERATOR_SHOWN = "gen\\x1b[1A\\x1b[2K\\nerror: forged!"
# A file name may hold controls too (not NUL nor "/").
FILE_NAME = "core\x1b]0;pwned\x07\rerror: forged\n.nvcudmp"
FILE_NAME_SHOWN = "core\\x1b]0;pwned\\x07\\rerror: forged\\n.nvcudmp"

RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # all but the newline
SGR = re.compile(r"\x1b\[[0-9;]*m")


def _overwrite(data: bytearray, start: int, old: bytes, new: bytes) -> None:
    assert len(new) == len(old), (old, new)
    assert bytes(data[start : start + len(old)]) == old
    data[start : start + len(old)] = new


def _strtab_string(data: bytearray, elf: ELFFile, old: bytes, new: bytes) -> None:
    """Replace the string `old` of the dump's `.strtab` by `new`."""
    strtab = elf.get_section_by_name(".strtab")
    at = strtab.data().index(b"\0" + old + b"\0") + 1
    _overwrite(data, strtab["sh_offset"] + at, old, new)


def _cubin_strings(data: bytearray, image, old: bytes, new: bytes, where: str = "") -> int:
    """Replace `old` by `new` in the string tables (or the section `where`) of the cubin in
    the dump's section `image`."""
    cubin = ELFFile(io.BytesIO(image.data()))
    count = 0
    for table in cubin.iter_sections():
        selected = table.name == where if where else table["sh_type"] == "SHT_STRTAB"
        if not selected:
            continue
        start = image["sh_offset"] + table["sh_offset"]
        blob = table.data()
        for found in (m.start() for m in re.finditer(re.escape(old), blob)):
            _overwrite(data, start + found, old, new)
            count += 1
    return count


def _kernel_name(image) -> bytes:
    cubin = ELFFile(io.BytesIO(image.data()))
    symbols = cubin.get_section_by_name(".symtab").iter_symbols()
    return next(s.name for s in symbols if s["st_info"]["type"] == "STT_FUNC").encode()


def hostile_copy(source: Path, target: Path) -> Path:
    """`source` with its device name and type, kernel name, source file name (where the
    line table names `hostile_names.cu`), generator and driver message (where it has them)
    replaced by hostile strings of the same length."""
    data = bytearray(source.read_bytes())
    elf = ELFFile(io.BytesIO(bytes(data)))
    strings = elf.get_section_by_name(".strtab").data()
    _strtab_string(data, elf, b"NVIDIA H100 80GB HBM3", DEVICE)
    _strtab_string(data, elf, b"GH100", DEVICE_TYPE)
    if b"\0postmortem fixture builder\0" in strings:
        _strtab_string(data, elf, b"postmortem fixture builder", GENERATOR)
    driver = re.search(rb"\0(WARP_ILLEGAL_ADDRESS at PC 0x[0-9a-f]+)\0", strings)
    if driver:
        _strtab_string(data, elf, driver[1], DRIVER)
    images = [s for s in elf.iter_sections() if s.name.startswith(".cudbg.relfimg")]
    assert images
    for image in images:
        # The symbol and the section names made of it (.text.<name>, .nv.info.<name>)
        old = _kernel_name(image)
        assert _cubin_strings(data, image, old, KERNEL[: len(old)].ljust(len(old), b"_")) >= 2
        _cubin_strings(data, image, b"hostile_names.cu", SOURCE, ".debug_line")
    assert len(data) == source.stat().st_size
    target.write_bytes(bytes(data))
    return target


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    root = tmp_path / "dumps"
    root.mkdir()
    return hostile_copy(DUMPS / "hostile_names.nvcudmp", root / FILE_NAME)


def postmortem(*args: str | Path) -> types.SimpleNamespace:
    # In this process, to UTF-8 streams; what it wrote comes back as bytes decoded as UTF-8,
    # with no newline translation that would turn a raw CR into a newline, out of sight.
    return invoke(*args)


def assert_safe(text: str, real_errors: int = 0) -> None:
    """No control character but the newline, and no line forged to look like ours."""
    assert not RAW_CONTROL.findall(text), [
        line for line in text.splitlines() if RAW_CONTROL.search(line)
    ]
    forged = [line for line in text.split("\n") if line.startswith(("error:", "hint:"))]
    assert len(forged) == real_errors, forged


def assert_ok(result: types.SimpleNamespace) -> None:
    assert result.returncode == 0, result.stderr
    assert_safe(result.stdout)
    assert_safe(result.stderr)


def test_info_shows_hostile_names_escaped(hostile):
    result = postmortem("info", hostile)
    assert_ok(result)
    assert result.stdout.startswith(f"{hostile.parent}/{FILE_NAME_SHOWN}: CUDA coredump")
    assert f"  0: {DEVICE_SHOWN} ({DEVICE_TYPE_SHOWN}, sm_90)" in result.stdout
    assert f"= {KERNEL_SHOWN}" in result.stdout


def test_analyze_text_shows_hostile_names_escaped(hostile):
    result = postmortem("analyze", "--no-gdb", hostile)
    assert_ok(result)
    # The headline may be folded to the terminal's width: read it back as one line.
    assert f"{FILE_NAME_SHOWN}: Warp Illegal Address (exception 14) in {KERNEL_SHOWN}" in (
        " ".join(result.stdout.split())
    )
    assert f"  device 0: {DEVICE_SHOWN} ({DEVICE_TYPE_SHOWN}, sm_90," in result.stdout
    # the template's own layout is intact
    assert "\n\nprovenance:\n  native reader " in result.stdout


def test_analyze_to_a_text_file_shows_hostile_names_escaped(hostile, tmp_path):
    out = tmp_path / "x.txt"
    result = postmortem("analyze", "--no-gdb", hostile, "-o", out)
    assert_ok(result)
    text = out.read_bytes().decode("utf-8")
    assert_safe(text)
    assert "\x1b" not in text
    assert KERNEL_SHOWN in text and DEVICE_SHOWN in text


def test_analyze_in_color_sends_only_its_own_color_codes(hostile):
    # GIVEN standard output on a terminal (a pseudo-terminal, newlines left as they are)
    command = [sys.executable, "-m", "postmortem", "analyze", "--no-gdb", str(hostile)]
    # WHEN the report is written in color
    status, seen = run_on_terminal(command, raw_newlines=True)
    assert status == 0
    # THEN its color codes are there, and once they are removed nothing raw is left
    text = seen.decode("utf-8")
    assert SGR.search(text)
    assert_safe(SGR.sub("", text))
    assert KERNEL_SHOWN in SGR.sub("", text)


def test_markdown_shows_names_its_own_way(hostile):
    # Markdown escapes for itself (code spans); the text escaping must not apply twice
    result = postmortem("analyze", "--no-gdb", "--format", "md", hostile)
    assert result.returncode == 0, result.stderr
    assert "\\\\x1b" not in result.stdout and "\\x1b[2J" not in result.stdout
    assert not RAW_CONTROL.search(result.stdout)


def test_scan_index_shows_hostile_names_and_file_names_escaped(hostile):
    # GIVEN the hostile dump and, beside it, a truncated one with a hostile name
    broken = hostile.with_name("broken\x1b[2J\nerror: forged.nvcudmp")
    broken.write_bytes(hostile.read_bytes()[:4096])
    # WHEN the folder is scanned
    result = postmortem("scan", "--no-cache", "-j1", hostile.parent)
    # THEN both are listed, escaped, and the error row is part of the index
    assert result.returncode == 4, result.stderr
    assert_safe(result.stdout)
    assert_safe(result.stderr)
    assert f"/{FILE_NAME_SHOWN}\n" in result.stdout
    assert "/broken\\x1b[2J\\nerror: forged.nvcudmp: " in result.stdout
    assert "\\tkernel\\x08\\x7f\\x9b\\\\x1b" in result.stdout  # the signature's kernel


def test_signature_shows_hostile_names_escaped(hostile, tmp_path):
    missing = tmp_path / "gone\x1b]0;t\x07\nerror: forged.nvcudmp"
    result = postmortem("signature", hostile, missing)
    assert result.returncode == 2
    assert_safe(result.stdout)
    assert_safe(result.stderr, real_errors=1)
    assert result.stdout.startswith(f"{hostile.parent}/{FILE_NAME_SHOWN}: signature ")
    assert "  kernel:     forged\\tkernel\\x08\\x7f\\x9b\\\\x1b" in result.stdout
    assert "gone\\x1b]0;t\\x07\\nerror: forged.nvcudmp" in result.stderr


def test_extract_index_shows_hostile_names_escaped(hostile, tmp_path):
    out = tmp_path / "cubins"
    result = postmortem("extract", hostile, "--out", out)
    assert_ok(result)
    index = (out / "index.txt").read_bytes().decode("utf-8")
    assert_safe(index)
    assert f"kernel {KERNEL_SHOWN}" in index
    assert f"kernel {KERNEL_SHOWN}" in result.stdout


def test_an_error_about_a_hostile_file_name_stays_one_line(tmp_path):
    # GIVEN a file that is no dump, named to forge lines of its own
    bad = tmp_path / "bad\x1b[2J\nerror: forged\rhint: run rm -rf.nvcudmp"
    bad.write_bytes(b"hello, not a dump\n")
    # WHEN postmortem reads it
    for command in ("info", "analyze"):
        result = postmortem(command, bad)
        # THEN the one real error names it, escaped
        assert result.returncode == 2
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert lines[0].startswith("error: ") and "bad\\x1b[2J\\nerror: forged\\rhint" in lines[0]
        assert_safe(result.stderr, real_errors=len(lines))


def test_a_source_file_name_from_the_line_table_is_shown_escaped(hostile):
    require_tool("nvdisasm")
    result = postmortem("analyze", "--no-gdb", hostile)
    assert_ok(result)
    assert f"  #2 {SOURCE_SHOWN}:19" in result.stdout
    signature = postmortem("signature", hostile)
    assert_ok(signature)
    assert SOURCE_SHOWN in signature.stdout


def test_the_driver_message_and_generator_are_shown_escaped(tmp_path):
    # GIVEN a dump with a driver message and a generator name (from the metadata section)
    dump = hostile_copy(DUMPS / "sm_fault.nvcudmp", tmp_path / "sm.nvcudmp")
    for args in (("info",), ("analyze", "--no-gdb")):
        # WHEN it is shown as text
        result = postmortem(*args, dump)
        # THEN both are there, escaped
        assert_ok(result)
        assert f"driver says: {DRIVER_SHOWN}" in result.stdout
        assert f"written by {GENERATOR_SHOWN}" in result.stdout
