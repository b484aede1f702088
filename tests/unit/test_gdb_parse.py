"""cuda-gdb parsers on recorded real output (fixtures/transcripts/cuda-gdb/**).

Each transcript file is one case (its id is the file's path under the cuda-gdb folder); the
parser is chosen by the file name and the expected value is spelled out below, exactly.
Live 11.8 recordings of the fixture dumps are checked against each dump's truth.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postmortem.gdb import (
    Parsed,
    Unparsed,
    diagnose,
    parse_backtrace,
    parse_blocks,
    parse_contexts,
    parse_devices,
    parse_disassembly,
    parse_exception_banner,
    parse_focus,
    parse_info_line,
    parse_info_symbol,
    parse_kernels,
    parse_lanes,
    parse_print_int,
    parse_sms,
    parse_threads,
    parse_warps,
)
from postmortem.gdb.model import CudaException, FocusCoords, Frame, Instruction
from tests.tooling import DUMPS, TRANSCRIPTS, load_transcript, require_files

CUDA_GDB = TRANSCRIPTS / "cuda-gdb"

PARSERS = {
    "info-cuda-devices": parse_devices,
    "info-cuda-kernels": parse_kernels,
    "info-cuda-contexts": parse_contexts,
    "info-cuda-blocks": parse_blocks,
    "info-cuda-warps": parse_warps,
    "info-cuda-lanes": parse_lanes,
    "info-symbol": parse_info_symbol,
    "info-line": parse_info_line,
    "p-x": parse_print_int,
    "info-cuda-threads": parse_threads,
    "info-cuda-sms": parse_sms,
    "x-i": parse_disassembly,
    "disas": parse_disassembly,
    "bt": parse_backtrace,
    "banner": parse_exception_banner,
    "exception": parse_exception_banner,
    "switch-focus": parse_exception_banner,
}


def parser_for(path: Path):
    stem = path.stem.split("__")[-1]
    for key, parser in PARSERS.items():
        if key in stem:
            return parser
    raise AssertionError(f"no parser for transcript {path.name}")


def rows(value, *fields):
    return tuple(tuple(getattr(row, f) for f in fields) for row in value)


KERNEL = ("current", "kernel", "parent", "device", "grid", "status", "sms_mask", "grid_dim",
          "block_dim", "name", "args")  # fmt: skip
LANE = ("current", "device", "sm", "warp", "lane", "state", "pc", "thread_idx", "exception")
BLOCK = ("current", "kernel", "block_idx", "to_block_idx", "count", "state", "device", "sm")
FOCUS_0 = FocusCoords(kernel=0, grid=1, block=(0, 0, 0), thread=(0, 0, 0), device=0, sm=0,
                      warp=0, lane=0)  # fmt: skip
ACOS_KERNEL = ((True, 1, None, 0, 2, "Active", 0x00FFFFFF, (240, 1, 1), (128, 1, 1),
                "acos_main", "parms=..."),)  # fmt: skip
FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<unsigned char>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<unsigned char>, "
    "std::array<char*, 1ul>)"
)


THREAD = ("current", "kernel", "block_idx", "thread_idx", "to_block_idx", "to_thread_idx",
          "count", "pc", "device", "sm", "warp", "lane", "filename", "line")  # fmt: skip
SM = ("current", "device", "sm", "active_warps_mask")
INSN = ("address", "symbol", "offset", "is_pc", "is_error_pc")
# The blocks (even x of each 2-CTA cluster, by y) in 12.8's "info cuda threads" transcript.
CLUSTER_X_BY_Y = ((0, 2, 8, 12, 14, 16, 18, 24), (0, 6, 10, 14, 16, 28), (8, 14, 16, 28, 30),
                  (6, 10, 12, 24), (2, 4, 16, 22), (16,), (8, 10, 12, 28),
                  (4, 10, 12, 18, 22, 26))  # fmt: skip
CUTLASS_PARAMS = (
    "vllm::cutlass_3x_gemm_sm90_fp8<cutlass::float_e4m3_t, cutlass::bfloat16_t, "
    "vllm::c3x::ScaledEpilogue, cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, "
    "cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> >, "
    "cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum, "
    "cutlass::epilogue::TmaWarpSpecialized, false>::GemmKernel"
)
FLASH_ATTN = (
    "flash_attn_ext_vec<64, 1, (ggml_type)1, (ggml_type)1, false>(char const*, char const*, "
    "char const*, char const*, char const*, int const*, float*, float2*, float, float, float, "
    "float, unsigned int, float, int, uint3, int, int, int, int, int, int, int, int, int, int, "
    "int, long, int, int, long, int, int, int, int, int, long)"
)


def threads_12_8():
    blocks = [(x + d, y, 0) for y, xs in enumerate(CLUSTER_X_BY_Y) for x in xs for d in (0, 1)]
    return tuple(
        (i == 0, 0, b, (0, 0, 0), b, (319, 0, 0), 320,
         0x7FFEA15F61F0 if b[0] % 2 else 0x7FFEA15F9A70, None, None, None, None, None, None)
        for i, b in enumerate(blocks)
    )  # fmt: skip


def threads_acos_uncoalesced():
    return tuple((i == 0, 1, (0, 0, 0), (i, 0, 0), None, None, None, 0x88F88C, 0, 0, 0, i,
                  "acos.cu", 376) for i in range(10))  # fmt: skip


def threads_breakpoint_all():
    return tuple((False, 0, (1, 0, 0), (i, 0, 0), None, None, None, 0x948E58, 0, 11, 0, i,
                  "infoCommands.cu", 12) for i in range(6))  # fmt: skip


def disas_12_6(value):
    # 65 rows of add_kernel (<+0> … <+1024>), then the callee's rows, whose offsets restart.
    offsets = [16 * i for i in range(65)] + [16 * i for i in range(15)]
    return rows(value, *INSN) == tuple(
        (0x202156400 + 16 * i, None, off, i == 0, False) for i, off in enumerate(offsets)
    ) and [value[i].text for i in (0, 1, 63, 64, 65, 67, 68, 79)] == [
        "ISETP.NE.U32.AND P0, PT, RZ, UR2, PT", "@P0 BRA 0x140", "STG.E [R2.64], R0", "EXIT",
        "MOV R9, 0x0", "RET.REL.NODEC R8 0x0", "BRA 0x440", "NOP"]  # fmt: skip


def lanes_12_9():
    return tuple((i == 0, 0, 0, 0, i, "active", 0x8C, (i, 0, 0), None) for i in range(17))


def lanes_13_4():
    return tuple((i == 0, 0, 0, 0, i, "active", 0x7FFFC725DAD0, (i, 0, 0), None) for i in range(14))


EXPECTED = {
    "docs-12.9/info-cuda-kernels.txt": lambda v: rows(v, *KERNEL) == ACOS_KERNEL,
    "docs-13.4/info-cuda-kernels.txt": lambda v: rows(v, *KERNEL) == ACOS_KERNEL,
    "docs-12.9/info-cuda-lanes.txt": lambda v: rows(v, *LANE) == lanes_12_9(),
    "docs-13.4/info-cuda-lanes.txt": lambda v: rows(v, *LANE) == lanes_13_4(),
    "docs-12.9/info-cuda-blocks.txt": lambda v: (
        rows(v, *BLOCK) == ((True, 1, (0, 0, 0), (191, 0, 0), 192, "running", None, None),)
    ),
    "docs-13.4/info-cuda-blocks.txt": lambda v: (
        rows(v, *BLOCK) == ((True, 1, (0, 0, 0), (191, 0, 0), 192, "running", None, None),)
    ),
    "docs-12.9/info-cuda-blocks-uncoalesced.txt": lambda v: (
        rows(v, *BLOCK)
        == tuple(
            (i == 0, 1, (i, 0, 0), None, None, "running", 0, sm)
            for i, sm in enumerate((0, 3, 6, 9, 12, 15, 18, 21, 1))
        )
    ),
    "docs-13.4/info-cuda-contexts.txt": lambda v: (
        rows(v, "current", "context", "device", "state")
        == ((False, 0x080B9518, 0, "inactive"), (True, 0x08067948, 0, "active"))
    ),
    # Published samples a parser must refuse rather than misread.
    "docs-12.9/info-cuda-devices.txt": "13 cells for 10 columns",
    "docs-13.4/info-cuda-devices.txt": "11 cells for 10 columns",
    "docs-12.9/info-cuda-warps.txt": "6 cells for 9 columns",
    "docs-13.4/info-cuda-warps.txt": "6 cells for 9 columns",
    "docs-12.9/x-i.txt": lambda v: (
        v
        == tuple(
            Instruction(addr, "acos_main(acosParams)", off, text, addr == 0xA689C8, False)
            for addr, off, text in (
                (0xA689A8, 824, "MOV R0, c[0x0][0x34]"),
                (0xA689B8, 840, "MOV R3, c[0x0][0x28]"),
                (0xA689C0, 848, "IMUL R2, R0, R3"),
                (0xA689C8, 856, "MOV R0, c[0x0][0x28]"),
            )
        )
    ),
    "docs-12.9/exception-live.txt": lambda v: (
        v
        == CudaException(
            "Warp Illegal Address",
            False,
            0x555555C08620,
            "memexceptions_kernel.cu",
            17,
            None,
            None,
            None,
            FOCUS_0,
            signal_code=14,
        )
    ),  # fmt: skip
    "unstated/vllm-blog-banner-no-lineinfo.txt": lambda v: (
        v
        == CudaException(
            "Warp Illegal Address",
            False,
            0x7F31ABB9F6D0,
            None,
            None,
            "illegalMemoryAccessKernel(int*, int)",
            None,
            None,
            FocusCoords(0, 1, (0, 0, 0), (0, 0, 0), 0, 124, 0, 0),
            coredump_path="/tmp/cuda_coredump_xxx.1799919.1754898045",
        )
    ),  # fmt: skip
    "unstated/vllm-blog-banner-cuda-graph.txt": lambda v: (
        v
        == CudaException(
            "Warp Illegal Address",
            False,
            0x7FC2AFBA5E30,
            None,
            None,
            FILL,
            None,
            None,
            FocusCoords(0, 9, (17454, 0, 0), (0, 0, 0), 0, 0, 1, 0),
            coredump_path="/tmp/cuda_coredump_flow-matic.1929094.1754901120",
        )
    ),  # fmt: skip
    "unstated/enzyme-jl-issue428-banner.txt": lambda v: (
        v
        == CudaException(
            "Warp Invalid Address Space",
            False,
            0x5FF3BB8,
            "enz.jl",
            14,
            None,
            None,
            None,
            FocusCoords(0, 3, (0, 0, 0), (32, 0, 0), 2, 0, 1, 0),
            coredump_path="core_1665152103_cyclops_165521.nvcudmp",
        )
    ),  # fmt: skip
    "12.8/nvfp4-gemv-cluster__info-cuda-threads.txt": lambda v: rows(v, *THREAD) == threads_12_8(),
    "docs-12.9/info-cuda-threads-uncoalesced.txt": lambda v: (
        rows(v, *THREAD) == threads_acos_uncoalesced()
    ),
    "docs-13.4/info-cuda-threads-uncoalesced.txt": lambda v: (
        rows(v, *THREAD) == threads_acos_uncoalesced()
    ),
    "docs-12.9/info-cuda-threads-breakpoint-all.txt": lambda v: (
        rows(v, *THREAD) == threads_breakpoint_all()
    ),
    "docs-12.9/info-cuda-threads.txt": "7 cells for 8 columns",
    "docs-12.9/info-cuda-sms.txt": lambda v: (
        rows(v, *SM) == tuple((i == 0, 0, i, 0xFFFFFFFFFFFFFFFF) for i in range(9))
    ),
    "docs-13.4/info-cuda-sms.txt": lambda v: (
        rows(v, *SM) == tuple((i == 0, 0, i, 0xFFFFFFFFFFFFFFFF) for i in range(9))
    ),
    "12.6/jetson-indcall__disas.txt": disas_12_6,
    "docs-13.4/disas-pc.txt": lambda v: (
        v
        == (
            Instruction(
                0x555555C08FB0, "_Z16exception_kernelPv11exception_t", 3504, "ERRBAR", True, False
            ),
        )
    ),  # fmt: skip
    "docs-13.4/disas-errorpc.txt": lambda v: (
        v
        == (
            Instruction(
                0x555555C08620,
                "_Z16exception_kernelPv11exception_t",
                1056,
                "ST.E.U8.STRONG.SYS [R6.64], R5",
                False,
                True,
            ),
        )
    ),  # fmt: skip
    "unstated/vllm-blog2-cutlass-banner-inlined.txt": lambda v: (
        v
        == CudaException(
            "Warp Illegal Instruction",
            False,
            0x7F5687BBB580,
            "copy_sm90_tma.hpp",
            185,
            f"void cutlass::device_kernel<{CUTLASS_PARAMS}>({CUTLASS_PARAMS}::Params)",
            "copy_sm90_tma.hpp",
            348,
            FocusCoords(0, 6, (0, 1, 0), (0, 0, 0), 0, 124, 2, 0, cluster=(0, 1, 0)),
            coredump_path="/tmp/cuda_coredump_nm-automation-h100-standalone-0-preserve"
            ".361991.1764626086",
            inline_function="_ZN4cute16SM90_TMA_LOAD_3D4copyEPKvPmmPvRKiS6_S6_",
        )
    ),  # fmt: skip
    "unstated/llamacpp-notes-exception-live.txt": lambda v: (
        v
        == CudaException(
            "Warp Misaligned Address",
            False,
            0x7FFF20CD8FB0,
            "common.cuh",
            692,
            FLASH_ATTN,
            None,
            None,
            FocusCoords(0, 1399, (0, 1, 15), (0, 3, 0), 0, 0, 4, 0),
            signal_code=6,
        )
    ),  # fmt: skip
    "unstated/triton-gluon-tutorial-exception-live.txt": lambda v: (
        v
        == CudaException(
            "Warp Illegal Instruction",
            False,
            0x628FBE590,
            "09-tma-gather-scatter.py",
            245,
            "async_gather_kernel",
            None,
            None,
            FocusCoords(0, 9, (0, 0, 0), (96, 0, 0), 0, 148, 0, 0),
            signal_code=4,
        )
    ),  # fmt: skip
    "12.1/issue18-switch-focus.txt": lambda v: (
        v
        == CudaException(
            None,
            False,
            None,
            None,
            None,
            None,
            None,
            None,
            FocusCoords(0, 11534, (0, 0, 0), (0, 0, 0), 1, 0, 0, 0),
        )
    ),  # fmt: skip
}

# The frames printed after the banners above, parsed with parse_backtrace.
EXPECTED_FRAMES = {
    "unstated/vllm-blog-banner-no-lineinfo.txt": (
        Frame(
            0,
            0x7F31ABB9F6E0,
            "illegalMemoryAccessKernel(int*, int)",
            (1, 1, 1),
            (256, 1, 1),
            "",
            None,
            None,
            None,
            None,
            None,
        ),
    ),  # fmt: skip
    "unstated/vllm-blog-banner-cuda-graph.txt": (
        Frame(
            0, 0x7FC2AFBA5E70, FILL, (40960, 1, 1), (128, 1, 1), "", None, None, None, None, None
        ),
    ),  # fmt: skip
    "unstated/vllm-blog2-cutlass-banner-inlined.txt": (
        Frame(
            0,
            None,
            f"cutlass::device_kernel<{CUTLASS_PARAMS}>",
            (2, 2, 1),
            (384, 1, 1),
            "",
            "/usr/local/cuda-12.9/include/sm_20_intrinsics.hpp",
            151,
            "_ZN52_INTERNAL_64778a7b_21_scaled_mm_sm90_fp8_cu_e01c669e24__cvta_generic_to_"
            "sharedEPKv",
            "util.hpp",
            108,
        ),
    ),  # fmt: skip
    "unstated/enzyme-jl-issue428-banner.txt": (
        Frame(
            0,
            0x5FF3D30,
            "julia_grad_kernel__4323",
            None,
            None,
            "",
            "/home/vchuravy/enz.jl",
            14,
            None,
            None,
            None,
        ),
    ),  # fmt: skip
}

# Every folder but 11.8, whose live recordings of the fixture dumps are checked below, and
# 13.0, recorded on the real dumps of fixtures/real (tests/fixtures/test_real_dumps.py).
PUBLISHED = sorted(p for p in CUDA_GDB.rglob("*.txt") if p.parent.name not in ("11.8", "13.0"))


def case_id(path: Path) -> str:
    return path.relative_to(CUDA_GDB).as_posix()


@pytest.mark.parametrize("path", PUBLISHED, ids=case_id)
def test_published_transcript_parses_to_expected_value(path):
    # GIVEN a transcript of published cuda-gdb output and what it says
    meta, text = load_transcript(path)
    expected = EXPECTED[case_id(path)]
    # WHEN it is parsed
    result = parser_for(path)(text)
    # THEN the value is exactly the expected one, or the refusal names the expected reason
    if isinstance(expected, str):
        assert isinstance(result, Unparsed), result
        assert expected in result.reason
        assert result.raw == text
    else:
        assert isinstance(result, Parsed), result
        assert expected(result.value), result.value
        assert result.raw in (text, text.rstrip("\n"))


@pytest.mark.parametrize("name", sorted(EXPECTED_FRAMES), ids=str)
def test_published_banner_frames_parse(name):
    _, text = load_transcript(CUDA_GDB / name)
    result = parse_backtrace(text)
    assert isinstance(result, Parsed)
    assert result.value == EXPECTED_FRAMES[name]


def test_every_transcript_file_has_the_three_header_lines():
    for path in CUDA_GDB.rglob("*.txt"):
        meta, _ = load_transcript(path)
        assert set(meta) == {"source", "tool-version", "note"}, path


def test_every_published_transcript_has_an_expectation():
    assert {case_id(p) for p in PUBLISHED} == set(EXPECTED)


# --- live recordings of the fixture dumps ---------------------------------------------------

LIVE = sorted((CUDA_GDB / "11.8").glob("*.txt")) if (CUDA_GDB / "11.8").is_dir() else []


def truth_for(path: Path) -> dict:
    dump = path.name.split("__")[0]
    truth = DUMPS / f"{dump}.truth.json"
    if not truth.is_file():
        require_files([], f"fixture dumps ({truth.name} for {path.name})")
    return json.loads(truth.read_text())


@pytest.mark.parametrize("path", LIVE, ids=case_id)
def test_live_11_8_transcript_agrees_with_the_dump_truth(path):
    # GIVEN cuda-gdb 11.8's output on a fixture dump and what the dump's builder planted
    _, text = load_transcript(path)
    truth = truth_for(path)
    command = path.stem.split("__")[-1]
    # WHEN it is parsed, THEN it says what was planted (or is refused where 11.8 cannot read
    # the dump: ABI v8 cubins, rows newer than r400)
    if command == "outside":
        check_outside(text, truth)
        return
    result = parser_for(path)(text)
    expect = truth.get("cuda_gdb_expect") if truth["cuda_gdb_checkable"]["value"] else None
    if expect is None and truth.get("fault") and command != "outside":
        assert isinstance(result, Unparsed) or command in ("banner",) or not result.value
        return
    LIVE_CHECKS[command](result.value if isinstance(result, Parsed) else result, truth, expect)


# cuda-gdb 13.0 (CUDA 13 toolkit, driver 580, an H100) on the fixture dumps: it opens every
# one but these, each refused in its own words (its crash on sm_fault's SM-level fault comes
# after the banner). The r400 ones: a device or SM with no exception reads as exception 1.
REFUSED_13 = {
    "hang_barrier.twin_r400": "unhandled device exception (1)",
    "sm_fault.twin_r400": "unhandled device exception (1)",
    "two_devices": "unhandled device exception (1)",
    "sm_fault": "std::out_of_range",
}
LIVE_13 = sorted(
    p for p in (CUDA_GDB / "13.0").glob("*__banner.txt")
    if (DUMPS / f"{p.name.split('__')[0]}.nvcudmp").is_file()
)  # fmt: skip


def test_cuda_gdb_13_was_run_on_every_fixture_dump():
    names = {p.name.split("__")[0] for p in LIVE_13}
    assert names == {p.name.removesuffix(".nvcudmp") for p in DUMPS.glob("*.nvcudmp")}


@pytest.mark.parametrize("path", LIVE_13, ids=case_id)
def test_live_13_0_banner_agrees_with_the_dump_truth(path):
    # GIVEN cuda-gdb 13.0's banner on a fixture dump and what the builder planted
    _, text = load_transcript(path)
    name = path.name.split("__")[0]
    if name in REFUSED_13:
        assert REFUSED_13[name] in text
        return
    expect = truth_for(path).get("cuda_gdb_expect")
    # WHEN it is parsed, THEN the dump opened, and a fault is the planted one
    result = parse_exception_banner(text)
    assert isinstance(result, Parsed), result
    assert result.value.focus is not None
    if expect is None:
        return
    words = expect["banner"].removeprefix("CUDA Exception: ")
    if words != "Assertion failed.":
        assert result.value.name == words
        assert result.value.error_pc == expect["error_pc"]
    assert coords(result.value.focus) == coords(focus_of(expect))


def check_outside(text, truth):
    codes = {d.code.value for d in diagnose(text)}
    if truth["abi_version"] == 8 or "v8" in truth["scenario"]:
        assert "cuda-gdb-internal-error" in codes
    else:
        assert codes <= {"no-python-support-files"}


def coords(focus):
    return (focus.block, focus.thread, focus.device, focus.sm, focus.warp, focus.lane)


def focus_of(expect):
    return parse_focus(expect["focus"]) if expect else None


def check_banner(value, truth, expect):
    if expect is None:  # a hang: no exception, a focus all the same
        assert (value.name, value.assertion_failed, value.error_pc) == (None, False, None)
        assert value.focus is not None
        return
    words = expect["banner"].removeprefix("CUDA Exception: ")
    assert (value.name, value.assertion_failed) == (
        (None, True) if words == "Assertion failed." else (words, False)
    )
    assert value.error_pc == expect["error_pc"]
    wanted, got = focus_of(expect), value.focus
    assert coords(got) == coords(wanted)
    assert value.file is not None or not truth["fault"]["lineinfo"]


def check_print(value, truth, expect):
    if expect is None:
        assert isinstance(value, Unparsed)  # "$1 = <unavailable>" in a hang
    else:
        assert value == expect["error_pc"]


def check_symbol(value, truth, expect):
    if expect is None:
        assert isinstance(value, Unparsed)
    else:  # a fault in a called function: its clone's own offset
        assert value.offset == truth["fault"].get("function_offset", truth["fault"]["offset"])


def check_line(value, truth, expect):
    if expect is None:
        assert isinstance(value, Unparsed)
    elif not truth["fault"]["lineinfo"]:
        assert not value.has_line_info and value.start.address == expect["error_pc"]
    else:
        assert value.start.address <= expect["error_pc"] < value.end.address


def check_bt(value, truth, expect):
    frame = value[0]
    # The kernel's frame carries the launch; it is frame 0 unless the lane is in a call.
    assert frame.level == 0 and frame.function and value[-1].grid_dim is not None
    calls = (truth.get("fault") or {}).get("expected_calls") or []
    assert len(value) == 1 + len(calls)
    assert [(f.file, f.line) for f in value[1:]] == [tuple(c) for c in calls]
    if expect is not None:
        assert frame.pc in (None, expect["error_pc"])


def check_disassembly(value, truth, expect):
    if expect is None:
        assert isinstance(value, Unparsed)  # "value is not available"
    else:
        assert [i.address for i in value if i.is_error_pc] == [expect["error_pc"]]


def check_lanes(value, truth, expect):
    current = [row for row in value if row.current]
    assert len(current) == 1
    if expect is not None:
        assert current[0].lane == focus_of(expect).lane
        assert current[0].exception is not None


def check_warps(value, truth, expect):
    current = [row for row in value if row.current]
    assert len(current) == 1
    if expect is not None:
        focus = focus_of(expect)
        assert (current[0].device, current[0].sm, current[0].warp) == (
            focus.device, focus.sm, focus.warp)  # fmt: skip


def check_kernels(value, truth, expect):
    assert sum(row.current for row in value) == 1
    assert len(value) == len(truth["grids"])
    assert {(r.device, r.grid) for r in value} == {
        (g["device"], g["grid_id"]) for g in truth["grids"]
    }
    assert all(r.name and r.grid_dim and r.block_dim for r in value)


def check_devices(value, truth, expect):
    assert [(r.device, r.name) for r in value] == [
        (d["device"], d["name"]) for d in truth["devices"]]  # fmt: skip


def check_contexts(value, truth, expect):
    assert len(value) >= 1 and sum(r.current for r in value) == 1


def check_blocks(value, truth, expect):
    current = [row for row in value if row.current]
    assert len(current) == 1
    if expect is not None:
        assert current[0].block_idx == focus_of(expect).block


LIVE_CHECKS = {
    "banner": check_banner,
    "p-x": check_print,
    "info-symbol": check_symbol,
    "info-line": check_line,
    "bt": check_bt,
    "x-i": check_disassembly,
    "info-cuda-lanes": check_lanes,
    "info-cuda-warps": check_warps,
    "info-cuda-kernels": check_kernels,
    "info-cuda-devices": check_devices,
    "info-cuda-contexts": check_contexts,
    "info-cuda-blocks": check_blocks,
}


# --- exact strings quoted from verified 11.8 runs (docs/toolchain.md) ----------------------

BANNER_11_8 = (
    "CUDA Exception: Warp Illegal Address\n"
    "The exception was triggered at PC 0x7f0000000290 (k.cu:2 in _Z5storeIfEvPT_iS0_ inlined "
    "from k.cu:4)\n"
    "[Current focus set to CUDA kernel 0, grid 7, block (5,0,0), thread (67,0,0), device 0, "
    "sm 3, warp 2, lane 3]\n"
)


def test_banner_with_inline_location_names_callee_and_call_site():
    # 11.8 prints the location alone: no function before it, the callee in "in X inlined"
    result = parse_exception_banner(BANNER_11_8)
    assert result == Parsed(
        CudaException(
            "Warp Illegal Address", False, 0x7F0000000290, "k.cu", 2, None,
            "k.cu", 4, FocusCoords(0, 7, (5, 0, 0), (67, 0, 0), 0, 3, 2, 3),
            inline_function="_Z5storeIfEvPT_iS0_",
        ),
        BANNER_11_8,
    )  # fmt: skip


def test_banner_without_exception_line_takes_the_name_from_the_signal():
    # GIVEN a real live session (Triton tutorial) without its "CUDA Exception:" line, as
    # cuda-gdb prints it for lane exceptions
    _, text = load_transcript(CUDA_GDB / "unstated/triton-gluon-tutorial-exception-live.txt")
    without = "".join(
        line for line in text.splitlines(keepends=True)
        if not line.startswith("CUDA Exception:")
    )  # fmt: skip
    # WHEN it is parsed
    result = parse_exception_banner(without)
    # THEN the name and the number come from "received signal CUDA_EXCEPTION_4, Warp …."
    assert isinstance(result, Parsed), result
    assert (result.value.name, result.value.signal_code) == ("Warp Illegal Instruction", 4)
    assert result.value == parse_exception_banner(text).value


def widen_status(text, status):
    """Lays out a real kernels table again with `status` in the Status column, as cuda-gdb
    does: the column is right-aligned and as wide as its widest cell."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "Status" in line)
    grow = len(status) - len("Active")
    if "  " in lines[header]:  # aligned: the header moves right with the wider column
        lines[header] = lines[header].replace(" Status", " " * grow + " Status")
    return (
        "\n".join(
            lines[: header + 1]
            + [line.replace(" Active ", f" {status} ") for line in lines[header + 1 :]]
        )
        + "\n"
    )


@pytest.mark.parametrize("name", [
    "11.8/oob_store__info-cuda-kernels.txt",
    "docs-12.9/info-cuda-kernels.txt",
    "docs-13.4/info-cuda-kernels.txt",
], ids=str)  # fmt: skip
def test_kernel_status_with_a_space_and_parentheses_is_kept_whole(name):
    # GIVEN a real kernels table whose kernel cuda-gdb reports as preempted
    _, text = load_transcript(CUDA_GDB / name)
    preempted = widen_status(text, "Active (preempted)")
    # WHEN both are parsed
    before, after = parse_kernels(text), parse_kernels(preempted)
    # THEN the status is whole and every other cell is read as before
    assert isinstance(before, Parsed) and isinstance(after, Parsed), after
    assert [r.status for r in after.value] == ["Active (preempted)"]
    assert rows(after.value, *KERNEL[:5], *KERNEL[6:]) == rows(
        before.value, *KERNEL[:5], *KERNEL[6:])  # fmt: skip


def test_disassemble_offset_only_rows_have_no_symbol():
    text = "   0x00007fffd7a3b2d0 <+1056>:\tSTG.E desc[UR4][R2.64], R7\n"
    assert parse_disassembly(text) == Parsed(
        (Instruction(0x7FFFD7A3B2D0, None, 1056, "STG.E desc[UR4][R2.64], R7", False, False),),
        text,
    )


def test_disassembly_symbol_may_hold_angle_brackets():
    text = "*> 0x7f7fe1dfac70 <void moe<int>(int*)+624>: ATOMS.POPC.INC.32 RZ, [R10+URZ+0x4]\n"
    result = parse_disassembly(text)
    assert isinstance(result, Parsed)
    assert rows(result.value, *INSN) == ((0x7F7FE1DFAC70, "void moe<int>(int*)", 624, False,
                                          True),)  # fmt: skip


def test_assertion_variant_has_no_exception_name():
    text = "Assertion failed.\n" + BANNER_11_8.split("\n", 1)[1]
    result = parse_exception_banner(text)
    assert isinstance(result, Parsed)
    assert result.value.assertion_failed and result.value.name is None
    assert result.value.error_pc == 0x7F0000000290


def test_frame_with_launch_and_inline_clause():
    text = (
        "#0  oob_kernel<<<(64,1,1),(256,1,1)>>> () at k.cu:2 in _Z5storeIfEvPT_iS0_ "
        "inlined from k.cu:4"
    )
    result = parse_backtrace(text)
    assert result == Parsed(
        (Frame(0, None, "oob_kernel", (64, 1, 1), (256, 1, 1), "", "k.cu", 2,
               "_Z5storeIfEvPT_iS0_", "k.cu", 4),),
        text,
    )  # fmt: skip


def test_info_symbol_with_offset_section_and_objfile():
    text = "oob_kernel + 272 in section .text.oob_kernel of /tmp/cuda-dbg/1/elf.0x5.o.x\n"
    value = parse_info_symbol(text)
    assert isinstance(value, Parsed)
    assert (value.value.symbol, value.value.offset, value.value.section) == (
        "oob_kernel", 272, ".text.oob_kernel")  # fmt: skip


def test_info_line_inlined_variant():
    text = (
        'Line 2 of "k.cu" starts at address 0x7f0000000290 <oob_kernel+272> and ends at '
        "0x7f00000002a0 <oob_kernel+288> inlined from _Z5storeIfEvPT_iS0_ at line 4 of k.cu.\n"
    )
    result = parse_info_line(text)
    assert isinstance(result, Parsed)
    info = result.value
    assert (info.file, info.line, info.start.address, info.start.symbol, info.start.offset) == (
        "k.cu", 2, 0x7F0000000290, "oob_kernel", 272)  # fmt: skip
    assert (info.end.offset, info.inlined_function, info.inlined_line, info.inlined_file) == (
        288, "_Z5storeIfEvPT_iS0_", 4, "k.cu")  # fmt: skip


def test_info_line_without_line_info():
    text = "No line number information available for address 0x7f0000000290 <oob_kernel+272>\n"
    result = parse_info_line(text)
    assert isinstance(result, Parsed)
    assert not result.value.has_line_info and result.value.start.offset == 272


def test_print_hex():
    assert parse_print_int("$1 = 0x7f0000000290\n") == Parsed(
        0x7F0000000290, "$1 = 0x7f0000000290\n"
    )
    assert isinstance(parse_print_int("Value can't be converted to integer."), Unparsed)


def test_empty_table_message_is_an_empty_answer():
    assert parse_kernels("No CUDA kernels.") == Parsed((), "No CUDA kernels.")


def test_error_instead_of_table_is_unparsed():
    result = parse_warps("Focus not set on any active CUDA kernel.")
    assert isinstance(result, Unparsed)


def ui_out_table(headers, rows):
    """Lays out a table as gdb's ui-out does: right-aligned, one space between columns."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: " ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(headers), *(line(r) for r in rows)]) + "\n"


def test_right_aligned_table_keeps_multi_word_cells_whole():
    # GIVEN a devices table laid out by gdb's rules with a multi-word Name
    text = ui_out_table(
        (" ", "Dev", "PCI Bus/Dev ID", "Name", "Description", "SM Type", "SMs", "Warps/SM",
         "Lanes/Warp", "Max Regs/Lane", "Active SMs Mask"),
        [("*", "0", "19:00.0", "NVIDIA H100 80GB HBM3", "GH100", "sm_90", "132", "64", "32",
          "255", "0x000000000000000000000000000000000f")],
    )  # fmt: skip
    # WHEN it is parsed
    result = parse_devices(text)
    # THEN the name is one cell and every number is read
    assert isinstance(result, Parsed), result
    row = result.value[0]
    assert (row.current, row.device, row.pci_bus, row.name, row.description, row.sm_type) == (
        True, 0, "19:00.0", "NVIDIA H100 80GB HBM3", "GH100", "sm_90")  # fmt: skip
    assert (row.sm_count, row.warps_per_sm, row.lanes_per_warp, row.max_regs_per_lane) == (
        132, 64, 32, 255)  # fmt: skip
    assert row.active_sms_mask == 0xF


# --- never raises ---------------------------------------------------------------------------

ALL_PARSERS = sorted(set(PARSERS.values()), key=lambda f: f.__name__)
FRAGMENTS = st.sampled_from([
    "CUDA Exception: ", "Assertion failed.", "The exception was triggered at PC 0x",
    "[Current focus set to CUDA kernel ", "block (", ",0,0)", "thread ", "device ", "#0  ",
    "<<<(", ")>>>", " () at ", ":", " in ", " inlined from ", "Line ", ' of "',
    '" starts at address ', "  (", "<+16>:\t", " (preempted)", "Device 0", "  SM Active Warps Mask",
    "--Type <RET> for more, q to quit, c to continue without paging--",
    "  BlockIdx ThreadIdx To BlockIdx To ThreadIdx Count   PC Filename  Line",
    " received signal CUDA_EXCEPTION_14, Warp Illegal Address.",
    " and ends at ", "<", "+", ">", "No line number information available for address ",
    " in section ", " of ", "$1 = ", "=> ", "*> ", "*=> ", "Device 0 SM 0", "Kernel 1",
    "  Kernel Parent Dev Grid Status   SMs Mask   GridDim  BlockDim Invocation", "*", " ",
    "\n", "(", ")", "0x7f", "12", "-", "n/a", "Ln", "State", "Active Lanes Mask",
])  # fmt: skip
GDBISH = st.lists(FRAGMENTS, max_size=40).map("".join)


@pytest.mark.parametrize("parser", ALL_PARSERS, ids=lambda f: f.__name__)
@given(text=st.one_of(st.text(), GDBISH))
def test_parsers_never_raise(parser, text):
    result = parser(text)
    assert isinstance(result, (Parsed, Unparsed))
    if isinstance(result, Unparsed):
        assert not result.reason.startswith("parser error"), result.reason
