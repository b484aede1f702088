"""`postmortem extract`: the cubins come out byte for byte, named and indexed."""

from __future__ import annotations

import json
import subprocess
import sys

from postmortem import open_coredump
from postmortem.cubin.inspect import summarize_cubin
from postmortem.extract import extract_cubins
from tests.conftest import FIXTURES, truth_of

DUMPS = FIXTURES / "dumps"


def test_unrelocated_image_is_the_compiled_cubin(tmp_path):
    # GIVEN a dump that kept the non-relocated image
    with open_coredump(DUMPS / "oob_store_memory.nvcudmp") as core:
        written = extract_cubins(core, tmp_path)
    unrelocated = [e for e in written if not e.relocated]
    assert len(unrelocated) == 1
    original = (FIXTURES / "cubins" / "oob_store.sm_90.v7.cubin").read_bytes()
    assert (tmp_path / unrelocated[0].file).read_bytes() == original


def test_relocated_image_holds_the_fault_at_its_load_address(tmp_path):
    truth = truth_of(DUMPS / "two_modules.nvcudmp")["fault"]
    with open_coredump(DUMPS / "two_modules.nvcudmp") as core:
        written = extract_cubins(core, tmp_path)
    assert len(written) == 2
    faulted = [(e, f) for e in written for f in e.functions if f.faulted]
    assert [(f.name, e.module_handle) for e, f in faulted] == [
        (truth["kernel"], truth["module_handle"])
    ]
    entry, function = faulted[0]
    data = (tmp_path / entry.file).read_bytes()
    code = summarize_cubin(data).find_code(truth["error_pc"])
    assert code is not None and code.function == truth["kernel"]
    assert "consumer" in entry.file and entry.file.endswith(".relocated.cubin")


def test_index_files_list_every_kernel(tmp_path):
    with open_coredump(DUMPS / "two_modules.nvcudmp") as core:
        extract_cubins(core, tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    kernels = sorted(f["demangled"] for e in index for f in e["functions"] if f["is_kernel"])
    assert kernels == [
        "consumer(float const*, float*, int)",
        "producer(float*, int)",
        "reduce_kernel(float const*, float*, int)",
    ]
    assert "<-- faulted" in (tmp_path / "index.txt").read_text()


def test_existing_files_are_not_overwritten(tmp_path):
    def run(*extra):
        return subprocess.run(
            [sys.executable, "-m", "postmortem", "extract", str(DUMPS / "oob_store.nvcudmp"),
             "--out", str(tmp_path), *extra],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    assert run().returncode == 0
    (tmp_path / "index.txt").write_text("mine")
    second = run()
    assert second.returncode == 2 and "exists already" in second.stderr
    assert (tmp_path / "index.txt").read_text() == "mine"
    assert run("--force").returncode == 0


def test_a_root_level_image_is_extracted_and_indexed_with_its_unknowns_shown(tmp_path):
    # GIVEN a dump whose relocated image sits at the root (no module row names it)
    dump = FIXTURES / "foreign" / "root_images.nvcudmp"
    # WHEN it is extracted from the command line
    result = subprocess.run(
        [sys.executable, "-m", "postmortem", "extract", str(dump), "--out", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    # THEN the cubin is written and the index says device and module are unknown
    assert result.returncode == 0, result.stderr
    assert "device ?, module ?" in result.stdout
    assert "<-- faulted" in (tmp_path / "index.txt").read_text()
    [entry] = json.loads((tmp_path / "index.json").read_text())
    assert entry["module_handle"] is None and entry["device_index"] is None
