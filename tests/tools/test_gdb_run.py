"""The real cuda-gdb on the fixture dumps (skipped without cuda-gdb; failing under CI=true)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from postmortem.errors import ToolFailed, ToolNotFound, UnreadableFile
from postmortem.gdb import (
    DEFAULT_COMMANDS,
    Parsed,
    parse_backtrace,
    parse_exception_banner,
    parse_print_int,
    run_cuda_gdb,
)
from postmortem.gdb.banner import parse_focus
from tests.tooling import DUMPS, invoke, require_files, require_tool


@pytest.fixture(scope="module")
def cuda_gdb():
    return require_tool("cuda-gdb")


def dump(name):
    path = DUMPS / f"{name}.nvcudmp"
    require_files([path] if path.is_file() else [], f"fixture dump {path.name}")
    return path, json.loads((DUMPS / f"{name}.truth.json").read_text())


def coords(focus):
    return (focus.block, focus.thread, focus.device, focus.sm, focus.warp, focus.lane)


def checkable_dumps():
    names = sorted(p.name.removesuffix(".truth.json") for p in DUMPS.glob("*.truth.json"))
    return [
        n for n in names
        if json.loads((DUMPS / f"{n}.truth.json").read_text())["cuda_gdb_checkable"]["value"]
    ]  # fmt: skip


def test_session_has_every_command_and_the_banner(cuda_gdb):
    # GIVEN a dump cuda-gdb 11.8 can read
    core, truth = dump("oob_store")
    # WHEN cuda-gdb runs the default commands on it
    session = run_cuda_gdb(core, cuda_gdb=cuda_gdb, timeout=120)
    # THEN every command ran to its end marker, in order, and the banner names the fault
    assert [o.command for o in session.outputs] == list(DEFAULT_COMMANDS)
    assert all(o.complete for o in session.outputs)
    assert session.version is not None
    banner = parse_exception_banner(session.banner)
    assert isinstance(banner, Parsed)
    assert banner.value.error_pc == truth["cuda_gdb_expect"]["error_pc"]
    assert parse_print_int(session.output("p/x $errorpc")) == Parsed(
        truth["cuda_gdb_expect"]["error_pc"], session.output("p/x $errorpc")
    )


def test_unwinder_fault_is_retried_and_bt_then_works(cuda_gdb):
    core, truth = dump("oob_store")
    session = run_cuda_gdb(core, ["bt"], cuda_gdb=cuda_gdb, timeout=120)
    codes = {d.code.value for d in session.diagnoses}
    assert session.retried == ("python-unwinder-fault" in codes)
    frames = parse_backtrace(session.output("bt"))
    assert isinstance(frames, Parsed), session.output("bt")
    assert frames.value[0].pc == truth["fault"]["error_pc"]


@pytest.mark.parametrize("name", checkable_dumps())
def test_banner_agrees_with_truth_on_every_checkable_dump(cuda_gdb, name):
    core, truth = dump(name)
    session = run_cuda_gdb(core, ["p/x $errorpc"], cuda_gdb=cuda_gdb, timeout=120)
    expect = truth.get("cuda_gdb_expect")
    banner = parse_exception_banner(session.banner)
    assert isinstance(banner, Parsed), session.banner
    if expect is None:
        assert banner.value.error_pc is None and banner.value.focus is not None
        return
    assert banner.value.error_pc == expect["error_pc"]
    wanted, got = parse_focus(expect["focus"]), banner.value.focus
    assert coords(got) == coords(wanted)


def test_abi_v8_dump_is_diagnosed_not_raised(cuda_gdb):
    core, _ = dump("oob_store_v8")
    session = run_cuda_gdb(core, ["info cuda kernels"], cuda_gdb=cuda_gdb, timeout=120)
    assert "cubin-abi-too-new" in {d.code.value for d in session.diagnoses}


def test_a_file_that_is_no_dump_is_diagnosed(cuda_gdb, tmp_path):
    junk = tmp_path / "junk.nvcudmp"
    junk.write_bytes(b"not an ELF file\n")
    session = run_cuda_gdb(junk, ["info cuda kernels"], cuda_gdb=cuda_gdb, timeout=60)
    assert "not-a-gpu-coredump" in {d.code.value for d in session.diagnoses}
    assert session.output("info cuda kernels") == "No CUDA kernels."


def test_missing_core_is_unreadable(cuda_gdb, tmp_path):
    with pytest.raises(UnreadableFile):
        run_cuda_gdb(tmp_path / "absent.nvcudmp", cuda_gdb=cuda_gdb)


def test_missing_cuda_gdb_is_tool_not_found(tmp_path):
    junk = tmp_path / "junk.nvcudmp"
    junk.write_bytes(b"x")
    with pytest.raises(ToolNotFound):
        run_cuda_gdb(junk, cuda_gdb=tmp_path / "no-cuda-gdb")


def test_timeout_is_tool_failed_without_returncode(cuda_gdb, tmp_path):
    core, _ = dump("oob_store")
    with pytest.raises(ToolFailed) as info:
        run_cuda_gdb(core, cuda_gdb=cuda_gdb, timeout=0.001)
    assert info.value.returncode is None


def test_a_cuda_gdb_that_needs_the_retry_is_run_once_the_next_time(cuda_gdb, tmp_path, monkeypatch):
    # GIVEN a wrapper that logs every start of the real cuda-gdb, and an empty cache folder
    log, wrapper = tmp_path / "runs.log", tmp_path / "cuda-gdb"
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> "{log}"\nexec "{cuda_gdb}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    core, _ = dump("oob_store")
    # WHEN it runs twice on a dump
    first = run_cuda_gdb(core, ["bt"], cuda_gdb=wrapper, timeout=120)
    after_first = _sessions(log)
    second = run_cuda_gdb(core, ["bt"], cuda_gdb=wrapper, timeout=120)
    runs_of_second = _sessions(log) - after_first
    # THEN a build whose unwinder fails is retried the first time only, to the same answers
    if not first.retried:
        assert (after_first, runs_of_second) == (1, 1)
        return
    assert (after_first, runs_of_second) == (2, 1)
    assert second.retried and second.diagnoses == first.diagnoses
    assert second.output("bt") == first.output("bt")
    assert second.peak_rss_kib and second.peak_rss_kib > 1000


def _sessions(log):
    # Starts on a dump, not the `--version` query that names the tool's version.
    return sum(1 for line in log.read_text().splitlines() if line != "--version")


def test_debug_opens_the_dump_in_cuda_gdb_with_the_safe_flags(cuda_gdb, tmp_path):
    # GIVEN `postmortem debug` with batch commands after --, standing in for a user's session
    core, truth = dump("oob_store")
    argv = [sys.executable, "-m", "postmortem", "debug", str(core), "--cuda-gdb", str(cuda_gdb),
            "--", "-batch", "-ex", "info cuda kernels"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    # THEN cuda-gdb opened the dump (its kernel table) and the command line was shown
    assert result.returncode == 0, result.stderr
    assert "oob_kernel" in result.stdout
    shown = next(line for line in result.stderr.splitlines() if line.startswith("postmortem: "))
    assert " -nx " in shown and "set auto-load off" in shown and "target cudacore" in shown


def test_a_compressed_dump_reaches_cuda_gdb_decompressed(cuda_gdb):
    # GIVEN a gzip-compressed dump, which cuda-gdb cannot read as it is
    core = DUMPS / "oob_store_gzip.nvcudmp.gz"
    # WHEN `postmortem debug` opens it (a subprocess: cuda-gdb writes to the standard output
    # it inherits), and `analyze` cross-checks it
    argv = [sys.executable, "-m", "postmortem", "debug", str(core), "--cuda-gdb", str(cuda_gdb),
            "--", "-batch", "-ex", "info cuda kernels"]  # fmt: skip
    debugged = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    analyzed = invoke("analyze", core, "--no-disasm", "--format", "json", "--cuda-gdb", cuda_gdb)
    # THEN cuda-gdb read the decompressed copy both times
    assert debugged.returncode == 0, debugged.stderr
    assert "oob_kernel" in debugged.stdout
    check = json.loads(analyzed.stdout)["crosscheck"]
    assert check is not None and check["opened"] is True, check


def test_debug_warns_when_this_cuda_gdb_cannot_read_the_dump_and_opens_it_anyway(cuda_gdb):
    core = DUMPS / "oob_store_r615.nvcudmp"
    argv = [sys.executable, "-m", "postmortem", "debug", str(core), "--cuda-gdb", str(cuda_gdb),
            "--", "-batch", "-ex", "info cuda devices"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    first = result.stderr.splitlines()[0]
    assert first.startswith("warning: cuda-gdb 11.8 may not read this dump: the SM table")
    assert any(line.startswith("postmortem: ") for line in result.stderr.splitlines())


def test_debug_without_cuda_gdb_is_one_line_and_exit_3(tmp_path):
    core, _ = dump("oob_store")
    # (debug's run through `python -m postmortem` wherever cuda-gdb is missing too)
    argv = [sys.executable, "-m", "postmortem", "debug", str(core), "--cuda-gdb",
            str(tmp_path / "no-cuda-gdb")]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
