"""The native line-table chain agrees with `nvdisasm -gi` at every instruction of every
fixture kernel (files and lines), and with cuda-gdb's inlined function names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from postmortem import open_coredump
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from postmortem.cubin.elfimage import ElfImage
from postmortem.cubin.inspect import summarize_cubin
from postmortem.cubin.lines import read_line_table
from postmortem.cubin.nvdisasm import build_nvdisasm_argv
from postmortem.cubin.sass import parse_sass
from postmortem.demangle import base_name
from postmortem.gdb import Parsed, parse_backtrace
from tests.conftest import DUMPS, FIXTURES
from tests.csource import enclosing_function
from tests.tooling import TRANSCRIPTS, load_transcript, require_nvcc, require_tool

sys.path.insert(0, str(FIXTURES / "builder"))
import markers  # noqa: E402

INDEX = json.loads((FIXTURES / "cubins" / "index.json").read_text())["cubins"]
WITH_LINES = sorted(k for k, v in INDEX.items() if v["lineinfo"])


@pytest.mark.parametrize("name", WITH_LINES)
def test_the_chain_agrees_with_nvdisasm_at_every_instruction(name):
    # GIVEN a fixture cubin built with -lineinfo, and the real nvdisasm
    nvdisasm = require_tool("nvdisasm")
    path = FIXTURES / INDEX[name]["path"]
    data = path.read_bytes()
    table = read_line_table(ElfImage(data))
    assert table is not None
    compared = 0
    for function in summarize_cubin(data).functions:
        argv = build_nvdisasm_argv(nvdisasm, path, function.symbol_index)
        listing = parse_sass(subprocess.run(argv, capture_output=True, text=True).stdout)
        # WHEN every instruction's chain is read from the line table
        for instruction in listing.instructions:
            ours = table.chain(function.section_index, instruction.offset)
            # THEN it has nvdisasm's files and lines, innermost first
            assert [(f.file, f.line) for f in ours] == [
                (f.file, f.line) for f in instruction.inline_chain
            ], f"{function.name}+0x{instruction.offset:x}"
            compared += 1
    assert compared > 10


def _top_frame(transcript: Path):
    parsed = parse_backtrace(load_transcript(transcript)[1])
    return parsed.value[0] if isinstance(parsed, Parsed) and parsed.value else None


# cuda-gdb 11.8's recorded `bt` of each fixture dump where it names an inlined function
# (`at F:L in X inlined from …`); without line info, or in a hang, it names none.
NAMED_BY_GDB = [
    p for p in sorted((TRANSCRIPTS / "cuda-gdb" / "11.8").glob("*__bt.txt"))
    if (top := _top_frame(p)) is not None and top.inline_function
]  # fmt: skip


def test_cuda_gdb_names_an_inlined_function_in_most_fixture_dumps():
    assert len(NAMED_BY_GDB) >= 5


@pytest.mark.parametrize("transcript", NAMED_BY_GDB, ids=lambda p: p.name)
def test_cuda_gdb_names_the_same_function_where_it_names_one(transcript):
    top = _top_frame(transcript)
    dump = DUMPS / f"{transcript.name.split('__')[0]}.nvcudmp"
    # WHEN the dump's fault is localized from the line table alone
    with open_coredump(dump) as core:
        site = localize(core, LocalizeOptions(nvdisasm=False))[0]
    # THEN the frame at cuda-gdb's file and line carries cuda-gdb's function
    named = {
        (PurePosixPath(frame.file).name, frame.line): name.function
        for frame, name in zip(site.chain, site.frame_names, strict=True)
        if name is not None
    }
    assert named[(PurePosixPath(top.file or "").name, top.line)] == top.inline_function


def test_a_second_kernel_s_inline_contexts_count_its_own_rows(tmp_path):
    # GIVEN two kernels inlining the same helpers, compiled with -lineinfo by the real nvcc
    source = FIXTURES / "cu" / "lines" / "two_inline_kernels.cu"
    cubin = tmp_path / "k.cubin"
    nvcc = require_nvcc()
    argv = [str(nvcc), "-cubin", "-O3", "-lineinfo", "-arch=sm_90", "-o", str(cubin), source.name]
    result = subprocess.run(argv, cwd=source.parent, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    data = cubin.read_bytes()
    table = read_line_table(ElfImage(data))
    assert table is not None
    second = next(f for f in summarize_cubin(data).functions if f.name == "_Z6secondPfi")
    # WHEN the chains at the second kernel's store are read from the line table
    expected = markers.expected_chain(source)
    stores = [
        r.offset for r in table.rows(second.section_index)
        if Path(r.file).name == expected[0][0] and r.line == expected[0][1]
    ]  # fmt: skip
    assert stores
    for offset in stores:
        chain = table.chain(second.section_index, offset)
        # THEN the call sites are the second kernel's lines, each frame named from the source
        assert [(Path(f.file).name, f.line) for f in chain] == expected
        assert [base_name(f.function or second.name) for f in chain] == [
            enclosing_function(source, f.line) for f in chain
        ]
