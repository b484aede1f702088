"""Disassemblies kept: one nvdisasm run per (cubin, function, nvdisasm), shared on disk by a
scan's workers and by one `analyze` with the next."""

from __future__ import annotations

import json

import pytest

from postmortem.cubin.disasm_files import DisassemblyFiles
from postmortem.cubin.nvdisasm import disassemble
from tests.tooling import DUMPS, REPO, invoke, require_tool

CUBINS = REPO / "fixtures" / "cubins"
ENTRY = json.loads((CUBINS / "index.json").read_text())["cubins"]["oob_store.sm_90.v8"]


@pytest.fixture
def store_dir(tmp_path):
    return tmp_path / "disasm"


def _disassemble(store: DisassemblyFiles | None = None):
    """The first kernel of the fixture cubin, disassembled with `store`."""
    cubin = (REPO / "fixtures" / ENTRY["path"]).read_bytes()
    symbol = ENTRY["kernels"][0]["symbol_index"]
    return disassemble(cubin, symbol, nvdisasm=require_tool("nvdisasm"), store=store)


def test_a_second_process_finds_the_disassembly_on_disk(store_dir):
    # GIVEN one worker's store that disassembled a kernel
    store = DisassemblyFiles(store_dir)
    first = _disassemble(store)
    assert first.seconds > 0 and len(list(store_dir.glob("*.json"))) == 1
    # WHEN another worker (a fresh store on the same directory) needs the same kernel
    second = _disassemble(DisassemblyFiles(store_dir))
    # THEN it parses the stored text instead of running nvdisasm
    assert second.seconds == 0.0
    assert second.listing == first.listing
    assert second.tool_version == first.tool_version
    # and without a store nvdisasm runs again
    assert _disassemble().seconds > 0


def test_a_store_without_a_directory_remembers_in_memory(store_dir):
    store = DisassemblyFiles(None)
    first = _disassemble(store)
    again = _disassemble(store)
    assert again.listing is first.listing and again.seconds == 0.0 < first.seconds
    assert not store_dir.exists()


def test_a_kept_listing_that_is_not_ours_is_not_taken(store_dir):
    first = _disassemble(DisassemblyFiles(store_dir))
    # GIVEN the kept file damaged (cut short)
    (kept,) = store_dir.glob("*.json")
    kept.write_bytes(kept.read_bytes()[:100])
    # WHEN a fresh process needs the listing
    again = _disassemble(DisassemblyFiles(store_dir))
    # THEN nvdisasm runs again (no error, no listing from the damaged file), and keeps it anew
    assert again.seconds > 0 and again.listing == first.listing
    assert DisassemblyFiles(store_dir).get(kept.stem) is not None


def test_the_folder_keeps_at_most_its_limit_the_oldest_going_first(store_dir, monkeypatch):
    import os

    from postmortem.cubin import disasm_files

    monkeypatch.setattr(disasm_files, "FOLDER_MAX_FILES", 3)
    store_dir.mkdir()
    for number in range(4):  # four older listings, the first the oldest
        (store_dir / f"old{number}.json").write_text("{}")
        os.utime(store_dir / f"old{number}.json", (1000 + number, 1000 + number))
    _disassemble(DisassemblyFiles(store_dir))
    names = sorted(p.name for p in store_dir.glob("*.json"))
    assert len(names) == 3 and "old0.json" not in names and "old1.json" not in names
    assert any(not n.startswith("old") for n in names)


def _nvdisasm_use(report: str) -> dict:
    (use,) = [t for t in json.loads(report)["provenance"] if t["source"] == "nvdisasm"]
    return use


def test_analyze_keeps_its_listings_for_the_next_analyze(tmp_path):
    # GIVEN an nvdisasm of the test's own (a link: the session's memo of runs does not apply)
    link = tmp_path / "bin" / "nvdisasm"
    link.parent.mkdir()
    link.symlink_to(require_tool("nvdisasm"))
    cache = tmp_path / "cache"
    args = (
        "analyze",
        DUMPS / "oob_store.nvcudmp",
        "--no-gdb",
        "--nvdisasm",
        link,
        "--format",
        "json",
    )
    # WHEN the dump is analyzed twice, then once more with --no-cache
    first, second = (invoke(*args, env={"XDG_CACHE_HOME": str(cache)}) for _ in range(2))
    third = invoke(*args, "--no-cache", env={"XDG_CACHE_HOME": str(tmp_path / "other")})
    # THEN the first ran nvdisasm and kept its listing, the second read it, and said so by
    # a run of no time; --no-cache ran it and kept nothing
    assert first.returncode == second.returncode == third.returncode == 0
    assert len(list((cache / "postmortem" / "disassembly").glob("*.json"))) == 1
    assert _nvdisasm_use(first.stdout)["seconds"] > 0
    assert _nvdisasm_use(second.stdout)["seconds"] == 0
    assert _nvdisasm_use(third.stdout)["seconds"] > 0
    assert not (tmp_path / "other" / "postmortem" / "disassembly").exists()
    sites = [json.loads(r.stdout)["sites"] for r in (first, second, third)]
    assert sites[0] == sites[1] == sites[2]
