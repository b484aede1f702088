"""``.nv.info`` attributes and the tkinfo/cuinfo notes, on the fixture cubins.

Expected values come from index.json (what the builder recorded), the kernel signatures in
fixtures/cu, and `cuobjdump -elf`'s own decoding of the same sections.
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem.cubin.elfimage import ElfImage
from postmortem.cubin.nvinfo import (
    ATTRIBUTE_NAMES,
    ToolkitInfo,
    parse_attributes,
    read_kernel_info,
    read_toolkit_info,
)
from postmortem.errors import NvInfoError
from tests.conftest import FIXTURES
from tests.tooling import examples, require_tool

INDEX = json.loads((FIXTURES / "cubins" / "index.json").read_text())["cubins"]
CUBINS = sorted(INDEX)
KERNELS = [(name, kernel["name"]) for name in CUBINS for kernel in INDEX[name]["kernels"]]
_SIGNATURE = re.compile(r"__global__\s+void\s+(\w+)\s*\(([^)]*)\)")
_SCALAR_SIZES = {"int": 4, "float": 4}


def _cubin(name: str) -> bytes:
    return (FIXTURES / INDEX[name]["path"]).read_bytes()


def _padded(body: bytes, size: int) -> bytes:
    """`body` filled up to `size` bytes with EIATTR_PAD records (HVAL 0x01)."""
    return body + b"\3\1\0\0" * ((size - len(body)) // 4)


def _signature_layout(source: Path, kernel: str) -> list[tuple[int, int]] | None:
    """(offset, size) of each parameter, from the C signature: pointers 8, int/float 4,
    each aligned to its size. None for a kernel taking anything else (a struct)."""
    for short, params in _SIGNATURE.findall(source.read_text()):
        if f"{len(short)}{short}" not in kernel:
            continue
        layout: list[tuple[int, int]] = []
        offset = 0
        for param in (p.strip() for p in params.split(",")):
            words = param.replace("*", " * ").split()
            size = (
                8
                if "*" in words
                else next((_SCALAR_SIZES[w] for w in words if w in _SCALAR_SIZES), None)
            )  # noqa: E501
            if size is None:
                return None
            offset = (offset + size - 1) // size * size
            layout.append((offset, size))
            offset += size
        return layout
    return None


@pytest.mark.parametrize("name,kernel", KERNELS, ids=[f"{n}:{k[:24]}" for n, k in KERNELS])
def test_kernel_info_matches_the_builders_index(name, kernel):
    entry = next(k for k in INDEX[name]["kernels"] if k["name"] == kernel)
    info = read_kernel_info(_cubin(name), kernel)
    assert info is not None
    assert info.symbol_index == entry["symbol_index"]
    assert info.register_count == entry["num_regs"]
    assert info.param_size_bytes == entry["param_size"]
    assert info.param_offset == 0x210  # sm_90 kernels' parameters start at c[0x0][0x210]
    last = info.params[-1]
    assert last.offset + last.size_bytes <= entry["param_size"]


@pytest.mark.parametrize("name,kernel", KERNELS, ids=[f"{n}:{k[:24]}" for n, k in KERNELS])
def test_parameter_layout_matches_the_source_signature(name, kernel):
    info = read_kernel_info(_cubin(name), kernel)
    assert info is not None
    expected = _signature_layout(FIXTURES / INDEX[name]["source"], kernel)
    if expected is None:  # cutlass_like takes one Params struct
        assert [(p.offset, p.size_bytes) for p in info.params] == [(0, 64)]
        return
    assert [(p.offset, p.size_bytes) for p in info.params] == expected
    assert [p.ordinal for p in info.params] == list(range(len(expected)))


def test_oob_kernel_layout_is_pointer_int_float():
    # oob_kernel(float* out, int n, float v)
    info = read_kernel_info(_cubin("oob_store.sm_90.v8"), "_Z10oob_kernelPfif")
    assert info is not None
    assert [(p.ordinal, p.offset, p.size_bytes) for p in info.params] == [
        (0, 0, 8),
        (1, 8, 4),
        (2, 12, 4),
    ]
    assert (info.param_offset, info.param_size_bytes, info.register_count) == (0x210, 16, 10)
    assert info.max_register_count == 0xFF
    assert info.cuda_api_version == 135
    assert info.exit_offsets == (0x70, 0xE0)
    assert {a.name for a in info.other} >= {"LANGUAGE", "SW_WAR", "PREEXIT_USED"}
    assert any(a.attribute == 0x5F and a.name is None for a in info.other)  # unknown, kept


def test_unknown_kernel_has_no_info():
    assert read_kernel_info(_cubin("oob_store.sm_90.v8"), "_Z7missingv") is None


# --- cuobjdump's own decoding of the same sections -------------------------------------------

_KPARAM = re.compile(
    r"EIATTR_KPARAM_INFO\s+Format:\s+EIFMT_SVAL\s+Value:\s+Index : 0x([0-9a-f]+)\s+"
    r"Ordinal : 0x([0-9a-f]+)\s+Offset\s*: 0x([0-9a-f]+)\s+Size\s*: 0x([0-9a-f]+)"
)
_REGCOUNT = re.compile(r"function: (\S+)\(0x([0-9a-f]+)\)\s+register count: (\d+)")
_PARAM_CBANK = re.compile(r"EIATTR_PARAM_CBANK\s+Format:\s+EIFMT_SVAL\s+Value:\s+0x\w+ 0x(\w+)")
_OPTIONS = re.compile(r"Tool Command Line Arguments: (.*)")


def _cuobjdump_elf(cubin: Path) -> str:
    tool = require_tool("cuobjdump")
    run = subprocess.run(
        [str(tool), "-elf", str(cubin)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def _section_text(listing: str, section: str) -> str:
    start = listing.index(f"\n{section}\n")
    return listing[start:].split("\n\n\n", 1)[0]


@pytest.mark.parametrize("name", CUBINS)
def test_layout_and_register_counts_agree_with_cuobjdump(name):
    listing = _cuobjdump_elf(FIXTURES / INDEX[name]["path"])
    data = _cubin(name)
    for kernel in INDEX[name]["kernels"]:
        info = read_kernel_info(data, kernel["name"])
        assert info is not None
        text = _section_text(listing, f".nv.info.{kernel['name']}")
        theirs = sorted(
            (int(o, 16), int(off, 16), int(size, 16)) for _, o, off, size in _KPARAM.findall(text)
        )
        assert [(p.ordinal, p.offset, p.size_bytes) for p in info.params] == theirs
        (cbank,) = _PARAM_CBANK.findall(text)
        assert int(cbank, 16) == info.param_offset | (info.param_size_bytes or 0) << 16
        counts = {(n, int(i, 16)): int(c) for n, i, c in _REGCOUNT.findall(listing)}
        assert counts[(kernel["name"], info.symbol_index)] == info.register_count


@pytest.mark.parametrize("name", [n for n in CUBINS if n.endswith(".v8")])
def test_tkinfo_options_agree_with_cuobjdump(name):
    listing = _cuobjdump_elf(FIXTURES / INDEX[name]["path"])
    info = read_toolkit_info(_cubin(name))
    assert info is not None
    (options,) = _OPTIONS.findall(listing)
    assert info.options == options.strip()


def test_attribute_names_are_the_ones_cuobjdump_prints(tmp_path):
    # GIVEN a fixture cubin whose kernel .nv.info section is rewritten to one HVAL record
    # per attribute number (the section keeps its size; the rest is EIATTR_PAD)
    source = FIXTURES / INDEX["oob_store.sm_90.v8"]["path"]
    data = source.read_bytes()
    section = ElfImage(data).find_section(".nv.info._Z10oob_kernelPfif")
    assert section is not None
    slots = section.size_bytes // 4
    numbers = list(range(0x70))
    names: dict[int, str] = {}
    for start in range(0, len(numbers), slots):
        batch = numbers[start : start + slots]
        body = _padded(b"".join(bytes([3, n, 0, 0]) for n in batch), section.size_bytes)
        probe = tmp_path / "probe.cubin"
        probe.write_bytes(
            data[: section.offset] + body + data[section.offset + section.size_bytes :]
        )
        # WHEN cuobjdump decodes it
        text = _section_text(_cuobjdump_elf(probe), ".nv.info._Z10oob_kernelPfif")
        printed = re.findall(r"Attribute:\t(EIATTR_\w+|unknown Attribute)", text)
        names.update(zip(batch, printed, strict=False))
    # THEN every name it knows is ours, and the numbers it does not know are not in our table
    known = {n: v.removeprefix("EIATTR_") for n, v in names.items() if v.startswith("EIATTR_")}
    assert {n: ATTRIBUTE_NAMES[n] for n in known if n in ATTRIBUTE_NAMES} == known
    assert set(ATTRIBUTE_NAMES) == set(known)


# --- notes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in CUBINS if n.endswith(".v8")])
def test_tkinfo_says_ptxas_13_5_and_whether_lineinfo_was_asked_for(name):
    info = read_toolkit_info(_cubin(name))
    assert info is not None
    assert info.tool_name == "ptxas"
    assert info.tool_version == "Cuda compilation tools, release 13.5, V13.5.37"
    assert info.tool_branch is not None and info.tool_branch.startswith("Build cuda_13.5")
    assert info.note_version == 2
    assert (info.virtual_arch, info.cuda_version) == ("sm_90", (13, 5))
    # The builder runs ptxas with --generate-line-info; the note records it as -lineinfo.
    # compiled_with_lineinfo: the stripped fixture was compiled with it and lost it later.
    assert info.has_lineinfo_option is INDEX[name]["compiled_with_lineinfo"]
    assert info.has_device_debug is False
    assert "-arch sm_90" in (info.options or "")


def test_nolineinfo_build_options_are_exactly_the_arch():
    info = read_toolkit_info(_cubin("oob_store_nolineinfo.sm_90.v8"))
    assert info is not None
    assert info.options == "-arch sm_90 -m 64"
    lineinfo = read_toolkit_info(_cubin("oob_store.sm_90.v8"))
    assert lineinfo is not None and lineinfo.options == "-lineinfo  -arch sm_90 -m 64"


@pytest.mark.parametrize("name", [n for n in CUBINS if n.endswith(".v7")])
def test_abi7_cubins_from_ptxas_11_8_carry_no_notes(name):
    assert read_toolkit_info(_cubin(name)) is None


def test_device_debug_is_recognised_from_the_options_nvcc_G_passes():
    # What `nvcc -cubin -G -arch=sm_90` 13.5 left in .note.nv.tkinfo of a scratch build.
    options = (
        "tmpxft_00006dec_00000000-6_lb.ptx -no-bb-merge  -ret-end  -g  -o lb.cubin "
        "-arch sm_90 -m 64"
    )
    info = ToolkitInfo("ptxas", None, None, options, "lb.cubin", 2, "sm_90", (13, 5))
    assert info.has_device_debug is True
    assert info.has_lineinfo_option is False
    unknown = ToolkitInfo(None, None, None, None, None, None, "sm_90", (13, 5))
    assert (unknown.has_device_debug, unknown.has_lineinfo_option) == (None, None)


# --- malformed input -------------------------------------------------------------------------


def test_record_formats_and_sizes():
    data = bytes([1, 0x3E, 0, 0, 2, 0x4C, 1, 0, 3, 0x1B, 0xFF, 0, 4, 0x36, 4, 0, 8, 0, 0, 0])
    records = parse_attributes(data)
    assert [(r.attribute, r.format, r.value) for r in records] == [
        (0x3E, 1, b""),
        (0x4C, 2, b"\1"),
        (0x1B, 3, b"\xff\0"),
        (0x36, 4, b"\x08\0\0\0"),
    ]


@pytest.mark.parametrize(
    "data,message",
    [
        (bytes([4, 0x17, 12, 0, 1, 2]), "needs 12 bytes"),
        (bytes([9, 0x17, 0, 0]), "unknown format 9"),
        (bytes([3, 0x1B]), "cut short"),
    ],
)
def test_malformed_records_raise_nvinfo_error(data, message):
    with pytest.raises(NvInfoError, match=message):
        parse_attributes(data)


def test_not_an_elf_image_raises_nvinfo_error():
    with pytest.raises(NvInfoError, match="no ELF magic"):
        read_kernel_info(b"not a cubin", "k")
    with pytest.raises(NvInfoError):
        read_toolkit_info(_cubin("oob_store.sm_90.v8")[:100])


def test_short_kparam_record_raises_nvinfo_error():
    data = bytearray(_cubin("oob_store.sm_90.v8"))
    section = ElfImage(bytes(data)).find_section(".nv.info._Z10oob_kernelPfif")
    assert section is not None
    # KPARAM_INFO with an 8-byte payload, then padding to keep the section's size.
    body = bytes([4, 0x17, 8, 0]) + bytes(8)
    data[section.offset : section.offset + section.size_bytes] = _padded(body, section.size_bytes)
    with pytest.raises(NvInfoError, match="KPARAM_INFO holds 8 bytes"):
        read_kernel_info(bytes(data), "_Z10oob_kernelPfif")


@given(st.binary(max_size=200))
def test_garbled_section_bytes_raise_only_nvinfo_error(data):
    with contextlib.suppress(NvInfoError):
        parse_attributes(data)


_FUZZ_BASE = (FIXTURES / INDEX["two_kernels.sm_90.v8"]["path"]).read_bytes()


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, len(_FUZZ_BASE)),
    st.lists(st.tuples(st.integers(0, len(_FUZZ_BASE) - 1), st.integers(0, 255)), max_size=8),
)
def test_truncated_or_corrupted_cubins_raise_only_nvinfo_error(cut, flips):
    data = bytearray(_FUZZ_BASE)
    for position, value in flips:
        data[position] = value
    image = bytes(data[:cut])
    with contextlib.suppress(NvInfoError):
        read_kernel_info(image, "_Z8consumerPKfPfi")
    with contextlib.suppress(NvInfoError):
        read_toolkit_info(image)


_OOB = _cubin("oob_store.sm_90.v8")


def _metadata_span(data: bytes) -> tuple[int, int]:
    """From the first note to the end of the kernel's .nv.info section (contiguous in a cubin)."""
    image = ElfImage(data)
    first = image.find_section(".note.nv.tkinfo")
    last = image.find_section(".nv.info._Z10oob_kernelPfif")
    assert first is not None and last is not None
    return first.offset, last.offset + last.size_bytes


_NOTES_START, _INFO_END = _metadata_span(_OOB)


@settings(max_examples=examples(2 / 3))
@given(st.integers(0, _INFO_END - _NOTES_START), st.binary(min_size=1, max_size=64))
def test_garbled_notes_and_info_sections_raise_only_nvinfo_error(where, junk):
    # Overwrite bytes from the first note through the kernel's .nv.info section.
    data = bytearray(_OOB)
    start = _NOTES_START + where
    data[start : start + len(junk)] = junk
    with contextlib.suppress(NvInfoError):
        read_kernel_info(bytes(data), "_Z10oob_kernelPfif")
    with contextlib.suppress(NvInfoError):
        read_toolkit_info(bytes(data))


def test_kparam_flags_give_size_and_alignment():
    # GIVEN a kernel section holding one KPARAM_INFO whose flags word says: size 16 (bits
    # 18-31), cbank 0x1f (bits 12-16), pointee log alignment 4 (bits 0-7), ordinal 3, offset 0x20
    data = bytearray(_cubin("oob_store.sm_90.v8"))
    section = ElfImage(bytes(data)).find_section(".nv.info._Z10oob_kernelPfif")
    assert section is not None
    flags = (16 << 18) | (0x1F << 12) | 4
    body = struct.pack("<BBHIHHI", 4, 0x17, 12, 0, 3, 0x20, flags)
    data[section.offset : section.offset + section.size_bytes] = _padded(body, section.size_bytes)
    # WHEN it is read
    info = read_kernel_info(bytes(data), "_Z10oob_kernelPfif")
    # THEN the parameter has those fields, and the lost PARAM_CBANK leaves the bank offset unknown
    assert info is not None
    (param,) = info.params
    assert (param.ordinal, param.offset, param.size_bytes, param.log_alignment) == (3, 0x20, 16, 4)
    assert (info.param_offset, info.param_size_bytes) == (None, None)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ("-arch sm_90a -m 64", "sm_90a"),
        ("-lineinfo  -arch=sm_90a -m 64", "sm_90a"),
        ("--gpu-name sm_90f", "sm_90f"),
        ("-arch sm_90 -m 64", "sm_90"),
        ("-arch sm_100a", "sm_90"),  # another number than the header's: the header wins
        (None, "sm_90"),
    ],
)
def test_the_target_is_named_as_the_build_recorded_it(options, named):
    from postmortem.cubin.nvinfo import ToolkitInfo

    toolkit = ToolkitInfo("ptxas", None, None, options, None, 2, "sm_90", (13, 0))
    assert toolkit.arch_name(90) == named
