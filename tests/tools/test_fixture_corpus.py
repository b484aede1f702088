"""The fixture corpus itself: complete, reproducible, and read the same by us and cuobjdump."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from postmortem.cubin.inspect import summarize_cubin
from tests.conftest import FIXTURES
from tests.tooling import require_tool

sys.path.insert(0, str(FIXTURES / "builder"))
import markers  # noqa: E402

INDEX = json.loads((FIXTURES / "cubins" / "index.json").read_text())["cubins"]
SOURCES = sorted((FIXTURES / "cu").glob("*.cu"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_every_source_has_a_v7_and_a_v8_cubin(source):
    for abi in (7, 8):
        entry = INDEX[f"{source.stem}.sm_90.v{abi}"]
        assert (FIXTURES / entry["path"]).is_file()
        assert entry["abi_version"] == abi


def test_the_no_lineinfo_build_exists_for_both_abis():
    assert {"oob_store_nolineinfo.sm_90.v7", "oob_store_nolineinfo.sm_90.v8"} <= INDEX.keys()
    assert not INDEX["oob_store_nolineinfo.sm_90.v8"]["lineinfo"]


@pytest.mark.parametrize("name", sorted(k for k, v in INDEX.items() if v["fault"]))
def test_recorded_truth_chain_is_the_one_the_source_markers_give(name):
    entry = INDEX[name]
    chain = markers.expected_chain(FIXTURES / entry["source"])
    assert [list(frame) for frame in chain] == entry["fault"]["expected_chain"]


def test_planted_chains_are_as_deep_as_promised():
    assert len(INDEX["oob_store.sm_90.v8"]["fault"]["expected_chain"]) >= 3
    cutlass = INDEX["cutlass_like.sm_90.v8"]["fault"]["expected_chain"]
    assert len(cutlass) >= 8
    assert len({file for file, _ in cutlass}) >= 3


@pytest.mark.slow
def test_cubins_rebuild_byte_identical_from_the_sources():
    require_tool("nvdisasm")
    result = subprocess.run(
        [sys.executable, str(FIXTURES / "builder" / "build_cubins.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


_SECTION_ROW = re.compile(
    r"^\s*([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+[0-9a-f]+\s+\S+\s+([0-9a-f]+)"
    r"\s+[0-9a-f]+\s+[0-9a-f]+\s+(\S+)$"
)


@pytest.mark.parametrize("name", sorted(INDEX))
def test_inspector_agrees_with_cuobjdump_on_code_sections(name):
    cuobjdump = require_tool("cuobjdump")
    path = FIXTURES / INDEX[name]["path"]
    text = subprocess.run(
        [str(cuobjdump), "-elf", str(path)], capture_output=True, text=True, check=True
    ).stdout
    header = re.search(r"(?i)abi=(\d+), sm=(\d+)", text)
    assert header is not None
    expected = set()
    for line in text.splitlines():
        row = _SECTION_ROW.match(line)
        if row and int(row[4], 16) & 0x4:  # SHF_EXECINSTR
            expected.add((int(row[1], 16), int(row[3], 16), row[5]))
    data = path.read_bytes()
    summary = summarize_cubin(data, 0, len(data))
    assert {(s.index, s.size_bytes, s.name) for s in summary.code_sections} == expected
    assert (summary.abi_version, summary.sm_arch) == (int(header[1]), int(header[2]))
    kernels = {k["name"]: k["symbol_index"] for k in INDEX[name]["kernels"]}
    assert {s.function: s.symbol_index for s in summary.code_sections} == kernels
    entries = {
        int(m[1], 16)
        for m in re.finditer(r"^\s*(0x[0-9a-f]+|\d+)\s.*\bFUNC\b.*\bENTRY\b", text, re.M)
    }
    assert {f.symbol_index for f in summary.kernels} == entries
