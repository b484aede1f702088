"""The frames of a Triton kernel's inline chain: Triton names every inline context after the
kernel itself, so an inlined helper's frame is named from the `def` around its line when its
source is found, and left unnamed (never "in the kernel") when it is not.

The cubin is the corpus's `fused_moe_kernel` (fixtures/corpus/README.md: triton 3.9.0, sm_90),
with `write_zeros_to_output` inlined at fused_moe_like.py:42; its line table names the source
`fixtures/corpus/triton/fused_moe_like.py`, relative to the repository root.
"""

from __future__ import annotations

import ast
import subprocess
from functools import cache

from postmortem.analysis.fault.inline import LINE_TABLE, SOURCE_FILE, SYMBOL_TABLE, cubin_chain
from postmortem.analysis.fault.source import SourcePaths, function_finder
from postmortem.cubin.elfimage import ElfImage
from postmortem.cubin.inspect import summarize_cubin
from postmortem.cubin.lines import read_line_table
from postmortem.cubin.nvdisasm import build_nvdisasm_argv
from postmortem.cubin.sass import parse_sass
from tests.conftest import FIXTURES
from tests.tooling import require_tool

CUBIN = FIXTURES / "corpus" / "cubins" / "triton-3.9.0.fused_moe_like.sm_90.cubin"
SOURCE = FIXTURES / "corpus" / "triton" / "fused_moe_like.py"
ROOT = FIXTURES.parent
KERNEL = "fused_moe_kernel"


def _def_lines(name: str) -> range:
    """The lines of `def name` in the committed source, read with `ast` by the test itself."""
    node = next(
        n
        for n in ast.walk(ast.parse(SOURCE.read_text()))
        if isinstance(n, ast.FunctionDef) and n.name == name
    )
    return range(node.lineno, (node.end_lineno or node.lineno) + 1)


@cache
def _cubin():
    data = CUBIN.read_bytes()
    (kernel,) = summarize_cubin(data).functions
    table = read_line_table(ElfImage(data))
    assert table is not None
    return kernel, table


def _helper_offsets() -> list[int]:
    """Offsets whose innermost frame is a line of write_zeros_to_output."""
    kernel, table = _cubin()
    helper = _def_lines("write_zeros_to_output")
    return [
        row.offset
        for row in table.rows(kernel.section_index)
        if row.file.endswith("fused_moe_like.py") and row.line in helper
    ]


def test_the_line_table_names_the_kernel_for_the_inlined_helper():
    # GIVEN the raw line table: the helper's rows are inlined, yet named after the kernel
    kernel, table = _cubin()
    offsets = _helper_offsets()
    assert offsets
    for offset in offsets:
        inner, outer = table.chain(kernel.section_index, offset)
        assert (inner.function, outer.function) == (KERNEL, None)
        assert outer.line in _def_lines(KERNEL)


def test_a_helper_frame_is_named_from_its_def_when_the_source_is_found():
    kernel, table = _cubin()
    function_at = function_finder(SourcePaths((ROOT,)))
    for offset in _helper_offsets():
        # WHEN the chain is named with the source found under the repository root
        chain = cubin_chain(table, None, kernel, offset, function_at)
        assert chain is not None
        # THEN the inlined frame is the helper, from the source file; the outer the kernel
        inner, outer = chain.names
        assert (inner.function, inner.source) == ("write_zeros_to_output", SOURCE_FILE)
        assert (outer.function, outer.source) == (KERNEL, SYMBOL_TABLE)
        assert chain.notes == (
            "the line table names the kernel itself for frame #0 "
            f"(fixtures/corpus/triton/fused_moe_like.py:{chain.frames[0].line}), an inlined "
            "frame: named from the function around its line",
        )


def test_a_helper_frame_is_unnamed_when_the_source_is_not_found(tmp_path, monkeypatch):
    kernel, table = _cubin()
    monkeypatch.chdir(tmp_path)  # the table's relative path leads nowhere from here
    for function_at in (None, function_finder(SourcePaths((tmp_path,)))):
        for offset in _helper_offsets():
            chain = cubin_chain(table, None, kernel, offset, function_at)
            assert chain is not None
            # THEN the frame has no name rather than the kernel's, and the notes say why
            assert chain.names[0] is None
            assert chain.names[1].function == KERNEL
            assert "left unnamed" in chain.notes[0]


def test_no_frame_is_ever_named_after_the_kernel_it_is_inlined_into(tmp_path, monkeypatch):
    kernel, table = _cubin()
    monkeypatch.chdir(tmp_path)
    for function_at in (None, function_finder(SourcePaths((ROOT,)))):
        for row in table.rows(kernel.section_index):
            chain = cubin_chain(table, None, kernel, row.offset, function_at)
            assert chain is not None
            inner = [n for n in chain.names[:-1] if n is not None]
            assert all(n.function != KERNEL for n in inner), (row, chain)
            assert all(n.source in (SOURCE_FILE, LINE_TABLE) for n in inner)


def test_the_chain_files_and_lines_agree_with_nvdisasm():
    # GIVEN the real nvdisasm's -gi chains over the whole kernel
    nvdisasm = require_tool("nvdisasm")
    kernel, table = _cubin()
    argv = build_nvdisasm_argv(nvdisasm, CUBIN, kernel.symbol_index)
    listing = parse_sass(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    inlined = 0
    for instruction in listing.instructions:
        chain = cubin_chain(
            table, None, kernel, instruction.offset, function_finder(SourcePaths((ROOT,)))
        )
        listed = [(f.file, f.line) for f in instruction.inline_chain]
        # THEN each renamed chain keeps the table's files and lines, which are nvdisasm's
        assert [(f.file, f.line) for f in chain.frames] == listed if chain else not listed
        inlined += bool(chain and len(chain.frames) > 1)
    assert inlined >= len(_helper_offsets())


def _report_of_the_dump(source_dirs):
    from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
    from postmortem.analysis.fault.fault import LocalizeOptions
    from postmortem.report.context import build_report
    from tests.tooling import DUMPS

    options = AnalyzeOptions(
        LocalizeOptions(sources=SourcePaths(tuple(source_dirs))), cuda_gdb=False
    )
    return build_report(analyze_dump(DUMPS / "triton_helper_fault.nvcudmp", options))


def test_a_fault_in_the_helper_is_reported_in_the_helper(tmp_path, monkeypatch):
    # GIVEN a dump faulting at a store of write_zeros_to_output, analyzed from elsewhere
    monkeypatch.chdir(tmp_path)
    # WHEN the sources are given
    chain = _report_of_the_dump((FIXTURES.parent,))["sites"][0]["chain"]
    # THEN the helper's frame is the helper's, named from its `def`
    assert [(f["line"], f["function"], f["function_source"]) for f in chain] == [
        (13, "write_zeros_to_output", SOURCE_FILE),
        (42, "fused_moe_kernel", SYMBOL_TABLE),
    ]
    # AND without them it is not named at all, never after the kernel
    bare = _report_of_the_dump(())["sites"][0]["chain"]
    assert [f["function"] for f in bare] == [None, "fused_moe_kernel"]
