"""The scan's disassembly store: one nvdisasm run per (cubin, function), shared on disk."""

from __future__ import annotations

import json

import pytest

from postmortem.cubin.nvdisasm import disassemble
from postmortem.scan.work.disasm_store import ScanDisassemblyStore
from tests.tooling import REPO, require_tool

CUBINS = REPO / "fixtures" / "cubins"
ENTRY = json.loads((CUBINS / "index.json").read_text())["cubins"]["oob_store.sm_90.v8"]


@pytest.fixture
def store_dir(tmp_path):
    return tmp_path / "disasm"


def test_a_second_process_finds_the_disassembly_on_disk(store_dir):
    nvdisasm = require_tool("nvdisasm")
    cubin = (REPO / "fixtures" / ENTRY["path"]).read_bytes()
    symbol = ENTRY["kernels"][0]["symbol_index"]
    # GIVEN one worker's store that disassembled a kernel
    store = ScanDisassemblyStore(store_dir)
    first = disassemble(cubin, symbol, nvdisasm=nvdisasm, store=store)
    assert first.seconds > 0 and len(list(store_dir.glob("*.json"))) == 1
    # WHEN another worker (a fresh store on the same directory) needs the same kernel
    second = disassemble(cubin, symbol, nvdisasm=nvdisasm, store=ScanDisassemblyStore(store_dir))
    # THEN it parses the stored text instead of running nvdisasm
    assert second.seconds == 0.0
    assert second.listing == first.listing
    assert second.tool_version == first.tool_version
    # and without a store nvdisasm runs again
    assert disassemble(cubin, symbol, nvdisasm=nvdisasm).seconds > 0


def test_a_store_without_a_directory_remembers_in_memory(store_dir):
    nvdisasm = require_tool("nvdisasm")
    cubin = (REPO / "fixtures" / ENTRY["path"]).read_bytes()
    symbol = ENTRY["kernels"][0]["symbol_index"]
    store = ScanDisassemblyStore(None)
    first = disassemble(cubin, symbol, nvdisasm=nvdisasm, store=store)
    again = disassemble(cubin, symbol, nvdisasm=nvdisasm, store=store)
    assert again.listing is first.listing and again.seconds == 0.0 < first.seconds
    assert not store_dir.exists()
