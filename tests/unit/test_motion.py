"""Two dumps of one process compared: which warps did not move (stuck), which moved, which
exited or were launched; whether two dumps are of one process, and which is earlier."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fleet.analyze import analyze_incident
from postmortem.analysis.hang.hang import StuckGroup
from postmortem.analysis.hang.motion import MAX_REGISTER_WARPS, Motion, compare_dumps
from postmortem.analysis.hang.pairing import (
    DumpIdentity,
    order_pair,
    pair_by_process,
    same_process,
    seconds_text,
)
from postmortem.coredump import open_coredump
from postmortem.dumpnames import NameFacts, parse_name
from postmortem.report.incident import build_incident_report
from postmortem.report.render import render
from tests.tinydump import (
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    WarpSpec,
    cubin,
    write_tiny_dump,
)
from tests.tooling import invoke

NATIVE = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False)
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
BARRIER = cubin("divergent_barrier").stalls["barrier"]["offset"]
SPIN = cubin("divergent_barrier").stalls["spin"]["offset"]
GRID = frozenset({(0, 9, 0x7000, 0x55)})


def _warp(offset, warp_id, registers=None, active=None):
    lanes = [LaneSpec(offset, lane=n, registers=registers or {}) for n in range(32)]
    return WarpSpec(lanes, warp_id=warp_id, active_lanes=active)


def _hang(path, blocks, stamp=T0):
    """A hang dump of grid 9 (divergent_barrier): `blocks` maps a block x to its warps."""
    module = ModuleSpec("divergent_barrier")
    specs = [BlockSpec(9, warps, block_idx=(x, 0, 0), sm=x) for x, warps in blocks.items()]
    device = DeviceSpec([module], [GridSpec(9, module, grid_dim=(4, 1, 1))], specs)
    return write_tiny_dump(path, DumpSpec([device], layout="r590", metadata_timestamp=stamp))


def _identity(path, name=None, stamp=None, mtime=None, grids=GRID):
    return DumpIdentity(path, name or parse_name(path), stamp, mtime, grids)


def _compare(tmp_path, before, after):
    a = _hang(tmp_path / "core_node1.4242.1767225600.nvcudmp", before)
    b = _hang(tmp_path / "core_node1.4242.1767225604.nvcudmp", after, T0 + 4)
    ia, ib = _identity(str(a)), _identity(str(b))
    with open_coredump(a) as ca, open_coredump(b) as cb:
        return compare_dumps(ca, cb, order_pair(ia, ib), same_process(ia, ib), {})


def _motions(comparison):
    return {(w.block_idx[0], w.warp_id): w.motion for w in comparison.warps}


# -- names, process, order -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "host", "pid", "time"),
    [
        ("core_node-1.4242.1767225600.nvcudmp", "node-1", 4242, 1767225600),  # capture's
        ("core_1767225600_node1_4242.nvcudmp", "node1", 4242, 1767225600),  # cuda-gdb's
        ("core.cuda.node1.4242", "node1", 4242, None),  # the driver API's
        ("core.cuda.1754898045.4242", None, 4242, 1754898045),  # SGLang's crash folder
        ("gpu7.host.example.31337.1767225600", "gpu7.host.example", 31337, 1767225600),
        ("core_node1.4242.1767225600.nvcudmp.gz", "node1", 4242, 1767225600),
        ("s3://bucket/dumps/core_node1.4242.1767225600.nvcudmp", "node1", 4242, 1767225600),
    ],
)
def test_a_driver_pattern_name_gives_host_pid_and_time(name, host, pid, time):
    parsed = parse_name(name)
    assert (parsed.host, parsed.pid, parsed.time) == (host, pid, time)
    assert parsed.pattern is not None


@pytest.mark.parametrize("name", ["a.nvcudmp", "core.rank0.nvcudmp", "", "core_x.y.z.nvcudmp"])
def test_a_name_no_pattern_matches_says_nothing(name):
    assert parse_name(name) == NameFacts(None, None, None, None)


def test_same_host_and_pid_with_grids_in_common_is_one_process():
    verdict = same_process(
        _identity("core_node1.4242.1767225600.nvcudmp"),
        _identity("core_node1.4242.1767225604.nvcudmp"),
    )
    assert verdict.same and (verdict.host, verdict.pid) == ("node1", 4242)
    assert verdict.evidence == ("file names: host node1, pid 4242", "1 grid in both (grid 9)")
    assert verdict.why == "host node1, pid 4242 in both file names, and grids in common"


@pytest.mark.parametrize(
    ("b", "why"),
    [
        ("core_node1.4243.1767225604.nvcudmp",
         "different processes: host node1, pid 4242 and host node1, pid 4243 (file names)"),
        ("core_node2.4242.1767225604.nvcudmp",
         "different processes: host node1, pid 4242 and host node2, pid 4242 (file names)"),
    ],
)  # fmt: skip
def test_another_pid_or_host_in_the_names_is_another_process(b, why):
    verdict = same_process(_identity("core_node1.4242.1767225600.nvcudmp"), _identity(b))
    assert not verdict.same
    assert verdict.why == why


def test_the_same_pid_with_no_grid_in_common_is_not_one_process():
    verdict = same_process(
        _identity("core_node1.4242.1767225600.nvcudmp"),
        _identity("core_node1.4242.1767225604.nvcudmp", grids=frozenset({(0, 3, 0x7000, 0x66)})),
    )
    assert not verdict.same
    assert verdict.why.startswith("no grid (device, grid id, kernel entry, context) is in both")
    assert "another process with the same pid" in verdict.why


def test_without_a_process_in_the_names_the_grids_alone_decide_and_it_is_said():
    verdict = same_process(_identity("a.nvcudmp"), _identity("b.nvcudmp"))
    assert verdict.same and verdict.pid is None
    assert verdict.why == "grids and contexts in common (the file names do not say the process)"
    assert not same_process(_identity("a.nvcudmp"), _identity("b.nvcudmp", grids=frozenset())).same


def test_metadata_timestamps_order_a_pair_before_names_and_mtimes():
    early = _identity("core_node1.4242.1767225609.nvcudmp", stamp=T0, mtime=50.0)
    late = _identity("core_node1.4242.1767225600.nvcudmp", stamp=T0 + 7, mtime=10.0)
    assert order_pair(late, early) == (early, late, 7.0, "metadata")


def test_names_order_a_pair_whose_timestamps_are_equal_and_mtimes_last():
    a = _identity("core_node1.4242.1767225604.nvcudmp", stamp=T0, mtime=1.0)
    b = _identity("core_node1.4242.1767225600.nvcudmp", stamp=T0, mtime=2.0)
    assert order_pair(a, b) == (b, a, 4.0, "name")
    c, d = _identity("a.nvcudmp", mtime=9.5), _identity("b.nvcudmp", mtime=5.0)
    assert order_pair(c, d) == (d, c, 4.5, "mtime")


def test_dumps_are_paired_per_process_earliest_with_latest():
    dumps = [
        _identity("core_n.1.1767225602.nvcudmp"),
        _identity("core_n.2.1767225601.nvcudmp"),
        _identity("core_n.1.1767225600.nvcudmp"),
        _identity("core_n.1.1767225609.nvcudmp"),
    ]
    pairs, others = pair_by_process(dumps)
    assert [(p[0].path, p[1].path, p[2], p[3]) for p in pairs] == [
        ("core_n.1.1767225600.nvcudmp", "core_n.1.1767225609.nvcudmp", 9.0, "name")
    ]
    assert [(o.dumps, o.why) for o in others] == [
        (("core_n.1.1767225602.nvcudmp", "core_n.2.1767225601.nvcudmp"),
         "different processes: host n, pid 1 and host n, pid 2 (file names)")
    ]  # fmt: skip


@pytest.mark.parametrize(("seconds", "text"), [(4.0, "4 s"), (4.14, "4.1 s"), (12.6, "13 s")])
def test_a_gap_is_spelled_for_people(seconds, text):
    assert seconds_text(seconds) == text


# -- warps compared ----------------------------------------------------------------------


def test_identical_dumps_every_warp_did_not_move_registers_included(tmp_path):
    blocks = {1: [_warp(BARRIER, 0), _warp(SPIN, 1)], 2: [_warp(SPIN, 4)]}
    comparison = _compare(tmp_path, blocks, blocks)
    assert set(_motions(comparison).values()) == {Motion.STUCK}
    assert comparison.registers_compared == 3
    assert all(w.registers_compared for w in comparison.warps)
    assert comparison.seconds == 4.0 and comparison.time_source == "name"
    assert comparison.notes == ()


def test_warps_that_spin_moved_while_those_at_the_barrier_did_not(tmp_path, reading):
    # GIVEN the spinning warps at another PC of their loop in the later dump
    before = {1: [_warp(BARRIER, 0), _warp(SPIN, 1)], 2: [_warp(BARRIER, 4), _warp(SPIN, 5)]}
    after = {1: [_warp(BARRIER, 0), _warp(SPIN + 16, 1)], 2: [_warp(BARRIER, 4), _warp(SPIN, 5)]}
    # WHEN they are compared
    comparison = _compare(tmp_path, before, after)
    # THEN the barrier warps and the one spinning warp still at its PC did not move
    assert _motions(comparison) == {
        (1, 0): Motion.STUCK, (2, 4): Motion.STUCK, (2, 5): Motion.STUCK, (1, 1): Motion.MOVED,
    }  # fmt: skip
    moved = next(w for w in comparison.warps if w.motion is Motion.MOVED)
    assert moved.changed == ("PC",) and moved.offsets == ((SPIN + 16, 32),)
    (grid,) = comparison.grids
    assert grid.counts[Motion.STUCK] == 3 and grid.counts[Motion.MOVED] == 1
    assert grid.stuck_blocks == ((1, 0, 0), (2, 0, 0)) and grid.moved_blocks == ((1, 0, 0),)
    barrier = next(g for g in comparison.groups if g.offset == BARRIER)
    assert barrier.counts[Motion.STUCK] == 2 and barrier.blocks == ((1, 0, 0), (2, 0, 0))
    assert comparison.groups[0].counts[Motion.STUCK] == 2


def test_warps_that_moved_inside_a_polling_loop_are_noted(tmp_path):
    before = {1: [_warp(BARRIER, 0), _warp(SPIN, 1)]}
    after = {1: [_warp(BARRIER, 0), _warp(SPIN + 16, 1)]}
    a = _hang(tmp_path / "core_n.1.1767225600.nvcudmp", before)
    b = _hang(tmp_path / "core_n.1.1767225601.nvcudmp", after)
    ia, ib = _identity(str(a)), _identity(str(b))
    loop = StuckGroup(0, 9, None, SPIN + 16, 1, 32, 1, None, (), (), None, True)
    with open_coredump(a) as ca, open_coredump(b) as cb:
        comparison = compare_dumps(ca, cb, order_pair(ia, ib), same_process(ia, ib), {}, [loop])
    assert tuple(n.message for n in comparison.notes) == (
        "1 warp that moved is in a short loop that reads memory in the later dump: "
        "spinning on a flag nobody writes is as stuck as waiting",
    )
    assert next(g for g in comparison.groups if g.offset == SPIN + 16).group is loop


def test_a_warp_whose_registers_changed_moved(tmp_path, reading):
    before = {1: [_warp(SPIN, 0, {3: 7}), _warp(SPIN, 1, {3: 7})]}
    after = {1: [_warp(SPIN, 0, {3: 8}), _warp(SPIN, 1, {3: 7})]}
    comparison = _compare(tmp_path, before, after)
    assert _motions(comparison) == {(1, 0): Motion.MOVED, (1, 1): Motion.STUCK}
    assert comparison.warps[1].changed == ("registers",)


def test_a_warp_whose_active_mask_changed_moved(tmp_path):
    before = {1: [_warp(BARRIER, 0)]}
    after = {1: [_warp(BARRIER, 0, active=0xFFFF)]}
    (warp,) = _compare(tmp_path, before, after).warps
    assert warp.motion is Motion.MOVED and warp.changed == ("active mask",)


def test_warps_in_one_dump_only_are_gone_or_new(tmp_path):
    before = {1: [_warp(BARRIER, 0)], 2: [_warp(SPIN, 4)]}
    after = {1: [_warp(BARRIER, 0)], 3: [_warp(SPIN, 4)]}
    comparison = _compare(tmp_path, before, after)
    assert _motions(comparison) == {
        (1, 0): Motion.STUCK, (2, 4): Motion.GONE, (3, 4): Motion.NEW,
    }  # fmt: skip
    assert [w.motion for w in comparison.warps] == [Motion.STUCK, Motion.GONE, Motion.NEW]


def test_registers_are_compared_for_a_bounded_number_of_warps(tmp_path, monkeypatch):
    monkeypatch.setattr("postmortem.analysis.hang.motion.MAX_REGISTER_WARPS", 1)
    blocks = {1: [_warp(BARRIER, 0), _warp(SPIN, 1)]}
    comparison = _compare(tmp_path, blocks, blocks)
    assert comparison.registers_compared == 1
    assert tuple(n.message for n in comparison.notes) == (
        "1 warp judged by PCs and masks only: registers are compared for 1 warps at most",
    )
    assert MAX_REGISTER_WARPS == 2048


# -- the incident ------------------------------------------------------------------------


def _pair(tmp_path, first="core_node1.4242.1767225600.nvcudmp",
          second="core_node1.4242.1767225604.nvcudmp", moved=False):  # fmt: skip
    before = {1: [_warp(BARRIER, 0), _warp(SPIN, 1)], 2: [_warp(BARRIER, 4), _warp(SPIN, 5)]}
    spin = SPIN + 16 if moved else SPIN
    after = {1: [_warp(BARRIER, 0), _warp(spin, 1)], 2: [_warp(BARRIER, 4), _warp(spin, 5)]}
    return [_hang(tmp_path / first, before), _hang(tmp_path / second, after)]


def test_two_dumps_of_one_hang_name_the_warps_that_did_not_move(tmp_path):
    # GIVEN two dumps of one process whose spinning warps moved, written in the same second
    # (equal metadata timestamps: the names' %t order them)
    dumps = _pair(tmp_path, moved=True)
    # WHEN analyze makes an incident of them
    incident = analyze_incident(dumps, NATIVE)
    # THEN the verdict names the warps at the barrier, and no second dump is asked for
    assert incident.verdict.kind == "hang"
    assert incident.verdict.headline == (
        "hang: 2 warps of grid 9 did not move between dumps 4 s apart "
        "(2 at +0x140 (divergent_barrier.cu:7)); 2 moved"
    )
    (comparison,) = incident.motion.compared
    assert comparison.earlier == str(dumps[0]) and comparison.time_source == "name"
    assert incident.motion.not_compared == ()
    step = incident.oncall.next_step
    assert "second dump" not in step.text
    assert step.text.startswith(
        "the 2 warp(s) that did not move at +0x140 (divergent_barrier.cu:7) "
        "(blocks (1,0,0), (2,0,0)): read the code at that line"
    )
    assert step.source == "dump comparison: 2 warp(s) did not move"
    assert any(s.text.startswith("not a running kernel") for s in incident.oncall.ruled_out)
    # (no disassembly: one dump finds no deadlock pattern, the comparison settles it)
    assert incident.oncall.problem.startswith("a hang: no exception, and warps that did not")
    assert incident.oncall.strongest_signal.text == (
        "2 of 4 warp(s) in both dumps did not move between dumps 4 s apart (PCs, masks and "
        "registers unchanged)"
    )


def test_every_warp_moved_is_a_running_kernel(tmp_path):
    module = {1: [_warp(SPIN, 1)]}
    a = _hang(tmp_path / "core_node1.4242.1767225600.nvcudmp", module)
    b = _hang(tmp_path / "core_node1.4242.1767225603.nvcudmp", {1: [_warp(SPIN + 16, 1)]}, T0 + 3)
    incident = analyze_incident([a, b], NATIVE)
    assert incident.verdict.headline == (
        "a kernel still running: every warp moved between dumps 3 s apart (1 warp)"
    )
    assert "the kernel runs" in incident.oncall.next_step.text
    assert incident.oncall.problem.endswith(
        "every warp moved between two dumps: a kernel still running"
    )
    assert "second dump" not in incident.oncall.next_step.text


def test_dumps_of_different_processes_are_not_compared_and_it_is_said_why(tmp_path):
    dumps = _pair(tmp_path, second="core_node1.5151.1767225604.nvcudmp")
    incident = analyze_incident(dumps, NATIVE)
    assert incident.motion.compared == ()
    (skipped,) = incident.motion.not_compared
    assert skipped.why == (
        "different processes: host node1, pid 4242 and host node1, pid 5151 (file names)"
    )
    assert "did not move" not in incident.verdict.headline
    report = build_incident_report(incident)
    assert report["motion"]["not_compared"] == [
        {"dumps": [str(dumps[0]), str(dumps[1])], "why": skipped.why}
    ]
    assert "not compared: " in render("incident", report, "text")


def test_one_hang_dump_makes_no_comparison(tmp_path):
    (dump, _) = _pair(tmp_path)
    bad = tmp_path / "core_node1.4242.1767225609.nvcudmp"
    bad.write_bytes(b"cut short")
    incident = analyze_incident([dump, bad], NATIVE)
    assert incident.motion is None
    assert build_incident_report(incident)["motion"] is None


def test_the_comparison_is_in_every_format_and_its_json_meets_the_schema(tmp_path):
    report = build_incident_report(analyze_incident(_pair(tmp_path, moved=True), NATIVE))
    schema = json.loads(
        resources.files("postmortem.report").joinpath("incident.schema.json").read_text()
    )
    jsonschema.Draft202012Validator(schema).validate(report)
    (compared,) = report["motion"]["compared"]
    assert compared["counts"] == {"did-not-move": 2, "moved": 2, "gone": 0, "new": 0}
    assert compared["process"]["pid"] == 4242
    assert [w["motion"] for w in compared["warps"]][:2] == ["did-not-move"] * 2
    text = render("incident", report, "text")
    assert "two dumps of one process compared, 4 s apart" in text
    assert "device 0 SM 1 warp 0 grid 9 block (1,0,0) at +0x140" in text
    assert "### Two dumps of one process, 4 s apart" in render("incident", report, "md")
    html = render("incident", report, "html")
    assert "<h3>Two dumps of one process, 4 s apart</h3>" in html
    assert "<td><code>+0x140</code></td><td>2</td>" in html


def test_a_comparison_that_fails_is_a_reason_never_a_traceback(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("a row no reader expected")

    monkeypatch.setattr("postmortem.analysis.fleet.stuck.compare_dumps", broken)
    dumps = _pair(tmp_path)
    incident = analyze_incident(dumps, NATIVE)
    assert incident.motion.compared == ()
    (skipped,) = incident.motion.not_compared
    assert skipped.dumps == (str(dumps[0]), str(dumps[1]))
    assert skipped.why == (
        "could not be compared: internal error: ValueError: a row no reader expected"
    )
    assert "second dump" in incident.oncall.next_step.text  # nothing compared: still asked


def test_scan_incident_and_analyze_of_the_same_two_dumps_give_the_same_verdict(tmp_path):
    # GIVEN two hang dumps of one process, alone in a folder
    dumps = _pair(tmp_path, moved=True)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    # WHEN `analyze A B` and `scan --incident` read them
    analyzed = invoke("analyze", *dumps, "--format", "json", "--no-gdb", "--no-disasm", env=env)
    scan = ("scan", tmp_path, "--incident", "--no-cache", "--no-disasm", "-j", "1")
    scanned = invoke(*scan, "--format", "json", env=env)
    # THEN both compare the two dumps, and say the same
    assert analyzed.returncode == scanned.returncode == 0, (analyzed.stderr, scanned.stderr)
    report = json.loads(analyzed.stdout)
    incident = next(
        line for line in map(json.loads, scanned.stdout.splitlines()) if line["type"] == "incident"
    )
    assert incident["verdict"] == report["verdict"]
    assert incident["verdict"]["headline"].startswith("hang: 2 warps of grid 9 did not move")
    assert incident["oncall"] == report["oncall"]
