"""A fault in a called (not inlined) function: the call stack from the lane's backtrace rows.

fixtures/cu/calls.cu: two_level calls scatter_row, which calls write_slot, which stores out
of bounds; ptxas made both callees clones inside the kernel's section. The truth is read from
the source's markers (`@pm fault`, `@pm call N`) and the cubin index the builder wrote from
nvdisasm, never from the code under test.
"""

from __future__ import annotations

import json
import struct
from functools import cache
from pathlib import Path

from postmortem import open_coredump
from postmortem.analysis.analyze import Analysis, AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fleet.signature import compute_signature, load_rules, signature_input
from postmortem.codemap import find_faults
from postmortem.coredump import tables as t
from postmortem.cubin.inspect import function_label, function_name
from postmortem.demangle import without_parameters
from postmortem.gdb import parse_backtrace
from postmortem.report.context import build_report
from postmortem.report.render import render
from tests.conftest import FIXTURES
from tests.tooling import DUMPS, require_tool

INDEX = json.loads((FIXTURES / "cubins" / "index.json").read_text())["cubins"]
TRUTH = INDEX["calls.sm_90.v7"]["fault"]
CLONE = "$_Z9two_levelPfif$_ZN5calls10write_slotEPfif"


@cache
def _analysis(name: str = "calls.nvcudmp", gdb: bool = False) -> Analysis:
    require_tool("nvdisasm")
    return analyze_dump(DUMPS / name, AnalyzeOptions(LocalizeOptions(), cuda_gdb=gdb))


def test_a_clone_is_named_as_its_callee_and_as_cuda_gdb_names_it():
    assert function_name(CLONE) == "calls::write_slot(float*, int, float)"
    # cuda-gdb 11.8's `bt` on the fixture (fixtures/transcripts/cuda-gdb/11.8/calls__bt.txt)
    recorded = (FIXTURES / "transcripts" / "cuda-gdb" / "11.8" / "calls__bt.txt").read_text()
    assert f"in {function_label(CLONE)} ()" in recorded
    assert function_label("_Z9two_levelPfif") == "two_level(float*, int, float)"


def test_every_frame_of_the_call_stack_is_the_planted_one():
    # GIVEN the fault two calls deep
    stack = _analysis().sites[0].calls
    assert stack is not None and stack.call_depth == 2 and not stack.notes
    frames = stack.frames
    # THEN each frame is the function the source calls through, innermost first
    assert [without_parameters(f.function.demangled) for f in frames if f.function] == [
        "calls::write_slot", "calls::scatter_row", "two_level",
    ]  # fmt: skip
    assert [f.function.clone_in for f in frames if f.function] == [TRUTH["kernel"]] * 2 + [None]
    # AND each offset is in its own function: the PC's, then each CALL's
    assert [f.offset for f in frames] == [TRUTH["function_offset"]] + [
        call["caller_offset"] for call in TRUTH["calls"]
    ]
    # AND each line is the marker's: the fault, then every call site
    lines = [(Path(f.chain[0].file).name, f.chain[0].line) for f in frames]
    assert lines == [tuple(TRUTH["expected_chain"][0])] + [
        tuple(c) for c in TRUTH["expected_calls"]
    ]
    # AND the callers' instructions are the CALLs nvdisasm printed
    assert [f.instruction.text.rstrip(" ;") for f in frames[1:] if f.instruction] == [
        c["sass"].rstrip(" ;") for c in TRUTH["calls"]
    ]
    # AND the kernel frame keeps its own inline chain (dispatch<float> inlined in two_level)
    assert len(frames[2].chain) == 2


def test_location_best_guess_and_signature_name_the_called_function():
    analysis = _analysis()
    site = analysis.sites[0]
    offset = TRUTH["function_offset"]
    assert site.location == f"calls::write_slot+0x{offset:x}"
    assert site.function is not None and site.function.name == TRUTH["kernel"]
    signature = compute_signature(signature_input(analysis), load_rules())
    assert (signature.function, signature.offset) == ("calls::write_slot", offset)
    report = build_report(analysis)
    guess = report["oncall"]["best_guess"]["kernel"]["text"]
    assert guess.startswith(f"calls::write_slot at +0x{offset:x}, called from")
    assert "calls::scatter_row (calls.cu:21) <- two_level (calls.cu:28)" in guess


def test_every_format_shows_the_call_stack():
    report = build_report(_analysis())
    text = render("analyze", report, "text")
    assert "#1 calls::scatter_row+0xa0  calls.cu:21  [clone in two_level]" in text
    assert "#2 two_level+0x90  calls.cu:28" in text
    markdown = render("analyze", report, "md")
    assert (
        "| 1 | `calls::scatter_row` (clone in `two_level`) | `0xa0` | `calls.cu:21` |" in markdown
    )
    html = render("analyze", report, "html")
    assert "<h3>Call stack</h3>" in html and "calls::scatter_row" in html
    frames = report["sites"][0]["calls"]["frames"]
    assert [f["function"]["short"] for f in frames] == [
        "calls::write_slot", "calls::scatter_row", "two_level",
    ]  # fmt: skip


def test_cuda_gdb_bt_agrees_with_the_call_stack():
    require_tool("cuda-gdb")
    check = _analysis(gdb=True).crosscheck
    assert check is not None and check.opened
    facts = {c.fact: c for c in check.checks}
    stack = facts["call stack (function at file:line)"]
    assert stack.agrees, stack
    assert facts["kernel + offset of the error PC"].agrees
    assert len(check.backtrace) == 3


def test_missing_backtrace_rows_leave_the_function_and_say_so():
    site = _analysis("calls_nobt.nvcudmp").sites[0]
    assert site.calls is not None and len(site.calls.frames) == 1
    assert site.calls.notes == (
        "the lane's call depth is 2 but the dump holds 0 backtrace rows: its callers are unknown",
    )
    assert site.location == f"calls::write_slot+0x{TRUTH['function_offset']:x}"


def test_a_return_address_that_follows_no_call_ends_the_stack(tmp_path):
    # GIVEN the dump with the first faulting lane's level-0 return address moved one
    # instruction on, where no CALL precedes it
    data = bytearray((DUMPS / "calls.nvcudmp").read_bytes())
    with open_coredump(DUMPS / "calls.nvcudmp") as core:
        lane = next(f.lane_record for f in find_faults(core) if f.lane_record is not None)
        section = core.tables.only_child(lane.ref, t.BT)
        assert section is not None
        start = int(core.sections.offset[section])
    (virtual,) = struct.unpack_from("<Q", data, start + 8)
    struct.pack_into("<Q", data, start + 8, virtual + 16)
    moved = tmp_path / "moved.nvcudmp"
    moved.write_bytes(bytes(data))
    # WHEN it is analyzed
    options = AnalyzeOptions(LocalizeOptions(), cuda_gdb=False)
    stack = analyze_dump(moved, options).sites[0].calls
    # THEN the stack stops at the PC's own function and says why
    assert stack is not None and len(stack.frames) == 1
    assert "not a CALL: the backtrace rows disagree with the code" in stack.notes[0]


def test_the_recorded_bt_parses_to_the_three_frames():
    text = (FIXTURES / "transcripts" / "cuda-gdb" / "11.8" / "calls__bt.txt").read_text()
    parsed = parse_backtrace(text)
    frames = parsed.value  # type: ignore[union-attr]
    assert [(f.file, f.line) for f in frames] == [
        ("calls.cu", 15),
        ("calls.cu", 21),
        ("calls.cu", 28),
    ]


def test_a_stuck_group_inside_a_called_function_has_its_call_stack():
    # GIVEN calls.cu dumped mid-flight with one block's warps inside write_slot
    analysis = _analysis("midflight_calls.nvcudmp")
    assert analysis.hang is not None
    inside = next(g for g in analysis.hang.groups if g.calls is not None)
    # THEN the group names the called function, its callers and their call sites
    assert inside.calls is not None and inside.calls.is_called
    assert [f.name for f in inside.calls.frames] == [
        "calls::write_slot(float*, int, float)",
        "calls::scatter_row(float*, int, float)",
        "two_level(float*, int, float)",
    ]
    assert [(f.chain[0].file, f.chain[0].line) for f in inside.calls.frames[1:]] == [
        tuple(c) for c in TRUTH["expected_calls"]
    ]
    # AND the frame at its PC is named after write_slot, not the kernel around it
    assert inside.frame_names[0] is not None
    assert inside.frame_names[0].demangled == "calls::write_slot(float*, int, float)"
    # AND the group at the kernel's entry has no stack to show
    assert all(g.calls is None for g in analysis.hang.groups if g is not inside)
    report = build_report(analysis)
    assert "called from calls::scatter_row" in report["oncall"]["best_guess"]["kernel"]["text"]
    assert "called from calls::scatter_row (calls.cu:21) <- two_level (calls.cu:28)" in render(
        "analyze", report, "text"
    )
