"""Deliberate stops read from the dump alone: failed device asserts decoded and traps named,
on PyTorch's own cubins (fixtures/corpus: torch 2.14.1, ATen's Repeat.cu and NLLLoss2d.cu,
built without line info) and on our kernels built by ptxas 11.8 and 13
(fixtures/cu/device_assert.cu, fixtures/cu/trap.cu).

What a part should be comes from the programs: the text of PyTorch's CUDA_KERNEL_ASSERT
conditions and the `@pm` markers and text of our sources, never from our own reading.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from io import BytesIO
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from fixtures.builder.markers import marker_location
from postmortem import open_coredump
from postmortem.analysis.fault.assertion import ASSERTFAIL, ASSERTFAIL_PARAMETERS
from postmortem.analysis.fault.callargs import CallReader, find_callee
from postmortem.analysis.fault.fault import localize
from postmortem.cubin.cfg import ControlFlowGraph
from postmortem.cubin.elfimage import ElfImage
from postmortem.cubin.globaldata import ModuleData
from postmortem.cubin.sass import SassListing, parse_sass
from postmortem.tools import find_tool
from tests.conftest import FIXTURES
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
from tests.tooling import invoke, require_tool

CORPUS = FIXTURES / "corpus" / "cubins"
REPEAT = "torch-2.14.1.libtorch_cuda.2000.sm_90"
NLL = "torch-2.14.1.libtorch_cuda.1844.sm_90"
REPEAT_KERNEL = "_Z19compute_cuda_kernelIlEvPKT_PKlPS0_ll"
WARP_ASSERT = 12


@pytest.fixture(scope="module", autouse=True)
def nvdisasm():
    require_tool("nvdisasm")


@cache
def functions(name: str) -> tuple[SassListing, ...]:
    text = subprocess.run(
        [str(find_tool("nvdisasm")), "-c", "-ndf", str(CORPUS / f"{name}.cubin")],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    parts = text.split("//--------------------- .text.")[1:]
    return tuple(parse_sass("//--------------------- .text." + p) for p in parts)


def assert_calls(name: str):
    data = ModuleData(ElfImage((CORPUS / f"{name}.cubin").read_bytes()))
    for listing in functions(name):
        graph = ControlFlowGraph(listing)
        for instruction in listing.instructions:
            if instruction.base_opcode == "CALL":
                yield listing, graph, data, instruction


@pytest.mark.parametrize("name", [REPEAT, NLL])
def test_every_assert_call_of_aten_decodes_from_the_code(name, tmp_path):
    # GIVEN every call of PyTorch's cubin, and a lane of a dump stopped at each assert call
    decoded = 0
    for _listing, graph, data, call in assert_calls(name):
        if find_callee(graph, call, data) != ASSERTFAIL:
            continue
        reader = CallReader(_NoMemory(), data, graph, call)
        parts = {p.name: reader.from_code(p) for p in ASSERTFAIL_PARAMETERS}
        # THEN all four parts are read, from the code and the image alone
        assert all(part.known for part in parts.values()), (hex(call.offset), parts)
        assert str(parts["file"].value).endswith((".cu", ".cuh", ".h")), parts["file"]
        assert isinstance(parts["line"].value, int) and parts["line"].value > 0
        decoded += 1
    assert decoded >= 4


class _NoMemory:
    def read_memory(self, address: int, size: int) -> None:
        return None


def repeat_dump(tmp_path: Path, offset: int, registers: dict[int, int] | None = None) -> Path:
    module = ModuleSpec(f"corpus/{REPEAT}", abi="v8")
    lane = LaneSpec(offset, exception=WARP_ASSERT, registers=registers or {})
    grid = GridSpec(1, module, kernel=REPEAT_KERNEL)
    device = DeviceSpec([module], [grid], [BlockSpec(1, [WarpSpec([lane])])])
    return write_tiny_dump(tmp_path / "assert.nvcudmp", DumpSpec([device], layout="r580"))


BOUNDS = "repeat >= 0 && start >= 0 && end <= result_size"
"""PyTorch 2.14's aten/src/ATen/native/cuda/Repeat.cu: `CUDA_KERNEL_ASSERT(repeat >= 0 &&
start >= 0 && end <= result_size)` in compute_cuda_kernel."""


def the_bounds_assert() -> int:
    listing = next(f for f in functions(REPEAT) if f.function == REPEAT_KERNEL)
    graph = ControlFlowGraph(listing)
    data = ModuleData(ElfImage((CORPUS / f"{REPEAT}.cubin").read_bytes()))
    for instruction in listing.instructions:
        if instruction.base_opcode != "CALL":
            continue
        reader = CallReader(_NoMemory(), data, graph, instruction)
        if reader.from_code(ASSERTFAIL_PARAMETERS[0]).value == BOUNDS:
            return instruction.offset
    raise AssertionError("no such assert in the cubin")


@pytest.mark.parametrize("inside", [False, True], ids=["at-the-call", "inside-the-call"])
def test_a_lane_at_an_aten_assert_names_it_in_both_pc_conventions(tmp_path, inside):
    # GIVEN a lane at the call, or inside it (its PC the return address, its argument
    # registers reused: zeros here)
    call = the_bounds_assert()
    path = repeat_dump(tmp_path, call + (16 if inside else 0))
    with open_coredump(path) as core:
        site = localize(core)[0]
    decoded = site.assertion
    # THEN the assert is named from the code, whatever the registers hold
    assert decoded is not None and decoded.call_offset == call
    assert decoded.lanes_in_call is inside
    assert decoded.message.value == BOUNDS
    assert str(decoded.file.value).endswith("aten/src/ATen/native/cuda/Repeat.cu")
    assert decoded.function.value == "compute_cuda_kernel"
    assert site.instruction is not None and site.instruction.offset == call


def test_a_pc_that_is_not_at_an_assert_call_decodes_nothing(tmp_path):
    call = the_bounds_assert()
    with open_coredump(repeat_dump(tmp_path, call - 32)) as core:
        assert localize(core)[0].assertion is None


@pytest.mark.parametrize("abi", ["v7", "v8"])
def test_our_assert_kernel_is_decoded_from_ptxas_11_and_13_code(tmp_path, abi):
    # ptxas 11.8 (v7) names the strings in relocated immediates (32@lo($str)) and the callee
    # in the call; ptxas 13 (v8) loads both from constant bank 4
    file, line = marker_location(FIXTURES / "cu" / "device_assert.cu", "fault")
    module = ModuleSpec("device_assert", abi=abi)
    lanes = [LaneSpec(cubin("device_assert", abi).fault["offset"], exception=WARP_ASSERT)] * 3
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec(lanes)])])
    with open_coredump(write_tiny_dump(tmp_path / "a.nvcudmp", DumpSpec([device]))) as core:
        site = localize(core)[0]
    decoded = site.assertion
    assert decoded is not None and decoded.callee == ASSERTFAIL
    assert decoded.message.value == "i < n"
    assert (Path(str(decoded.file.value)).name, decoded.line.value) == (file, line)
    assert "check_index" in str(decoded.function.value)
    assert decoded.lanes == 3


def test_the_committed_assert_dump_is_decoded():
    with open_coredump(FIXTURES / "dumps" / "device_assert.nvcudmp") as core:
        decoded = localize(core)[0].assertion
    assert decoded is not None and decoded.text.startswith("Assertion `i < n` failed at ")


def test_strings_the_image_lost_are_said_to_be_unknown_and_why(tmp_path):
    # GIVEN our v8 assert kernel whose image lost the relocations of constant bank 4 (the
    # section renamed: what a truncated or stripped image leaves)
    module = renamed(
        ModuleSpec("device_assert", abi="v8"), b".rela.nv.constant4", b".rela.nv.constantX"
    )
    lane = LaneSpec(cubin("device_assert", "v8").fault["offset"], exception=WARP_ASSERT)
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec([lane])])])
    with open_coredump(write_tiny_dump(tmp_path / "a.nvcudmp", DumpSpec([device]))) as core:
        decoded = localize(core)[0].assertion
    # THEN the line, an immediate of the code, is still read; each string says why it is not
    assert decoded is not None and decoded.line.known
    for part in (decoded.message, decoded.file, decoded.function):
        assert part.value is None
        assert "which no relocation of the image fills" in part.source
    assert decoded.text.startswith("Assertion `(message unknown)` failed at (file unknown)")


REAL = FIXTURES / "real" / "torch_index_assert_real"


def host_checks(tmp_path: Path, first_line: str) -> list[dict]:
    lines = (REAL.with_suffix(".host.log")).read_text().splitlines()
    log = tmp_path / "host.log"
    log.write_text("\n".join([first_line, *lines[1:]]) + "\n")
    out = tmp_path / "r.json"
    result = invoke("analyze", str(REAL.with_suffix(".nvcudmp.gz")), "--host-log", str(log),
                    "--format", "json", "-o", str(out), "--no-gdb")  # fmt: skip
    assert result.returncode == 0, result.stderr
    checks = json.loads(out.read_text())["host"]["checks"]
    return [c for c in checks if c["fact"] in ("assert", "kernel")]


def test_the_driver_s_assert_line_is_compared_thread_by_thread(tmp_path):
    # GIVEN the line the driver printed for the asserting thread
    printed = (REAL.with_suffix(".host.log")).read_text().splitlines()[0]
    checks = host_checks(tmp_path, printed)
    # THEN it agrees with the decoded assert, and the lambda's operator() the driver names is
    # no disagreement with the kernel it is inlined into
    by_fact = {c["fact"]: c for c in checks}
    assert by_fact["assert"]["agrees"] is True
    assert "that thread's assert" in by_fact["assert"]["how"]
    assert by_fact["kernel"]["agrees"] is None
    # WHEN another message is printed for that thread
    other = printed.replace("index out of bounds", "index out of range!")
    (check,) = [c for c in host_checks(tmp_path, other) if c["fact"] == "assert"]
    # THEN the two disagree, on the message alone
    assert check["agrees"] is False and check["how"].endswith("differs in message")


@pytest.mark.parametrize("abi", ["v7", "v8"])
def test_a_trap_is_named_with_the_message_printed_before_it(tmp_path, abi):
    # GIVEN a warp stopped (broken) at our kernel's __trap(), which printf'd its reason first
    source = FIXTURES / "cu" / "trap.cu"
    printf_line = next(
        n for n, text in enumerate(source.read_text().splitlines(), 1) if "negative count" in text
    )
    module = ModuleSpec("trap", abi=abi)
    warp = WarpSpec([LaneSpec(cubin("trap", abi).fault["offset"])], broken=True)
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [warp])])
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))) as core:
        site = localize(core)[0]
    # THEN the trap is named, with the format string the code passed to printf and the place
    # that format names (the file and line stringized into it)
    trap = site.trap
    assert trap is not None and trap.instruction.opcode == "BPT.TRAP"
    assert "__trap()" in trap.kind
    assert trap.printed is not None
    assert trap.printed.value == f"trap.cu:{printf_line}: negative count %d at %d\n"
    assert trap.place == ("trap.cu", printf_line)
    assert site.assertion is None


def test_a_broken_warp_whose_pc_is_past_its_trap_names_that_trap(tmp_path):
    module = ModuleSpec("trap", abi="v8")
    warp = WarpSpec([LaneSpec(cubin("trap", "v8").fault["offset"] + 16)], broken=True)
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [warp])])
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))) as core:
        site = localize(core)[0]
    # its PC is past the trap (a broken warp's may be): the trap before it is the one named
    assert site.trap is not None and site.trap.instruction.offset == site.offset - 16


def test_pytorch_s_device_side_assert_traceback_is_tied_to_the_decoded_assert(tmp_path):
    # GIVEN the traceback PyTorch prints when the assert surfaces at the next synchronizing call
    log = tmp_path / "host.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 41, in step\n'
        "    loss.item()\n"
        "RuntimeError: CUDA error: device-side assert triggered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
    )
    out = tmp_path / "r.json"
    result = invoke("analyze", str(REAL.with_suffix(".nvcudmp.gz")), "--host-log", str(log),
                    "--format", "json", "-o", str(out), "--no-gdb")  # fmt: skip
    assert result.returncode == 0, result.stderr
    findings = json.loads(out.read_text())["host"]["findings"]
    (surfaced,) = [f for f in findings if f["code"] == "error-surfaced-elsewhere"]
    # THEN the traceback's line is where it surfaced, and the assert it reports is named
    assert surfaced["message"].startswith("the Python traceback ends at train.py:41 in step")
    assert surfaced["message"].endswith(
        "the assert it reports is in the dump: Assertion `-sizes[i] <= index && index < sizes[i]"
        ' && "index out of bounds"` failed at /pytorch/aten/src/ATen/native/cuda/IndexKernel.cu'
        ":111 in operator()"
    )


def assert_with_message(tmp_path: Path, message: bytes) -> Path:
    # our v8 assert kernel with its 5-byte message `i < n` replaced by another of that length
    module = renamed(ModuleSpec("device_assert", abi="v8"), b"i < n\0", message + b"\0")
    lane = LaneSpec(cubin("device_assert", "v8").fault["offset"], exception=WARP_ASSERT)
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec([lane])])])
    return write_tiny_dump(
        tmp_path / f"a{len(list(tmp_path.iterdir()))}.nvcudmp", DumpSpec([device])
    )


def test_an_assert_message_is_escaped_like_every_name_from_the_dump(tmp_path):
    # GIVEN an assert whose message holds a terminal escape and a forged line
    text = invoke("analyze", str(assert_with_message(tmp_path, b"\x1b[2J\n")), "--no-gdb").stdout
    # THEN the terminal is shown the escape, never obeys it, and no line of ours is forged
    assert "\x1b" not in text and "Assertion `\\x1b[2J\\n` failed" in text
    # GIVEN one whose message is markup
    path = assert_with_message(tmp_path, b"<b>&x")
    invoke("analyze", str(path), "--no-gdb", "--format", "html", "-o", str(tmp_path / "r.html"))
    html = (tmp_path / "r.html").read_text()
    # THEN the page shows it as text
    assert "<b>&x" not in html and "&lt;b&gt;&amp;x" in html


def _image_with_addressed_data(clear_global_init_address: bool) -> bytes:
    # Every SHF_ALLOC section given a load address and the symbols in it absolute, as other
    # producers write images ("alloc"); with .nv.global.init's own address then cleared, the
    # image is as the 580 driver writes it: absolute symbols, and no offset left to read.
    from relocate import relocate_cubin

    from tests.tinydump import BASE

    image = bytearray(relocate_cubin(cubin("device_assert", "v8").data, BASE, "alloc").data)
    if clear_global_init_address:
        elf = ELFFile(BytesIO(bytes(image)))
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".nv.global.init")
        at = elf.header.e_shoff + index * elf.header.e_shentsize + 16  # sh_addr
        image[at : at + 8] = bytes(8)
    return bytes(image)


@pytest.mark.parametrize("cleared", [False, True], ids=["section-addressed", "symbols-only"])
def test_strings_are_read_under_every_way_an_image_keeps_their_offsets(tmp_path, cleared):
    module = ModuleSpec("device_assert", abi="v8")
    module.image = _image_with_addressed_data(cleared)
    lane = LaneSpec(cubin("device_assert", "v8").fault["offset"], exception=WARP_ASSERT)
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec([lane])])])
    with open_coredump(write_tiny_dump(tmp_path / "a.nvcudmp", DumpSpec([device]))) as core:
        decoded = localize(core)[0].assertion
    assert decoded is not None and decoded.message.value == "i < n"
    assert decoded.file.value == "device_assert.cu"
    how = "the only string of $str's length" if cleared else ".nv.global.init at offset 0x0"
    assert how in decoded.message.source
