"""disassemble() with the real nvdisasm on the fixture cubins (no mocking)."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

import pytest

from postmortem.cubin.nvdisasm import build_nvdisasm_argv, disassemble
from postmortem.errors import ToolFailed, ToolNotFound
from tests.tooling import REPO, require_tool

CUBINS = REPO / "fixtures" / "cubins"
INDEX = json.loads((CUBINS / "index.json").read_text())["cubins"]
FAULTS = sorted(name for name, entry in INDEX.items() if entry["fault"])


def _symbol_index(entry, kernel):
    return next(k["symbol_index"] for k in entry["kernels"] if k["name"] == kernel)


@pytest.fixture(scope="module")
def nvdisasm():
    return require_tool("nvdisasm")


@pytest.mark.parametrize("name", FAULTS)
def test_fault_instruction_and_chain_match_index(nvdisasm, name):
    # GIVEN a fixture cubin and its faulting kernel's symbol index
    entry = INDEX[name]
    fault = entry["fault"]
    cubin = (REPO / "fixtures" / entry["path"]).read_bytes()
    # WHEN only that kernel is disassembled
    result = disassemble(cubin, _symbol_index(entry, fault["kernel"]), nvdisasm=nvdisasm)
    # THEN the instruction at the fault offset is the recorded one, with its inline chain
    listing = result.listing
    assert listing.function == fault["kernel"]
    assert listing.other_functions == ()
    assert listing.unparsed == ()
    instruction = listing.at(fault["offset"])
    assert instruction is not None
    assert instruction.text == fault["sass"].removesuffix(" ;")
    assert instruction.opcode == fault["opcode"]
    chain = [[posixpath.basename(f.file), f.line] for f in instruction.inline_chain]
    if entry["lineinfo"]:
        assert listing.has_line_info
        assert chain == fault["expected_chain"]
    else:
        assert not listing.has_line_info
        assert chain == []
    assert result.tool_version
    assert result.argv[1:-1] == (
        "-ndf",
        "-c",
        "-gi",
        "-fun",
        str(_symbol_index(entry, fault["kernel"])),
    )


def test_abi_v7_warning_is_kept_not_an_error(nvdisasm):
    entry = INDEX["oob_store.sm_90.v7"]
    cubin = (REPO / "fixtures" / entry["path"]).read_bytes()
    result = disassemble(cubin, entry["kernels"][0]["symbol_index"], nvdisasm=nvdisasm)
    assert "switching to Old format" in result.stderr
    assert result.listing.instructions


def test_whole_cubin_lists_every_kernel(nvdisasm):
    entry = INDEX["two_kernels.sm_90.v8"]
    result = disassemble((REPO / "fixtures" / entry["path"]).read_bytes(), None, nvdisasm=nvdisasm)
    names = {result.listing.function, *result.listing.other_functions}
    assert names == {k["name"] for k in entry["kernels"]}
    assert "-fun" not in result.argv


def test_corrupt_cubin_raises_tool_failed_in_one_line(nvdisasm):
    cubin = (CUBINS / "oob_store.sm_90.v8.cubin").read_bytes()[:3000]
    with pytest.raises(ToolFailed) as caught:
        disassemble(cubin, 10, nvdisasm=nvdisasm)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("nvdisasm exited with 1: ")
    assert "invalid ELF file" in message
    assert "<cubin>" in message


def test_unknown_symbol_index_raises_tool_failed(nvdisasm):
    cubin = (CUBINS / "oob_store.sm_90.v8.cubin").read_bytes()
    with pytest.raises(ToolFailed, match="No symbol with index 99"):
        disassemble(cubin, 99, nvdisasm=nvdisasm)


def test_symbol_that_is_not_a_function_raises_tool_failed(nvdisasm):
    # nvdisasm 13.5 exits 0 and prints no code for a non-function symbol.
    cubin = (CUBINS / "oob_store.sm_90.v8.cubin").read_bytes()
    with pytest.raises(ToolFailed, match="names no function"):
        disassemble(cubin, 1, nvdisasm=nvdisasm)


def test_missing_nvdisasm_raises_tool_not_found_with_hint(tmp_path):
    bogus = tmp_path / "no-such-nvdisasm"
    with pytest.raises(ToolNotFound) as caught:
        disassemble(b"\x7fELF", 1, nvdisasm=bogus)
    assert str(bogus) in str(caught.value)
    assert caught.value.hint


def test_build_argv_is_pure_and_orders_flags():
    argv = build_nvdisasm_argv(Path("/opt/nvdisasm"), Path("k.cubin"), 7)
    assert argv == ["/opt/nvdisasm", "-ndf", "-c", "-gi", "-fun", "7", "k.cubin"]
    assert build_nvdisasm_argv(Path("nvdisasm"), Path("k.cubin"), None)[-2:] == ["-gi", "k.cubin"]
    with pytest.raises(ValueError):
        build_nvdisasm_argv(Path("nvdisasm"), Path("k.cubin"), -1)
