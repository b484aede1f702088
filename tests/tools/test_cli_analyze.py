"""`postmortem analyze` end to end, as a user runs it: in this process (click's runner), and
in a subprocess where a terminal is the point."""

from __future__ import annotations

import json
import subprocess
import sys
import types

from tests.conftest import DUMPS, FIXTURES, truth_of
from tests.tooling import invoke, require_tool


def analyze(*args: object) -> types.SimpleNamespace:
    return invoke("analyze", *args)


def test_verdict_comes_first_and_the_fault_is_marked():
    require_tool("nvdisasm")
    truth = truth_of(DUMPS / "oob_store.nvcudmp")["fault"]
    result = analyze(DUMPS / "oob_store.nvcudmp", "--source-dir", FIXTURES / "cu")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # The on-call summary comes first, then the verdict line of the fault.
    assert lines[1].startswith("  problem class:    illegal memory access in a kernel")
    verdict = lines.index("") + 1
    assert "Warp Illegal Address (exception 14) in oob_kernel(float*, int, float)" in lines[verdict]
    assert f"0x{truth['error_pc']:x} = oob_kernel+0x{truth['offset']:x}" in lines[verdict + 1]
    assert f"  --> /*{truth['offset']:04x}*/  {truth['sass'].rstrip(' ;')}" in lines
    assert any(line.startswith("  #0 include/store.cuh:10") for line in lines)
    assert any("@pm fault" in line for line in lines)


def test_runs_with_no_tool_at_all():
    result = analyze(DUMPS / "oob_store.nvcudmp", "--nvdisasm", "/nonexistent/nvdisasm")
    assert result.returncode == 0, result.stderr
    assert "nvdisasm is not installed" in result.stdout
    assert "pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump" in result.stdout
    assert "oob_kernel+0xd0" in result.stdout


def test_a_hang_dump_says_so():
    result = analyze(DUMPS / "hang_barrier.nvcudmp", "--no-disasm")
    assert result.returncode == 0
    assert "no exception recorded" in result.stdout


def test_a_bad_path_map_is_a_usage_error():
    result = analyze(DUMPS / "oob_store.nvcudmp", "--map-path", "no-equals-sign")
    assert result.returncode == 2
    assert "expected OLD=NEW" in result.stderr


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.nvcudmp"
    bad.write_bytes(b"\x7fELF" + b"\0" * 10)
    result = analyze(bad)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_cuda_gdb_cross_checks_and_names_the_innermost_function():
    require_tool("nvdisasm")
    require_tool("cuda-gdb")
    result = analyze(DUMPS / "oob_store.nvcudmp")
    assert result.returncode == 0, result.stderr
    # store.cuh:10 is inside pm::store<T> (fixtures/cu/include/store.cuh)
    assert (
        "  #0 include/store.cuh:10  in void pm::store<float>(float*, int, float)" in result.stdout
    )
    assert "cross-check with cuda-gdb 11.8: agrees on exception, error PC" in result.stdout
    assert "DISAGREES" not in result.stdout


def test_a_dump_cuda_gdb_cannot_read_is_not_given_to_it_and_keeps_the_native_answer():
    require_tool("cuda-gdb")
    result = analyze(DUMPS / "oob_store_r575.nvcudmp", "--no-disasm", "--format", "json")
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["sites"][0]["offset"] == 0xD0
    # GIVEN cuda-gdb 11.8, which misreads rows longer than the r400 layout: it is not run
    (gdb,) = [use for use in report["provenance"] if use["source"] == "cuda-gdb"]
    assert (gdb["status"], gdb["seconds"], gdb["path"]) == ("unavailable", None, None)
    assert gdb["note"].startswith("cuda-gdb 11.8 not run: the SM table, CTA table, warp table,")


def test_colour_only_on_a_terminal():
    import os
    import pty

    # GIVEN standard output is a pseudo-terminal
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "postmortem", "analyze", str(DUMPS / "oob_store.nvcudmp"),
         "--no-gdb", "--no-disasm"],
        stdout=follower, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(leader)
    # THEN the terminal gets ANSI styling, and a pipe does not
    assert b"\x1b[1m" in b"".join(chunks)
    piped = analyze(DUMPS / "oob_store.nvcudmp", "--no-gdb", "--no-disasm")
    assert "\x1b[" not in piped.stdout


def test_output_file_gets_the_report_and_stdout_stays_quiet(tmp_path):
    target = tmp_path / "report.md"
    result = analyze(DUMPS / "oob_store.nvcudmp", "--no-gdb", "--format", "md", "-o", target)
    assert result.returncode == 0 and result.stdout == ""
    assert target.read_text().startswith("## postmortem: `")
    assert "report written to" in result.stderr


def test_a_hang_dump_is_analyzed_as_a_hang_and_the_mode_can_be_forced():
    require_tool("nvdisasm")
    hang = analyze(DUMPS / "hang_barrier.nvcudmp", "--no-gdb")
    assert hang.returncode == 0
    # The headline, folded to the terminal's width, read back as one line.
    lines = hang.stdout.splitlines()
    start = lines.index("") + 1
    headline = " ".join(line.strip() for line in lines[start : lines.index("", start)])
    assert headline.endswith(
        "hang: 2 blocks ((1,0,0), (2,0,0)), each: 1 warp(s) wait at a block barrier (barrier 0) "
        "for 3 warp(s) of the same block, and they poll memory (at 0x0080) that no warp still "
        "free to run can write: a __syncthreads() that not every thread of the block reaches"
    )
    forced = analyze(DUMPS / "oob_store.nvcudmp", "--no-gdb", "--mode", "hang")
    assert "where every warp is stuck" in forced.stdout
    plain = analyze(DUMPS / "oob_store.nvcudmp", "--no-gdb", "--mode", "fault")
    assert "where every warp is stuck" not in plain.stdout


def test_verbose_lists_every_faulting_lane(tmp_path):
    # GIVEN a dump where every lane of 3 warps faults (96 lanes, more than text shows)
    require_tool("nvdisasm")
    sys.path.insert(0, str(FIXTURES / "builder"))
    from large import write_large_dump

    dump = write_large_dump(tmp_path / "wide.nvcudmp", lanes=2048, global_bytes=4096,
                            faulting_warps=3)  # fmt: skip
    # WHEN it is analyzed with and without -v
    brief = analyze(dump.path, "--no-gdb")
    full = analyze(dump.path, "--no-gdb", "-v")
    # THEN the brief report lists 8 lanes and says how many more; -v lists all 96
    assert brief.returncode == 0 and full.returncode == 0, brief.stderr + full.stderr
    listed = [line for line in brief.stdout.splitlines() if line.startswith("    block (")]
    assert len(listed) == 8
    assert "... and 88 more lanes (-v shows all)" in brief.stdout
    assert len([ln for ln in full.stdout.splitlines() if ln.startswith("    block (")]) == 96
    assert "96 faulting lanes" in full.stdout
