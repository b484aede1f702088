"""The on-call summary: problem class, strongest signal, best guess, ruled out, next step, each
drawn from the analysis of a tiny dump (no external tool) and saying where it came from."""

from __future__ import annotations

from dataclasses import replace

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.crosscheck import Check, CrossCheck
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.hang.hang import HangAnalysis
from postmortem.analysis.oncall.summary import ProblemClass, oncall_summary
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.report.context import build_report
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
    renamed,
    write_tiny_dump,
)

NATIVE = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False)


def _analysis(tmp_path, module, lanes, name="t.nvcudmp"):
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec(lanes)])])
    return analyze_dump(write_tiny_dump(tmp_path / name, DumpSpec([device])), NATIVE)


def _fault(tmp_path, cubin_name, exception=14, abi="v7", name="t.nvcudmp"):
    offset = cubin(cubin_name, abi).fault["offset"]
    lanes = [LaneSpec(offset, exception, lane=n) for n in range(4)]
    return _analysis(tmp_path, ModuleSpec(cubin_name, abi), lanes, name)


def test_a_fault_is_an_illegal_access_localized_to_kernel_frame_and_source(tmp_path):
    # GIVEN four lanes of oob_store faulting with Warp Illegal Address
    analysis = _fault(tmp_path, "oob_store")
    # WHEN summarized for the on-call note
    summary = oncall_summary(analysis)
    # THEN the class, the signal and the guess come from the dump, each with its source
    assert summary.problem_class is ProblemClass.ILLEGAL_ADDRESS
    assert summary.problem == (
        "illegal memory access in a kernel (Warp Illegal Address, exception 14)"
    )
    signal = summary.strongest_signal
    assert signal.text == "4 lanes in 1 warp recorded Warp Illegal Address at oob_kernel+0xd0"
    assert signal.source == "native reader: lane rows"
    guess = summary.best_guess
    assert guess.kernel.text == "oob_kernel(float*, int, float) at +0xd0"
    assert guess.frame.text == "include/store.cuh:10 in void pm::store<float>(float*, int, float)"
    assert guess.frame.source == "line table"
    # AND what was not worked out is said, not guessed: no nvdisasm ran, so no instruction
    assert guess.instruction is None
    assert "instruction: nvdisasm not run" in guess.unknown
    # AND the next step reads the innermost frame, a memory fault confirmed under the sanitizer
    assert summary.next_step.text.startswith("read include/store.cuh:10 in pm::store<float>")
    assert "compute-sanitizer" in summary.next_step.text


def test_a_device_assert_points_at_the_assert_message(tmp_path):
    summary = oncall_summary(_fault(tmp_path, "device_assert", exception=12))
    assert summary.problem_class is ProblemClass.DEVICE_ASSERT
    assert summary.problem == "device-side assert (Warp Assert, exception 12)"
    assert summary.best_guess.frame.text.startswith("device_assert.cu:10 in ")
    assert summary.next_step.source == "device-side assert: exception 12"
    assert "--host-log" in summary.next_step.text


def test_no_line_info_says_so_and_the_next_step_is_the_finding_s_remedy(tmp_path):
    # GIVEN a cubin built without -lineinfo and without a tkinfo note (ptxas 11.8)
    summary = oncall_summary(_fault(tmp_path, "oob_store_nolineinfo"))
    # THEN the guess has no frame, and says why
    assert summary.best_guess.frame is None
    assert (
        "source line: the cubin has no .debug_line, and no .note.nv.tkinfo to say how it was "
        "compiled"
    ) in summary.best_guess.unknown
    # AND the next step is the no-line-info remedy, then a capture
    assert summary.next_step.source == "no-line-info"
    assert "CCACHE_DISABLE=1" in summary.next_step.text
    assert summary.next_step.text.endswith("then capture again with `postmortem capture -- CMD`")


def test_a_cubin_whose_tkinfo_lacks_lineinfo_is_suspected_of_a_stale_cache(tmp_path):
    # GIVEN the CUDA 13 cubin built without -lineinfo: its tkinfo note records its options
    summary = oncall_summary(_fault(tmp_path, "oob_store_nolineinfo", abi="v8"))
    # THEN the missing lines are put down to the options it was really compiled with
    (why,) = [gap for gap in summary.best_guess.unknown if gap.startswith("source line:")]
    assert '"-arch sm_90 -m 64" lack -lineinfo' in why
    assert "a compiler cache handed back an object compiled without it" in why
    # AND a stale cache is not ruled out
    assert not [s for s in summary.ruled_out if "stale" in s.text]
    assert summary.next_step.source == "no-line-info"


def test_a_tkinfo_note_with_lineinfo_rules_out_a_stale_cache(tmp_path):
    summary = oncall_summary(_fault(tmp_path, "oob_store", abi="v8"))
    (stale,) = [s for s in summary.ruled_out if "stale compiler-cache" in s.text]
    assert '"-lineinfo -arch sm_90 -m 64"' in stale.text
    assert stale.source == "build notes: .note.nv.tkinfo"


def test_lines_removed_after_compiling_rule_out_the_cache_and_point_at_packaging(tmp_path):
    summary = oncall_summary(_fault(tmp_path, "oob_store_stripped", abi="v8"))
    assert any("removed after compiling" in s.text for s in summary.ruled_out)
    assert summary.next_step.source == "line-info-removed"


def test_a_disagreement_with_cuda_gdb_is_the_next_step_and_rules_nothing_out(tmp_path):
    # GIVEN a fault whose cross-check disagrees on the exception
    analysis = _fault(tmp_path, "oob_store")
    checks = (
        Check("exception", "Warp Illegal Address", "Warp Illegal Address"),
        Check("error PC", "0x7f3c2a0000d0", "0x7f3c2a0000e0"),
    )
    analysis = replace(analysis, crosscheck=CrossCheck("11.8", checks, True, (), ()))
    # WHEN summarized
    summary = oncall_summary(analysis)
    # THEN the disagreement comes first, and the cross-check rules nothing out
    assert summary.next_step.source == "cuda-gdb cross-check"
    assert summary.next_step.text.startswith("cuda-gdb 11.8 disagrees on error PC: ")
    assert not [s for s in summary.ruled_out if s.source == "cuda-gdb cross-check"]
    # AND an agreeing cross-check is what rules out a misreading
    agreeing = replace(analysis, crosscheck=CrossCheck("11.8", checks[:1], True, (), ()))
    (agreed,) = [s for s in oncall_summary(agreeing).ruled_out if s.source.startswith("cuda-gdb")]
    assert agreed.text == "not a misreading of the dump: cuda-gdb 11.8 agrees on 1 fact (exception)"


def test_a_cross_check_without_a_version_is_named_and_the_dump_path_kept(tmp_path):
    # GIVEN a disagreeing cross-check whose cuda-gdb gave no version, on a path with two spaces
    analysis = _fault(tmp_path, "oob_store", name="rank  0.nvcudmp")
    checks = (Check("error PC", "0x7f3c2a0000d0", "0x7f3c2a0000e0"),)
    analysis = replace(analysis, crosscheck=CrossCheck(None, checks, True, (), ()))
    # WHEN summarized
    step = oncall_summary(analysis).next_step
    # THEN the command to run names the dump exactly as given
    assert step.text == (
        f"cuda-gdb disagrees on error PC: compare both readings by hand (`postmortem debug "
        f"{tmp_path / 'rank  0.nvcudmp'}`) before trusting either"
    )


def _hang(tmp_path):
    stall = cubin("divergent_barrier").stalls["barrier"]["offset"]
    return _analysis(
        tmp_path, ModuleSpec("divergent_barrier"), [LaneSpec(stall, lane=n) for n in range(32)]
    )


def test_a_hang_without_a_pattern_asks_for_a_second_dump(tmp_path):
    summary = oncall_summary(_hang(tmp_path))
    assert summary.problem_class is ProblemClass.HANG
    assert "32 lanes in 1 warp of divergent_barrier_kernel" in summary.strongest_signal.text
    assert summary.best_guess.kernel.source == "native reader: warp PCs"
    assert summary.ruled_out[0].text == (
        "not a fault: no lane, warp or SM row records an exception"
    )
    assert "postmortem trigger --pid PID" in summary.next_step.text


def test_a_hang_at_a_barrier_quotes_the_pattern_and_its_caveat(tmp_path):
    # GIVEN a hang analysis that found a divergent barrier
    analysis = _hang(tmp_path)
    pattern = Finding(
        FindingCode.DIVERGENT_BARRIER, Severity.ERROR, "block (1,0,0): 1 warp(s) wait",
        ("at the barrier 0x0140 BAR.SYNC 0x0: warps 0",), caveat="a dump is one instant",
    )  # fmt: skip
    hang = HangAnalysis(analysis.hang.groups, (pattern,), ())
    # WHEN summarized
    summary = oncall_summary(replace(analysis, hang=hang))
    # THEN it is a hang at a barrier, the pattern is the signal, the caveat the next step
    assert summary.problem_class is ProblemClass.HANG_AT_BARRIER
    assert summary.strongest_signal.text == (
        "block (1,0,0): 1 warp(s) wait (at the barrier 0x0140 BAR.SYNC 0x0: warps 0)"
    )
    assert summary.strongest_signal.source == "hang analysis: divergent-barrier"
    assert summary.next_step.text.endswith(
        "run `postmortem analyze FIRST SECOND`: the warps that did not move are the stuck ones "
        "(a dump is one instant)"
    )


def test_warps_parked_in_a_collective_kernel_are_a_collective_wait(tmp_path):
    # GIVEN a dump with no exception whose warps sit in a kernel named like NCCL's
    module = renamed(
        ModuleSpec("divergent_barrier"), b"divergent_barrier_kernel", b"ncclKernel_SendRecv_RING"
    )
    stall = cubin("divergent_barrier").stalls["spin"]["offset"]
    analysis = _analysis(tmp_path, module, [LaneSpec(stall, lane=n) for n in range(8)])
    assert analysis.state[0].kernel == "_Z24ncclKernel_SendRecv_RINGPViPf"
    # WHEN summarized
    summary = oncall_summary(analysis)
    # THEN it waits in a collective, and the next step is the other ranks' dumps
    assert summary.problem_class is ProblemClass.COLLECTIVE_WAIT
    assert "sit in ncclKernel_SendRecv_RING" in summary.strongest_signal.text
    assert "postmortem scan DIR --incident" in summary.next_step.text


def test_the_report_carries_the_summary_as_plain_data(tmp_path):
    report = build_report(_fault(tmp_path, "oob_store_nolineinfo"))
    oncall = report["oncall"]
    assert oncall["problem_class"] == "illegal-memory-access"
    assert oncall["best_guess"]["frame"] is None
    assert oncall["next_step"]["source"] == "no-line-info"
    assert all(set(s) == {"text", "source"} for s in oncall["ruled_out"])


def test_a_part_with_no_basis_says_so_in_every_format(tmp_path):
    # GIVEN a report whose summary has nothing for four of its parts
    report = build_report(_fault(tmp_path, "oob_store"))
    report["oncall"].update(strongest_signal=None, best_guess=None, ruled_out=[], next_step=None)
    # WHEN rendered
    text = render("analyze", report, "text")
    # THEN each part says it has no basis, and nothing was ruled out
    head = text.split("\n\n", 1)[0].splitlines()
    assert head[2:] == [
        "  strongest signal: no basis",
        "  best guess:       no basis",
        "  ruled out:        none checked",
        "  next step:        no basis",
    ]
    assert "**Ruled out:** none checked" in render("analyze", report, "md")
    assert "none checked" in render("analyze", report, "html")
