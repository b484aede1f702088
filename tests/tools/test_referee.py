"""cuda-gdb is the referee: on every dump it can read, it agrees with the native reader.

cuda-gdb 11.8 reads only the r346/r400 row layouts (toolchain.md), so newer layouts are
refereed through their r400 twins, which tests/fixtures/test_reader_truth.py proves
the native reader reads identically. A dump cuda-gdb rejects is a broken fixture.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from postmortem import CodeMap, find_faults, open_coredump
from postmortem.cubin.inspect import function_label
from postmortem.demangle import demangle, without_parameters
from postmortem.exceptions import describe_exception
from postmortem.gdb import (
    Parsed,
    parse_exception_banner,
    parse_info_symbol,
    parse_kernels,
    parse_lanes,
    parse_warps,
    run_cuda_gdb,
)
from postmortem.model import FaultSource
from tests.conftest import dump_paths, truth_of
from tests.tooling import require_tool

COMMANDS = ("info cuda kernels", "info cuda warps", "info cuda lanes", "info symbol $errorpc")
CHECKABLE = [p for p in dump_paths() if truth_of(p)["cuda_gdb_checkable"]["value"]]
FAULTING = [p for p in CHECKABLE if truth_of(p)["faulting_lanes"]]


@cache
def _session(path: Path):
    return run_cuda_gdb(path, COMMANDS, cuda_gdb=require_tool("cuda-gdb"), timeout=120)


def _parsed(result):
    assert isinstance(result, Parsed), f"cuda-gdb output not understood: {result}"
    return result.value


def test_every_fixture_family_has_a_dump_cuda_gdb_can_referee():
    assert len(CHECKABLE) >= 10
    refereed = {p.name.split(".")[0].split("_r")[0] for p in CHECKABLE}
    assert {"oob_store", "cutlass_like", "misaligned_load", "device_assert", "two_modules",
            "two_devices", "hang_barrier", "sm_fault"} <= refereed  # fmt: skip


@pytest.mark.parametrize("path", CHECKABLE, ids=lambda p: p.name)
def test_exception_banner_and_focus_agree(path):
    session = _session(path)
    with open_coredump(path) as core:
        lane_faults = [f for f in find_faults(core) if f.source is FaultSource.LANE]
    if not lane_faults:
        assert "CUDA Exception" not in session.banner
        return
    banner = _parsed(parse_exception_banner(session.banner))
    first = lane_faults[0]
    if first.exception == 12:  # cuda-gdb 11.8 says "Assertion failed." for WARP_ASSERT
        assert banner.assertion_failed
    else:
        assert banner.name == describe_exception(first.exception)
        assert banner.error_pc == first.error_pc
    focus = banner.focus
    assert focus is not None
    faulting = {
        (f.block_idx, f.thread_idx, f.device_index, f.sm_id, f.warp_id, f.lane) for f in lane_faults
    }
    assert (focus.block, focus.thread, focus.device, focus.sm, focus.warp, focus.lane) in faulting


@pytest.mark.parametrize("path", FAULTING, ids=lambda p: p.name)
def test_info_symbol_agrees_with_the_native_location(path):
    # cuda-gdb names the innermost function symbol: a called function's clone, with its
    # own offset, for a PC in a call.
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        faults = find_faults(core, code_map)
        location, pc = faults[0].location, faults[0].error_pc
        assert location is not None and location.function is not None and pc is not None
        summary = code_map.summary(location.module)
        function = summary.find_function(pc) if summary else None
    assert function is not None
    symbol = _parsed(parse_info_symbol(_session(path).output("info symbol $errorpc") or ""))
    assert symbol.symbol == function_label(function.name)
    assert symbol.offset == pc - function.address
    assert symbol.section == location.section_name


@pytest.mark.parametrize("path", CHECKABLE, ids=lambda p: p.name)
def test_info_cuda_kernels_agrees_with_the_grids(path):
    rows = _parsed(parse_kernels(_session(path).output("info cuda kernels") or ""))
    from postmortem.summary import summarize

    with open_coredump(path) as core:
        launches = summarize(core).launches
    assert sorted((r.device, r.grid, r.grid_dim, r.block_dim, r.name) for r in rows) == sorted(
        (x.grid.device_index, x.grid.grid_id, x.grid.grid_dim, x.grid.block_dim,
         without_parameters(demangle(x.kernel or "")))
        for x in launches
    )  # fmt: skip


def _focus(path):
    rows = _parsed(parse_lanes(_session(path).output("info cuda lanes") or ""))
    current = next(r for r in rows if r.current)
    return current.device, current.sm, current.warp


@pytest.mark.parametrize("path", CHECKABLE, ids=lambda p: p.name)
def test_info_cuda_warps_agrees_on_the_focus_sm(path):
    device, sm_id, _ = _focus(path)
    rows = _parsed(parse_warps(_session(path).output("info cuda warps") or ""))
    with open_coredump(path) as core:
        sm = next(s for s in core.sms(core.device(device)) if s.sm_id == sm_id)
        native = []
        for cta in core.ctas(sm):
            for warp in core.warps(cta):
                lanes = {lane.lane: lane for lane in core.lanes(warp)}
                first = min(i for i in lanes if warp.active_lanes_mask >> i & 1)
                native.append(
                    (warp.warp_id, warp.active_lanes_mask, lanes[first].function_offset,
                     warp.block_idx, lanes[first].thread_idx)
                )  # fmt: skip
    assert sorted(native) == sorted(
        (r.warp, r.active_lanes_mask, r.active_pc, r.block_idx, r.thread_idx) for r in rows
    )


@pytest.mark.parametrize("path", CHECKABLE, ids=lambda p: p.name)
def test_info_cuda_lanes_agrees_on_the_focus_warp(path):
    device, sm_id, warp_id = _focus(path)
    rows = _parsed(parse_lanes(_session(path).output("info cuda lanes") or ""))
    with open_coredump(path) as core:
        warp = next(
            w
            for w in core.iter_warps(core.device(device))
            if (w.sm_id, w.warp_id) == (sm_id, warp_id)
        )
        native = [
            (
                lane.lane,
                lane.function_offset,
                lane.thread_idx,
                describe_exception(lane.exception) if lane.exception else None,
            )
            for lane in core.lanes(warp)
            if warp.active_lanes_mask >> lane.lane & 1
        ]
    assert sorted(native) == sorted((r.lane, r.pc, r.thread_idx, r.exception) for r in rows)
