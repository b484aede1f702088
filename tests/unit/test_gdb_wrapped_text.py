"""cuda-gdb output pasted from a terminal that wrapped its long lines at column 0.

No published transcript shows such a paste, so each case wraps a real transcript
(fixtures/transcripts/cuda-gdb/**) the way a terminal does: every line cut into pieces of the
terminal's width, the pieces on lines of their own, nothing indented. Where the pieces can be
put back together without guessing, the parse equals the parse of the unwrapped text; where
they cannot, the parser refuses.
"""

from __future__ import annotations

import pytest

from postmortem.gdb import Parsed, Unparsed, parse_exception_banner, parse_kernels, parse_warps
from postmortem.gdb.parse import parse_devices, parse_threads
from tests.tooling import TRANSCRIPTS, load_transcript

CUDA_GDB = TRANSCRIPTS / "cuda-gdb"


def transcript(name):
    return load_transcript(CUDA_GDB / name)[1]


def wrap(text, width=80, *, strip=False):
    """Cuts every line of `text` into pieces of `width` characters, as a terminal shows it;
    `strip` drops the trailing spaces of every piece, as some pastes do."""
    pieces = []
    for line in text.splitlines():
        cut = [line[i : i + width] for i in range(0, len(line), width)] or [""]
        pieces += [p.rstrip() for p in cut] if strip else cut
    return "\n".join(pieces) + "\n"


BANNERS = [
    "unstated/vllm-blog2-cutlass-banner-inlined.txt",
    "unstated/llamacpp-notes-exception-live.txt",
    "unstated/triton-gluon-tutorial-exception-live.txt",
    "unstated/vllm-blog-banner-no-lineinfo.txt",
    "docs-12.9/exception-live.txt",
    "11.8/oob_store__banner.txt",
]


@pytest.mark.parametrize("name", BANNERS, ids=str)
def test_banner_wrapped_at_80_columns_parses_as_unwrapped(name):
    # GIVEN a real banner whose long lines a terminal cut at column 80
    text = transcript(name)
    wrapped = wrap(text)
    assert wrapped != text or max(map(len, text.splitlines())) <= 80
    # WHEN both are parsed
    whole, pasted = parse_exception_banner(text), parse_exception_banner(wrapped)
    # THEN the wrapped one says exactly what the whole one says
    assert isinstance(pasted, Parsed), pasted
    assert pasted.value == whole.value


def test_wrapped_banner_function_and_location_are_rejoined():
    # GIVEN the CUTLASS banner (an 852-character "triggered at PC" line) wrapped at 80
    text = wrap(transcript("unstated/vllm-blog2-cutlass-banner-inlined.txt"))
    # WHEN it is parsed
    result = parse_exception_banner(text)
    # THEN the function, the location and the inline frame come out of the eleven pieces
    assert isinstance(result, Parsed)
    value = result.value
    assert value.function is not None and value.function.startswith("void cutlass::device_")
    assert value.function.endswith(">::GemmKernel::Params)")
    assert (value.file, value.line, value.inlined_from_file, value.inlined_from_line) == (
        "copy_sm90_tma.hpp", 185, "copy_sm90_tma.hpp", 348)  # fmt: skip
    assert value.inline_function == "_ZN4cute16SM90_TMA_LOAD_3D4copyEPKvPmmPvRKiS6_S6_"
    assert value.focus is not None and value.focus.cluster == (0, 1, 0)


def test_banner_cut_short_without_its_continuation_is_refused():
    # GIVEN the first 80 columns of a real "triggered at PC" line, followed by the next line
    # of the session instead of the rest (a paste that lost the continuation)
    lines = transcript("unstated/llamacpp-notes-exception-live.txt").splitlines()
    pasted = "\n".join([lines[0], lines[1][:80], *lines[2:]]) + "\n"
    # WHEN it is parsed
    result = parse_exception_banner(pasted)
    # THEN it is refused rather than read with a truncated function name
    assert isinstance(result, Unparsed)
    assert result.reason.startswith("a line is or may be cut short")
    assert result.raw == pasted


def test_banner_function_cut_before_any_bracket_is_refused():
    # GIVEN the cuda-graph banner wrapped at 80: the cut falls in the kernel's name,
    # "void at::native::vectorized_el" + "ementwise_kernel<4, …", before any bracket opens
    text = wrap(transcript("unstated/vllm-blog-banner-cuda-graph.txt"))
    # WHEN it is parsed
    result = parse_exception_banner(text)
    # THEN it is refused: a bare name followed by a piece could be whole or cut anywhere
    assert isinstance(result, Unparsed)
    assert result.reason.endswith("'The exception was triggered at PC 0x7fc2afba5e30  void at::"
                                  "native::vectorized_el'")  # fmt: skip


TABLES = [
    ("docs-12.9/info-cuda-kernels.txt", parse_kernels),
    ("11.8/oob_store__info-cuda-warps.txt", parse_warps),
    ("11.8/oob_store__info-cuda-devices.txt", parse_devices),
    ("11.8/cutlass_like.twin_r400__info-cuda-kernels.txt", parse_kernels),
    ("12.8/nvfp4-gemv-cluster__info-cuda-threads.txt", parse_threads),
]


@pytest.mark.parametrize(("name", "parser"), TABLES, ids=[t[0] for t in TABLES])
def test_table_wrapped_at_80_columns_parses_as_unwrapped(name, parser):
    # GIVEN a real table with rows (or a header) wider than 80 columns, wrapped at 80
    text = transcript(name)
    wrapped = wrap(text)
    assert wrapped != text
    # WHEN both are parsed
    whole, pasted = parser(text), parser(wrapped)
    # THEN the rows are the same
    assert isinstance(whole, Parsed), whole
    assert isinstance(pasted, Parsed), pasted
    assert pasted.value == whole.value


def test_wrapped_table_whose_paste_lost_trailing_spaces_is_read_collapsed():
    # GIVEN 11.8's warps table (header and rows 102 wide) wrapped at 80, each piece stripped
    text = transcript("11.8/oob_store__info-cuda-warps.txt")
    pasted = wrap(text, strip=True)
    # WHEN it is parsed
    whole, result = parse_warps(text), parse_warps(pasted)
    # THEN the cut header words and the cut rows are joined back (a space where one was lost)
    assert isinstance(result, Parsed), result
    assert [c.header for c in result.value[0].cells] == [c.header for c in whole.value[0].cells]
    fields = ("current", "device", "sm", "warp", "active_lanes_mask", "active_pc", "block_idx",
              "thread_idx")  # fmt: skip
    assert [tuple(getattr(r, f) for f in fields) for r in result.value] == [
        tuple(getattr(r, f) for f in fields) for r in whole.value
    ]


def test_wrapped_row_with_an_empty_cell_and_lost_spaces_is_refused():
    # GIVEN 12.8's threads table (empty Filename cells) wrapped at 80 and stripped: where the
    # empty cell was can no longer be told
    pasted = wrap(transcript("12.8/nvfp4-gemv-cluster__info-cuda-threads.txt"), strip=True)
    # WHEN it is parsed, THEN it is refused
    result = parse_threads(pasted)
    assert isinstance(result, Unparsed)
    assert result.reason.startswith("6 cells for 8 columns")


def test_wrapped_piece_that_looks_like_a_new_row_is_not_joined():
    # GIVEN 12.8's threads table wrapped at 60: the second piece of each row,
    # "fea15f9a70              0", ends where the first column ends, as a new row would
    pasted = wrap(transcript("12.8/nvfp4-gemv-cluster__info-cuda-threads.txt"), width=60)
    # WHEN it is parsed, THEN the parser refuses rather than guess which piece is which
    result = parse_threads(pasted)
    assert isinstance(result, Unparsed)
    assert "cells for 8 columns" in result.reason
