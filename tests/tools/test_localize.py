"""Fault localization against the truth of the sources.

The expected instruction and inline chain come from fixtures/cubins/index.json, whose
chains are derived from the `// @pm` markers in fixtures/cu (fixtures/builder/markers.py),
never from this tool's output. Quoted source lines must be the marked lines themselves.
Every test runs on both corpora (`corpus`: relocated images with only code addressed, and
with every SHF_ALLOC section addressed, which nvdisasm refuses as dumped).
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

import pytest

from postmortem import open_coredump
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from postmortem.analysis.fault.source import PathMap, SourcePaths
from tests.conftest import FIXTURES, dump_paths, truth_of
from tests.tooling import require_tool

# Dumps with a planted site (a dump around a corpus cubin has a fault at a chosen PC, but no
# marker-checked instruction to compare with).
PLANTED = [p for p in dump_paths() if (truth_of(p)["fault"] or {}).get("sass") is not None]
INDEX = json.loads((FIXTURES / "cubins" / "index.json").read_text())["cubins"]
SOURCES = FIXTURES / "cu"


def _chain(site) -> list[list[object]]:
    return [[PurePosixPath(frame.file).name, frame.line] for frame in site.chain]


@pytest.fixture(scope="module")
def nvdisasm():
    return require_tool("nvdisasm")


@pytest.mark.parametrize("path", PLANTED, ids=lambda p: p.name)
def test_the_planted_instruction_and_chain_are_found(path: Path, corpus: Path, nvdisasm):
    truth = truth_of(path)["fault"]
    with open_coredump(corpus / path.name) as core:
        sites = localize(core, LocalizeOptions(nvdisasm=nvdisasm))
    # One site per device with faulting lanes (the same kernel loads at other addresses).
    devices = {f["device"] for f in truth_of(path)["faulting_lanes"]} or {truth["device"]}
    assert len(sites) == len(devices)
    site = next(s for s in sites if s.faults[0].device_index == truth["device"])
    assert site.function is not None
    assert (site.function.name, site.offset) == (truth["kernel"], truth["offset"])
    assert site.instruction is not None
    assert site.instruction.opcode == INDEX[truth["cubin"]]["fault"]["opcode"]
    assert site.instruction.text.rstrip(" ;") == truth["sass"].rstrip(" ;")
    if truth["lineinfo"]:
        assert site.has_line_info
        assert _chain(site) == truth["expected_chain"]
    else:
        assert site.has_line_info is False
        assert site.chain == ()
        # Compiled without -lineinfo, or compiled with it and stripped: the tkinfo note of an
        # ABI-8 cubin tells which; an ABI-7 cubin records no options.
        cubin = INDEX[truth["cubin"]]
        removed = cubin["compiled_with_lineinfo"] and cubin["abi_version"] == 8
        expected = "line-info-removed" if removed else "no-line-info"
        assert expected in {d.code.value for d in site.diagnoses}


@pytest.mark.parametrize("path", PLANTED, ids=lambda p: p.name)
def test_the_window_surrounds_the_fault(path: Path, corpus: Path, nvdisasm):
    with open_coredump(corpus / path.name) as core:
        site, *_ = localize(core, LocalizeOptions(window=3, nvdisasm=nvdisasm))
    offsets = [i.offset for i in site.window]
    assert site.offset in offsets
    assert offsets == sorted(offsets)
    position = offsets.index(site.offset)
    assert position <= 3 and len(offsets) - position - 1 <= 3


def test_quoted_lines_are_the_marked_lines_of_the_source(corpus: Path, nvdisasm):
    with open_coredump(corpus / "cutlass_like.nvcudmp") as core:
        (site,) = localize(
            core, LocalizeOptions(sources=SourcePaths((SOURCES,)), nvdisasm=nvdisasm)
        )
    assert len(site.quoted) >= 8
    assert all(q.text is not None for q in site.quoted), site.quoted
    assert re.search(r"//\s*@pm fault", site.quoted[0].text or "")
    for depth, quoted in enumerate(site.quoted[1:], start=1):
        assert re.search(rf"//\s*@pm frame {depth}\b", quoted.text or ""), quoted


def test_build_paths_are_mapped_to_the_triage_machine(corpus: Path, nvdisasm):
    # GIVEN line-table paths relative to the build directory, mapped by prefix
    maps = (
        PathMap.parse(f"include/={SOURCES}/include/"),
        PathMap.parse(f"oob_store.cu={SOURCES}/oob_store.cu"),
    )
    with open_coredump(corpus / "oob_store.nvcudmp") as core:
        (site,) = localize(core, LocalizeOptions(sources=SourcePaths(maps=maps), nvdisasm=nvdisasm))
    # THEN every frame is found without any --source-dir
    assert [q.reason for q in site.quoted] == [None] * len(site.quoted)


def test_missing_sources_are_said_not_guessed(corpus: Path, nvdisasm):
    with open_coredump(corpus / "oob_store.nvcudmp") as core:
        (site,) = localize(
            core, LocalizeOptions(sources=SourcePaths((Path("/nonexistent"),)), nvdisasm=nvdisasm)
        )
    assert {q.reason for q in site.quoted} == {"file not found"}


def test_without_nvdisasm_the_native_facts_stand(corpus: Path):
    with open_coredump(corpus / "oob_store.nvcudmp") as core:
        (site,) = localize(core, LocalizeOptions(nvdisasm="/nonexistent/nvdisasm"))
    assert (
        site.function is not None
        and site.offset == truth_of(FIXTURES / "dumps" / "oob_store.nvcudmp")["fault"]["offset"]
    )
    assert site.instruction is None
    assert "nvdisasm-missing" in {d.code.value for d in site.diagnoses}


def test_no_disasm_runs_no_tool(corpus: Path):
    with open_coredump(corpus / "oob_store.nvcudmp") as core:
        (site,) = localize(core, LocalizeOptions(nvdisasm=False))
    assert site.disassembly is None and site.function is not None
    assert site.diagnoses == ()


def test_a_pc_outside_every_module_is_diagnosed(tmp_path, corpus: Path, nvdisasm):
    # GIVEN the oob_store dump with its error PC moved outside every module
    dump = corpus / "oob_store.nvcudmp"
    pc = truth_of(dump)["fault"]["error_pc"]
    data = dump.read_bytes().replace(pc.to_bytes(8, "little"), (0x1000).to_bytes(8, "little"))
    moved = tmp_path / "moved.nvcudmp"
    moved.write_bytes(data)
    with open_coredump(moved) as core:
        (site,) = localize(core, LocalizeOptions(nvdisasm=nvdisasm))
    assert site.function is None
    assert "pc-outside-modules" in {d.code.value for d in site.diagnoses}


def test_a_hang_dump_has_no_fault_site(corpus: Path):
    with open_coredump(corpus / "hang_barrier.nvcudmp") as core:
        assert localize(core, LocalizeOptions(nvdisasm=False)) == ()
