"""The cross-check's comparisons, on a tiny dump and cuda-gdb output given as text.

What cuda-gdb prints is written here as a `GdbSession` (no cuda-gdb runs); the real tool
on the fixture corpus is tests/tools/test_crosscheck.py.
"""

from __future__ import annotations

from dataclasses import replace

from postmortem import open_coredump
from postmortem.analysis.crosscheck import crosscheck, named_by_gdb
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from postmortem.analysis.fault.inline import FrameName
from postmortem.cubin.sass import SourceFrame
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.gdb.command import CommandOutput
from postmortem.gdb.run import GdbSession
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

FAULT = cubin("oob_store").fault["offset"]
PC = 0x7F3C_2A00_00D0  # the default load address of the first module, plus FAULT
INLINED = "_ZN2pm5storeIfEEvPT_iS1_"
KERNELS = """\
  Kernel Parent Dev Grid Status   SMs Mask  GridDim  BlockDim Invocation
*      0      -   0    1 Active 0x00000008 (64,1,1) (256,1,1) oob_kernel()
"""
BACKTRACE = (
    f"#0  0x{PC:016x} in oob_kernel<<<(64,1,1),(256,1,1)>>> () at include/store.cuh:10 "
    f"in {INLINED} inlined from store.cuh:16\n"
)


def _dump(tmp_path, layout="r400"):
    """oob_store: lanes 3-7 of warp 2 of block (5,0,0) on SM 3 fault at the planted store."""
    module = ModuleSpec("oob_store")
    lanes = [LaneSpec(FAULT, 14, lane=n) for n in range(8)]
    for lane in lanes[:3]:
        lane.exception = 0
    grid = GridSpec(1, module, grid_dim=(64, 1, 1), block_dim=(256, 1, 1))
    block = BlockSpec(1, [WarpSpec(lanes, warp_id=2)], (5, 0, 0), sm=3)
    spec = DumpSpec([DeviceSpec([module], [grid], [block])], layout=layout)
    return write_tiny_dump(tmp_path / "t.nvcudmp", spec)


def _session(pc=PC, thread=67, lane=3, diagnoses=(), retried=False):
    banner = (
        "CUDA Exception: Warp Illegal Address\n"
        f"The exception was triggered at PC 0x{pc:x} (store.cuh:10)\n"
        f"[Current focus set to CUDA kernel 0, grid 1, block (5,0,0), thread ({thread},0,0), "
        f"device 0, sm 3, warp 2, lane {lane}]\n"
    )
    outputs = (
        CommandOutput(
            "info symbol $errorpc",
            "oob_kernel(float*, int, float) + 208 in section .text._Z10oob_kernelPfif of x.o\n",
            True,
        ),
        CommandOutput("info cuda kernels", KERNELS, True),
        CommandOutput("bt", BACKTRACE, True),
    )
    return GdbSession("11.8", (), banner, outputs, "", tuple(diagnoses), 0, 1.0, retried)


def _check(tmp_path, session, layout="r400"):
    with open_coredump(_dump(tmp_path, layout)) as core:
        return crosscheck(core, session)


def test_cuda_gdb_agreeing_on_every_fact_gives_no_disagreement(tmp_path):
    check = _check(tmp_path, _session())
    assert check.opened and check.disagreements == ()
    assert [c.fact for c in check.agreements] == [
        "exception",
        "error PC",
        "focus is a faulting lane",
        "kernel + offset of the error PC",
        "kernels",
    ]
    assert check.backtrace[0].inline_function == INLINED
    assert check.longer_rows == ()


def test_a_different_error_pc_and_a_non_faulting_focus_are_disagreements(tmp_path):
    check = _check(tmp_path, _session(pc=PC + 0x10, thread=64, lane=0))
    assert {(c.fact, c.native, c.cuda_gdb) for c in check.disagreements} == {
        ("error PC", f"0x{PC:x}", f"0x{PC + 0x10:x}"),
        (
            "focus is a faulting lane",
            "yes",
            "no: block (5,0,0) thread (64,0,0) device 0 sm 3 warp 2 lane 0",
        ),
    }


def test_a_refused_dump_compares_nothing_and_keeps_the_reason(tmp_path):
    refusal = Finding(FindingCode.GDB_COREDUMP_REFUSED, Severity.ERROR, "refused")
    check = _check(tmp_path, _session(diagnoses=[refusal]))
    assert not check.opened and check.backtrace == ()
    assert check.checks and all(c.cuda_gdb is None and c.agrees is None for c in check.checks)
    assert check.notes == (refusal,)


def test_a_failure_the_retry_cured_is_not_a_note(tmp_path):
    unwinder = Finding(FindingCode.GDB_PYTHON_UNWINDER_FAULT, Severity.WARNING, "unwinder")
    assert _check(tmp_path, _session(diagnoses=[unwinder], retried=True)).notes == ()
    assert _check(tmp_path, _session(diagnoses=[unwinder])).notes == (unwinder,)


def test_rows_longer_than_cuda_gdb_11_8_reads_are_named(tmp_path):
    check = _check(tmp_path, _session(), layout="r575")
    assert check.longer_rows == ("SM table", "CTA table", "warp table", "lane table")


def test_cuda_gdb_names_a_frame_only_where_the_line_table_did_not(tmp_path):
    # GIVEN a site whose chain (without line-table names) has store.cuh:10 innermost, as
    # cuda-gdb's bt says
    with open_coredump(_dump(tmp_path)) as core:
        (site,) = localize(core, LocalizeOptions(nvdisasm=False))
    chain = (SourceFrame("/build/include/store.cuh", 10), SourceFrame("oob_store.cu", 19))
    bare = replace(site, chain=chain, frame_names=(None, None))
    check = _check(tmp_path, _session())
    # WHEN named after cuda-gdb
    (named,), same = named_by_gdb([bare], check)
    # THEN the frame at cuda-gdb's file and line gets its inlined function, no check is added
    assert named.frame_names == (FrameName(INLINED, "cuda-gdb"), None)
    assert same == check
    # AND at another line the site is left as it was
    moved = replace(bare, chain=(SourceFrame("store.cuh", 11), chain[1]))
    assert named_by_gdb([moved], check) == ((moved,), check)
    assert named_by_gdb([bare], None) == ((bare,), None)


def test_where_the_line_table_named_the_frame_cuda_gdb_checks_the_name(tmp_path):
    # GIVEN a site named by the line table (the tiny dump's cubin has -lineinfo)
    with open_coredump(_dump(tmp_path)) as core:
        (site,) = localize(core, LocalizeOptions(nvdisasm=False))
    assert site.frame_names[0] == FrameName(INLINED, "line table")
    check = _check(tmp_path, _session())
    # WHEN cuda-gdb's bt is put to use
    (named,), checked = named_by_gdb([site], check)
    # THEN the names stay the line table's, and cuda-gdb's becomes an agreeing check
    assert named == site
    extra = checked.checks[len(check.checks) :]
    assert [(c.fact, c.agrees) for c in extra] == [("function at store.cuh:10", True)]
