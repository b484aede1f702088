"""analyze_dump on tiny dumps with no external tool: verdict, census, state and provenance."""

from __future__ import annotations

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.verdict import VerdictKind
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

NATIVE = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False)


def _analyze(tmp_path, name, lanes):
    module = ModuleSpec(name)
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec(lanes)])])
    return analyze_dump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device])), NATIVE)


def test_a_fault_dump_is_analyzed_natively_end_to_end(tmp_path):
    # GIVEN four lanes faulting at oob_store's planted store
    fault = cubin("oob_store").fault["offset"]
    analysis = _analyze(tmp_path, "oob_store", [LaneSpec(fault, 14, lane=n) for n in range(4)])
    # THEN one site, one census row, a fault verdict and no hang analysis
    assert analysis.verdict.kind is VerdictKind.FAULT
    assert analysis.verdict.headline.endswith("at oob_kernel+0xd0")
    assert [(r.offset, r.counts.lanes) for r in analysis.census] == [(fault, 4)]
    assert analysis.hang is None
    assert [b.kernels for b in analysis.builds] == [("_Z10oob_kernelPfif",)]
    # AND the provenance says which tools were not run
    by_source = {t.source: t for t in analysis.provenance}
    assert (by_source["nvdisasm"].used, by_source["nvdisasm"].note) == (False, "not run")
    assert by_source["cuda-gdb"].note == analysis.gdb_note == "cuda-gdb not run (--no-gdb)"


def test_a_dump_without_exception_gets_a_hang_analysis(tmp_path):
    barrier = cubin("divergent_barrier").stalls["barrier"]["offset"]
    analysis = _analyze(
        tmp_path, "divergent_barrier", [LaneSpec(barrier, lane=n) for n in range(32)]
    )
    assert analysis.sites == () and analysis.census == ()
    assert analysis.verdict.kind is VerdictKind.HANG
    assert analysis.verdict.headline.startswith("no exception recorded: 1 live warp,")
    assert [(g.offset, g.lanes) for g in analysis.hang.groups] == [(barrier, 32)]
    assert [k.kernel for k in analysis.state] == ["_Z24divergent_barrier_kernelPViPf"]
    assert [b.kernels for b in analysis.builds] == [("_Z24divergent_barrier_kernelPViPf",)]
