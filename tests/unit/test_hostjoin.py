"""Host evidence joined to a dump: each fact compared, matched names, findings.

The dumps are tiny dumps the tests write (tests/tinydump.py); the faulting instruction is
given as text and examined for real, so the lanes' addresses come from their registers.
The host logs are written here, to the facts of those dumps: test-made lines in the formats
of fixtures/hostlogs/, not recorded output.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from postmortem import open_coredump
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from postmortem.analysis.forensics.forensics import examine
from postmortem.analysis.host.join import join_host
from postmortem.analysis.host.match import BASE_NAME, EXACT, NO_PARAMETERS, match_kernel
from postmortem.analysis.host.sglang import (
    IN_KERNEL_NAME,
    IN_TEMPLATE,
    LOOSE,
    best_api_match,
    match_api,
)
from postmortem.codemap import CodeMap
from postmortem.cubin.sass import parse_sass
from postmortem.findings import FindingCode
from postmortem.host.reader import parse_host_lines
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
ADDRESS = 0x7F00_1010_0010
"""Where lane 3 stores (16 bytes into a page); lanes 4 and 5 store 4 KiB apart after it."""
PCI = ((0x18, 0),)
"""The tiny dump's GPU (tests/tinydump.py: pciBusId 0x18)."""


def _sites(tmp_path, block=(5, 0, 0)):
    lanes = [
        LaneSpec(FAULT, 14, lane=n, registers={2: a & 0xFFFF_FFFF, 3: a >> 32})
        for n, a in ((3, ADDRESS), (4, ADDRESS + 4096), (5, ADDRESS + 8192))
    ]
    module = ModuleSpec("oob_store")
    device = DeviceSpec(
        [module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec(lanes)], block_idx=block, sm=3)]
    )
    (store,) = parse_sass(
        "        /*00d0*/                   STG.E desc[UR4][R2.64], R7 ;"
    ).instructions
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))) as core:
        code_map = CodeMap(core)
        sites = localize(core, LocalizeOptions(nvdisasm=False), code_map)
        return tuple(replace(s, forensics=examine(core, code_map, s.faults, store)) for s in sites)


def _join(tmp_path, text, sites=None, pci=PCI, name="host.log"):
    sites = _sites(tmp_path) if sites is None else sites
    lines = text.strip("\n").split("\n")
    host = parse_host_lines(Path(name), lines, len(text), 0)
    return join_host([host], sites, ["_Z10oob_kernelPfif"], tmp_path / "t.nvcudmp", pci)


def _facts(join):
    return [(c.fact, c.agrees, c.how) for c in join.checks]


def _xid(address, pci="0000:18:00", access="ACCESS_TYPE_VIRT_WRITE"):
    return (
        f"NVRM: Xid (PCI:{pci}): 31, pid=4242, name=python, Ch 00000008, intr 00000000. MMU "
        f"Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
        f"0x{address >> 32:x}_{address & 0xFFFF_FFFF:08x}. Fault is of type FAULT_PDE {access}"
    )


# --- The driver ---------------------------------------------------------------------------


def test_an_xid_fault_at_a_lane_s_address_agrees(tmp_path):
    join = _join(tmp_path, _xid(ADDRESS + 4096))
    assert _facts(join) == [
        ("GPU (PCI)", True, "the dump's GPU"),
        ("fault address", True, "same address"),
        ("access", True, "the instruction's kind of access"),
    ]
    assert join.checks[1].dump == "0x7f0010101010 (block (5,0,0) thread (4,0,0))"
    assert not join.disagreements and not join.findings


def test_an_xid_fault_on_a_lane_s_page_agrees_as_the_same_page(tmp_path):
    join = _join(tmp_path, _xid(ADDRESS + 0x2000 & ~0xFFF))
    assert _facts(join)[1] == ("fault address", True, "same 4 KiB page")


def test_an_xid_fault_elsewhere_disagrees_and_says_by_how_much(tmp_path):
    # GIVEN an MMU fault 1 MiB past the last lane's address, read where the lanes store
    join = _join(tmp_path, _xid(ADDRESS + 8192 + 0x10_0000, access="ACCESS_TYPE_VIRT_READ"))
    # THEN the address and the kind of access disagree, and a finding says so
    assert _facts(join)[1:] == [
        ("fault address", False, "different: +0x100000 bytes from the nearest lane's"),
        ("access", False, "another kind of access"),
    ]
    (finding,) = join.findings
    assert finding.code is FindingCode.HOST_DISAGREES
    assert finding.message == "the host log disagrees with the dump on: fault address, access"


def test_an_xid_of_another_gpu_is_not_compared_with_this_dump_s_lanes(tmp_path):
    join = _join(tmp_path, _xid(ADDRESS, pci="0000:db:00"))
    assert _facts(join) == [("GPU (PCI)", False, "another GPU than the dump's")]


def test_without_computed_addresses_the_fault_address_is_not_compared(tmp_path):
    sites = tuple(replace(s, forensics=None) for s in _sites(tmp_path))
    join = _join(tmp_path, _xid(ADDRESS), sites=sites)
    assert ("fault address", None, "the dump holds no computed address to compare") in _facts(join)


def test_xid_79_of_the_dump_s_gpu_is_an_error_finding(tmp_path):
    join = _join(tmp_path, "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus")
    (finding,) = join.findings
    assert finding.code is FindingCode.GPU_LOST and finding.caveat is None
    other = _join(tmp_path, "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus")
    assert other.findings[0].caveat is not None and "18:00" in other.findings[0].caveat


def test_coredump_progress_is_compared_and_names_the_dump_written(tmp_path):
    sites = _sites(tmp_path)
    pc = sites[0].error_pc
    text = f"""
[00:40:46.611453] coredump: Detected an exception of type CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS (14)
[00:40:46.611458] coredump:   - Device: 0
[00:40:46.611460] coredump:   - SM: 3
[00:40:46.611465] coredump:   - PC 0x{pc:x}
[00:40:46.806153] coredump: Writing ELF file to /persistent/t.nvcudmp
"""
    assert _facts(_join(tmp_path, text, sites=sites)) == [
        ("exception", True, "same exception code"),
        ("device and SM", True, "a faulting SM"),
        ("error PC", True, "same PC"),
        ("dump file", True, "the run wrote this dump"),
    ]
    other = text.replace("SM: 3", "SM: 9").replace("t.nvcudmp", "u.nvcudmp")
    assert [agrees for _, agrees, _ in _facts(_join(tmp_path, other, sites=sites))] == [
        True, False, True, False,
    ]  # fmt: skip


def test_cuda_gdb_s_kernel_and_focus_are_compared(tmp_path):
    text = """
CUDA Exception: Warp Illegal Address
The exception was triggered at PC 0x10  oob_kernel(float*, int, float)
[Current focus set to CUDA kernel 0, grid 1, block (5,0,0), thread (3,0,0), device 0, \
sm 3, warp 0, lane 3]
"""
    facts = _facts(_join(tmp_path, text))
    assert ("kernel", True, EXACT) in facts
    assert ("block and thread", True, "a faulting thread") in facts
    assert ("error PC", False, "another PC") in facts


# --- compute-sanitizer and device asserts ---------------------------------------------------


def test_a_sanitizer_error_in_the_faulting_kernel_is_compared_fact_by_fact(tmp_path):
    text = f"""
========= Invalid __global__ write of size 4 bytes
=========     at oob_kernel(float *, int, float)+0x{FAULT:x} in oob_store.cu:9
=========     by thread (4,0,0) in block (5,0,0)
=========     Address 0x{ADDRESS + 4096:x} is out of bounds
"""
    assert _facts(_join(tmp_path, text)) == [
        ("kernel", True, NO_PARAMETERS),
        ("offset", True, "same instruction"),
        ("block and thread", True, "a faulting thread"),
        ("address", True, "same address"),
    ]


def test_a_sanitizer_error_of_another_run_disagrees_on_what_differs(tmp_path):
    text = """
========= Invalid __global__ write of size 4 bytes
=========     at oob_kernel(float *, int, float)+0x40
=========     by thread (9,0,0) in block (1,0,0)
=========     Address 0x7f0010100004 is out of bounds
"""
    facts = _facts(_join(tmp_path, text))
    assert [(fact, agrees) for fact, agrees, _ in facts] == [
        ("kernel", True), ("offset", False), ("block and thread", False), ("address", False),
    ]  # fmt: skip
    assert facts[3][2].endswith("(a sanitizer run is another run: its buffers may lie elsewhere)")


def test_a_device_assert_naming_another_function_is_not_called_another_kernel(tmp_path):
    # The driver prints the function the assert is in (often inlined into the kernel, a
    # lambda's operator()): compared with the assert the dump decodes, never with the kernel.
    text = (
        "k.cu:3: indexSelectSmallIndex: block: [5,0,0], thread: [3,0,0] Assertion `i < n` failed."
    )
    assert _facts(_join(tmp_path, text)) == [
        (
            "kernel",
            None,
            "an assert names the function it is in, which may be inlined into the kernel",
        ),
        ("block and thread", True, "a faulting thread"),
        ("assert", None, "the dump decodes no assert"),
    ]


# --- The Python traceback ------------------------------------------------------------------


def test_the_traceback_is_where_the_error_surfaced_and_the_dump_names_the_kernel(tmp_path):
    text = """
Traceback (most recent call last):
  File "serve.py", line 76, in step
    torch.cuda.synchronize()
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the \
stacktrace below might be incorrect.
"""
    join = _join(tmp_path, text)
    assert _facts(join) == [("exception", True, "the error is the exception's kind")]
    (finding,) = join.findings
    assert finding.code is FindingCode.ERROR_SURFACED_ELSEWHERE
    assert finding.message.startswith("the Python traceback ends at serve.py:76 in step: that is")
    assert finding.message.endswith(
        f"the dump names the kernel: oob_kernel+0x{FAULT:x} (Warp Illegal Address)"
    )
    assert finding.caveat is None  # the log itself says the report was asynchronous


def test_a_device_assert_error_disagrees_with_an_illegal_address(tmp_path):
    text = "torch.AcceleratorError: CUDA error: device-side assert triggered"
    assert _facts(_join(tmp_path, text)) == [("exception", False, "another kind of error")]


def test_a_hang_dump_compares_no_exception(tmp_path):
    text = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert _facts(_join(tmp_path, text, sites=())) == [
        ("exception", None, "the dump records no exception")
    ]


# --- SGLang kernel API log and files --------------------------------------------------------


def test_the_api_call_that_launched_the_kernel_is_found_and_its_inputs_flagged(tmp_path):
    text = """
[2026-03-19 00:48:20] SGLang Kernel API Call: sglang.custom_op.oob_kernel
Positional input arguments:
  arg[0]=Tensor(
      shape=(64,)
      dtype=torch.float32
      device=cuda:0
      requires_grad=False
      is_contiguous=True
      min=0.000000
      max=inf
      mean=inf
      nan_count=0
      inf_count=3
    )
Dumped inputs to: dumps/20260319_004820_001_pid1_sglang.custom_op.oob_kernel_call0001
[2026-03-19 00:48:20] SGLang Kernel API Call: RMSNorm.forward
"""
    join = _join(tmp_path, text)
    (api,) = join.api
    assert api.match is not None and (api.match.line, api.how) == (1, BASE_NAME)
    assert [c.name for c in api.last_calls] == ["sglang.custom_op.oob_kernel", "RMSNorm.forward"]
    codes = [f.code for f in join.findings]
    assert codes == [FindingCode.NAN_OR_INF_INPUT, FindingCode.REPLAYABLE_INPUTS]
    assert join.findings[0].evidence == ("arg[0]: nan_count=0, inf_count=3, shape (64,)",)
    assert join.findings[1].remedy == (
        "replay it offline: torch.load('dumps/20260319_004820_001_pid1_sglang.custom_op."
        "oob_kernel_call0001/inputs.pt'), with metadata.json beside it"
    )


def test_no_api_call_matching_the_kernel_is_said_not_invented(tmp_path):
    text = "[2026-03-19 00:47:06] SGLang Kernel API Call: RMSNorm.forward"
    (api,) = _join(tmp_path, text).api
    assert (api.match, api.kernel, api.how) == (None, None, None)


def test_a_coredump_refused_under_attach_on_exception_is_a_warning_with_its_remedy(tmp_path):
    # GIVEN the driver's refusal, then the CUDA error of the exception no dump was written for
    text = """
CUDA coredump is not supported with CUDA attach on exception
RuntimeError: CUDA error: an illegal memory access was encountered
"""
    join = _join(tmp_path, text, name="run.log")
    # THEN the refusal is said, why, and what to do; the CUDA error is still compared
    refused = [f for f in join.findings if f.code is FindingCode.COREDUMP_ATTACH_CONFLICT]
    (finding,) = refused
    assert finding.severity.value == "warning"
    assert finding.message.startswith(
        "the CUDA driver refused to write a coredump because CUDA_DEVICE_WAITS_ON_EXCEPTION was "
        "set beside CUDA_ENABLE_COREDUMP_ON_EXCEPTION"
    )
    assert finding.evidence == (
        "run.log:1: CUDA coredump is not supported with CUDA attach on exception",
    )
    assert "unset CUDA_DEVICE_WAITS_ON_EXCEPTION" in finding.remedy
    assert "`postmortem capture --check`" in finding.remedy
    assert [(c.source, c.fact, c.agrees) for c in join.checks] == [
        ("CUDA error", "exception", True)
    ]
    assert [f.code for f in join.findings] == [FindingCode.COREDUMP_ATTACH_CONFLICT]


def test_a_file_with_nothing_recognized_is_named(tmp_path):
    join = _join(tmp_path, "hello\nworld", name="app.log")
    (finding,) = join.findings
    assert finding.code is FindingCode.HOST_LOG_NOT_RECOGNIZED
    assert finding.message.startswith("app.log: not recognized: ")
    assert join.checks == () and join.api == ()


def test_a_cut_file_says_how_much_was_read(tmp_path):
    host = parse_host_lines(Path("big.log"), ["x"], 3 << 30, (3 << 30) - (8 << 20))
    join = join_host([host], _sites(tmp_path), [], tmp_path / "t.nvcudmp", PCI)
    cut = [f for f in join.findings if f.code is FindingCode.HOST_LOG_CUT]
    assert cut[0].message.startswith("big.log: only its last 8.0 MiB of 3.0 GiB were read")


# --- Name matching -------------------------------------------------------------------------

TEMPLATED = "_ZN5flash11norm_kernelIN7cutlass6half_tELi128EEEvPT_i"
"""void flash::norm_kernel<cutlass::half_t, 128>(cutlass::half_t*, int)"""


@pytest.mark.parametrize(
    ("host", "how"),
    [
        ("oob_kernel(float*, int, float)", EXACT),
        ("oob_kernel(float *, int, float)", NO_PARAMETERS),
        ("void ns::oob_kernel<int>(int)", BASE_NAME),
        ("other_kernel(float*, int, float)", None),
        ("", None),
    ],
)
def test_a_tool_s_kernel_name_is_matched_with_how(host, how):
    assert match_kernel(host, "_Z10oob_kernelPfif") == how


@pytest.mark.parametrize(
    ("call", "kernel", "how"),
    [
        ("oob_kernel", "_Z10oob_kernelPfif", EXACT),
        ("sglang.custom_op.oob_kernel", "_Z10oob_kernelPfif", BASE_NAME),
        ("sglang.custom_op.norm.forward", TEMPLATED, IN_KERNEL_NAME),
        ("sglang.custom_op.cutlass_gemm", "_Z10oob_kernelPfif", None),
        ("MyOp.half_t", TEMPLATED, IN_TEMPLATE),
        ("sglang.custom_op.NORM_Kernel", TEMPLATED, LOOSE),
        ("RMSNorm.forward", "_Z10oob_kernelPfif", None),
    ],
)
def test_an_api_name_is_matched_with_how(call, kernel, how):
    assert match_api(call, kernel) == how


def test_the_strongest_match_wins_and_the_latest_among_equals():
    kernels = ["_Z10oob_kernelPfif"]
    calls = ["x.oob", "sglang.custom_op.oob_kernel", "y.oob", "sglang.custom_op.oob_kernel", "z"]
    assert best_api_match(calls, kernels) == (3, kernels[0], BASE_NAME)
    assert best_api_match(["z", "q"], kernels) is None
