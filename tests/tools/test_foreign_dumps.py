"""Dumps as other producers write them, and damaged the way real files are: still read.

Each dump in fixtures/foreign/ is a committed dump rewritten by fixtures/builder/foreign.py
(headers first, cut inside a section, short rows, root-level images, many exception codes,
a trap, no GPU state). The facts its base dump planted must survive wherever the bytes that
hold them survive, and what was lost must be named.
"""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from postmortem import open_coredump
from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.errors import NoGpuState
from postmortem.exceptions import describe_exception
from postmortem.gdb import run_cuda_gdb
from postmortem.model import FaultSource
from postmortem.report.context import build_report
from postmortem.report.render import render
from postmortem.summary import summarize
from tests.conftest import DUMPS, FIXTURES, truth_of
from tests.tooling import invoke, require_tool

FOREIGN = FIXTURES / "foreign"
SCHEMA = json.loads((FIXTURES.parent / "postmortem/report/report.schema.json").read_text())
READABLE = [p for p in sorted(FOREIGN.glob("*.nvcudmp")) if p.stem != "no_gpu_state"]


def _truth(name: str) -> dict:
    return json.loads((FOREIGN / f"{name}.truth.json").read_text())


def _analyze(name: str, disassemble: bool = True):
    options = AnalyzeOptions(localize=LocalizeOptions(nvdisasm=disassemble), cuda_gdb=False)
    return analyze_dump(FOREIGN / f"{name}.nvcudmp", options)


def _base_fault(name: str) -> dict:
    return truth_of(DUMPS / f"{_truth(name)['base']}.nvcudmp")["fault"]


def test_the_foreign_dumps_rebuild_byte_identical(tmp_path):
    subprocess.run(
        [sys.executable, str(FIXTURES / "builder" / "foreign.py"), "--out", str(tmp_path)],
        check=True, capture_output=True,
    )  # fmt: skip
    for path in sorted(FOREIGN.iterdir()):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("path", READABLE, ids=lambda p: p.stem)
def test_every_format_renders_and_the_json_follows_the_schema(path):
    analysis = analyze_dump(path, AnalyzeOptions(cuda_gdb=False))
    report = build_report(analysis)
    jsonschema.validate(report, SCHEMA)
    for fmt in ("text", "md", "html"):
        text = render("analyze", report, fmt)
        assert "None" not in text, fmt


@pytest.mark.parametrize(
    "name", ["headers_first", "cut_in_memory", "cut_in_registers", "cut_in_lane_table",
             "short_rows", "root_images"],
)  # fmt: skip
def test_the_fault_survives_where_its_bytes_do(name):
    require_tool("nvdisasm")
    # GIVEN a foreign or damaged dump of a planted fault
    fault = _base_fault(name)
    # WHEN it is analyzed
    site = _analyze(name).sites[0]
    # THEN exception, PC, kernel, offset, instruction and chain are those planted
    assert site.exception == fault["exception"]
    assert site.error_pc == fault["error_pc"]
    assert site.function is not None and site.function.name == fault["kernel"]
    assert site.offset == fault["offset"]
    assert site.instruction is not None
    assert site.instruction.text == fault["sass"].rstrip(" ;")
    assert [[f.file.rsplit("/", 1)[-1], f.line] for f in site.chain] == fault["expected_chain"]


@pytest.mark.parametrize(
    ("name", "lost"),
    [("cut_in_memory", "global memory"), ("cut_in_registers", "registers"),
     ("cut_in_lane_table", "lane table")],
)  # fmt: skip
def test_what_was_cut_is_named_and_the_rest_reported(name, lost):
    summary = _analyze(name, disassemble=False).summary
    partial = [d.message for d in summary.findings if d.code.value == "partial-dump"]
    assert any(lost in m and "cut short by the end of the file" in m for m in partial), partial
    assert summary.devices and summary.launches and summary.modules


def test_a_memory_segment_cut_short_is_read_up_to_the_end():
    with (
        open_coredump(FOREIGN / "cut_in_memory.nvcudmp") as cut,
        open_coredump(DUMPS / "oob_store_memory.nvcudmp") as whole,
    ):
        first_cut, first_whole = cut.memory_segments()[0], whole.memory_segments()[0]
        assert first_cut.address == first_whole.address
        assert first_cut.size_bytes == first_whole.size_bytes // 2
        assert cut.read_memory(first_cut.address, 16) == whole.read_memory(first_cut.address, 16)


def test_a_lane_whose_registers_were_cut_has_no_address_and_the_others_keep_theirs():
    require_tool("nvdisasm")
    site = _analyze("cut_in_registers").sites[0]
    assert site.forensics is not None
    lanes = site.forensics.lanes
    planted = {
        lane["lane"]: lane["effective_address"]
        for lane in truth_of(DUMPS / "oob_store.nvcudmp")["faulting_lanes"]
    }
    unknown = [a for a in lanes if a.address is None]
    assert len(unknown) == 1 and unknown[0].missing
    assert all(a.address == planted[a.lane] for a in lanes if a.address is not None)


def test_a_cut_lane_table_keeps_the_rows_before_the_cut():
    with open_coredump(FOREIGN / "cut_in_lane_table.nvcudmp") as core:
        faults = [f for f in summarize(core).faults if f.source is FaultSource.LANE]
    assert sorted(f.lane for f in faults) == [3, 4, 5, 6, 7]


def test_short_rows_give_unknown_facts_not_guesses():
    with open_coredump(FOREIGN / "short_rows.nvcudmp") as core:
        summary = summarize(core)
    grid = summary.launches[0].grid
    assert grid.grid_id == 7
    assert grid.grid_dim is None and grid.block_dim is None and grid.function_entry is None
    assert summary.metadata is not None and summary.metadata.flags is None
    assert summary.metadata.cuda_driver_version is not None
    assert "short rows in the grid table and metadata" in summary.layout_generation


def test_root_level_images_are_modules_of_unknown_context():
    summary = _analyze("root_images", disassemble=False).summary
    assert [m.module.module_handle for m in summary.modules] == [None]
    assert summary.faults[0].location is not None
    assert any(d.code.value == "root-level-image" for d in summary.findings)


def test_lanes_with_different_codes_at_one_pc_are_separate_sites():
    expect = _truth("many_codes")["expect"]
    sites = _analyze("many_codes", disassemble=False).sites
    assert sorted(s.exception for s in sites) == expect["codes"]
    assert sum(len(s.faults) for s in sites) == expect["lanes"]
    assert len({s.error_pc for s in sites}) == 1
    names = {s.exception: describe_exception(s.exception or 0) for s in sites}
    assert names[30] == "Warp MMU Fault" and names[36] == "TMA Syscall"
    assert names[99] == "Device Unknown Exception (code 99, 0x63)"
    assert "reserved" in names[1] and "reserved" in names[13]
    assert all("Unknown" not in names[c] for c in range(23, 37))


def test_a_trap_warp_is_reported_as_stopped_at_a_trap():
    require_tool("nvdisasm")
    analysis = _analyze("trap_warp")
    (site,) = analysis.sites
    assert [f.source for f in site.faults] == [FaultSource.TRAP]
    assert site.exception is None and site.function is not None
    assert site.instruction is not None and site.forensics is None  # no access to examine
    report = build_report(analysis)
    assert report["verdict"]["headline"].startswith("stopped at a trap")


def test_a_dump_without_gpu_state_is_an_error():
    with pytest.raises(NoGpuState, match="no GPU state"):
        _analyze("no_gpu_state", disassemble=False)


def test_the_cli_says_no_gpu_state_in_one_line_and_exits_2():
    result = invoke("analyze", "--no-gdb", FOREIGN / "no_gpu_state.nvcudmp")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines()[0].startswith("error: ")
    assert "no GPU state" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("path", sorted(FOREIGN.glob("*.nvcudmp")), ids=lambda p: p.stem)
def test_cuda_gdb_takes_each_convention_as_recorded(path):
    # The reference debugger as referee: it reads the headers-first layout, the dumps cut
    # in a memory or register section, and the trap (SIGTRAP) as we do; it refuses the
    # cut lane table, short rows and root-level images that the tolerant reader reads.
    require_tool("cuda-gdb")
    says = _truth(path.stem)["cuda_gdb_11_8_says"]
    session = run_cuda_gdb(path, timeout=120)
    assert says in session.banner, session.banner
    if says.startswith("CUDA Exception: Warp"):  # it saw the planted fault where we do
        expect = truth_of(DUMPS / f"{_truth(path.stem)['base']}.nvcudmp")["cuda_gdb_expect"]
        assert expect["focus"] in session.banner
