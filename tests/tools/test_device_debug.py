"""A `-G` build names its inline chain in `.debug_info`: the chain is read from there.

The fixture sources are compiled here with `-G` by the real nvcc (the `nvidia-cuda-nvcc`
wheel of the fixtures extra, as `make fixtures` uses), into a temporary folder: a debug
build's DWARF holds the build machine's paths, so it is never committed. The expected chain
and every frame's function come from the sources' markers and text, never from our output.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from postmortem.analysis.fault.inline import DEBUG_INFO, SYMBOL_TABLE, cubin_chain, reconcile
from postmortem.cubin.dwarfinfo import read_inline_tree
from postmortem.cubin.elfimage import ElfImage
from postmortem.cubin.inspect import summarize_cubin
from postmortem.cubin.lines import read_line_table
from postmortem.cubin.nvdisasm import build_nvdisasm_argv
from postmortem.cubin.sass import parse_sass
from postmortem.demangle import base_name
from postmortem.errors import MalformedElf
from tests.conftest import FIXTURES
from tests.csource import enclosing_function
from tests.tooling import require_nvcc, require_tool

sys.path.insert(0, str(FIXTURES / "builder"))
import markers  # noqa: E402

SOURCES = FIXTURES / "cu"
PLANTED = ["oob_store", "cutlass_like", "two_kernels", "misaligned_load"]


@pytest.fixture(scope="module")
def debug_cubins(tmp_path_factory) -> dict[str, Path]:
    nvcc = require_nvcc()
    out = tmp_path_factory.mktemp("device-debug")
    built = {}
    for name in PLANTED:
        cubin = out / f"{name}.cubin"
        argv = [str(nvcc), "-cubin", "-G", "-arch=sm_90", "-I", "include", "-o", str(cubin),
                f"{name}.cu"]  # fmt: skip
        result = subprocess.run(argv, cwd=SOURCES, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        built[name] = cubin
    return built


def _fault_chains(cubin: Path, name: str):
    """The named chain of every instruction whose own line is the planted fault's."""
    data = cubin.read_bytes()
    image = ElfImage(data)
    table, tree = read_line_table(image), read_inline_tree(image)
    assert table is not None and tree is not None
    fault_file, fault_line = markers.expected_chain(SOURCES / f"{name}.cu")[0]
    chains = []
    for function in summarize_cubin(data).functions:
        for row in table.rows(function.section_index):
            if Path(row.file).name == fault_file and row.line == fault_line:
                chain = cubin_chain(table, tree, function, row.offset)
                assert chain is not None
                chains.append((function, chain))
    assert chains, f"no instruction of {name} sits on {fault_file}:{fault_line}"
    return chains


@pytest.mark.parametrize("name", PLANTED)
def test_a_debug_build_gives_the_planted_chain_from_its_debug_info(name, debug_cubins):
    expected = markers.expected_chain(SOURCES / f"{name}.cu")
    for _, chain in _fault_chains(debug_cubins[name], name):
        assert chain.origin == DEBUG_INFO
        assert [(Path(f.file).name, f.line) for f in chain.frames] == expected


@pytest.mark.parametrize("name", PLANTED)
def test_every_debug_build_frame_is_named_after_the_function_holding_its_line(name, debug_cubins):
    for _, chain in _fault_chains(debug_cubins[name], name):
        named = [
            (f"{frame.file}:{frame.line}", base_name(label.function) if label else None,
             enclosing_function(Path(frame.file), frame.line))
            for frame, label in zip(chain.frames, chain.names, strict=True)
        ]  # fmt: skip
        assert all(expected for _, _, expected in named), named
        assert [(w, got) for w, got, _ in named] == [(w, e) for w, _, e in named]
        sources = [label.source if label else None for label in chain.names]
        assert sources == [DEBUG_INFO] * (len(sources) - 1) + [SYMBOL_TABLE]


def test_nvdisasm_prints_a_debug_build_flat_and_the_chain_extends_it(debug_cubins):
    # GIVEN the -G build of oob_store and the real nvdisasm
    nvdisasm = require_tool("nvdisasm")
    cubin = debug_cubins["oob_store"]
    (function, chain), *_ = _fault_chains(cubin, "oob_store")
    argv = build_nvdisasm_argv(nvdisasm, cubin, function.symbol_index)
    listing = parse_sass(subprocess.run(argv, capture_output=True, text=True).stdout)
    offset = next(
        r.offset for r in read_line_table(ElfImage(cubin.read_bytes())).rows(function.section_index)
        if r.line == chain.frames[0].line and Path(r.file).name == Path(chain.frames[0].file).name
    )  # fmt: skip
    listed = listing.at(offset)
    assert listed is not None
    # THEN nvdisasm shows only the PC's own line, and the reconciled chain keeps all frames
    assert len(listed.inline_chain) == 1
    shown, disagreement = reconcile(chain, listed.inline_chain)
    assert disagreement is None and shown == chain and len(shown.frames) == 4


def test_mutants_of_debug_info_raise_nothing_but_malformed_elf(debug_cubins):
    # GIVEN a -G cubin, and its .debug_info and .debug_abbrev where they sit in the file
    data = debug_cubins["cutlass_like"].read_bytes()
    image = ElfImage(data)
    spans = [
        (s.offset, s.size_bytes) for s in image.sections
        if s.name in (".debug_info", ".debug_abbrev", ".rela.debug_info")
    ]  # fmt: skip
    rng = random.Random(7)
    # WHEN 1,500 copies with bytes of those sections overwritten are read
    for _ in range(1500):
        mutant = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            start, size = rng.choice(spans)
            mutant[start + rng.randrange(size)] = rng.randrange(256)
        # THEN each reads, or raises MalformedElf, and a lookup stays bounded
        try:
            tree = read_inline_tree(ElfImage(bytes(mutant)))
        except MalformedElf:
            continue
        for function in tree.functions if tree else ():
            assert len(tree.calls_at(function.section, function.low)) <= 257
