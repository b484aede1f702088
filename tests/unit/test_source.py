"""Finding a build machine's source files here, and quoting the lines of an inline chain."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from postmortem.analysis.fault.source import PathMap, SourcePaths, function_finder, quote
from postmortem.cubin.sass import SourceFrame
from tests.fifo import rescued


def test_path_map_parses_old_equals_new_and_refuses_anything_else():
    assert PathMap.parse("/build/ci=/home/me/src") == PathMap("/build/ci", "/home/me/src")
    assert PathMap.parse("/a=") == PathMap("/a", "")
    for text in ("/build/ci", "=/home/me"):
        with pytest.raises(ValueError, match="expected OLD=NEW"):
            PathMap.parse(text)


def test_candidates_try_the_path_then_the_mapped_path_then_shorter_tails_under_each_dir():
    found = SourcePaths((Path("/src"),), (PathMap("/build/ci", "/home/me"),)).candidates(
        "/build/ci/include/store.cuh"
    )
    assert found == [
        Path("/build/ci/include/store.cuh"),
        Path("/src/build/ci/include/store.cuh"),
        Path("/src/ci/include/store.cuh"),
        Path("/src/include/store.cuh"),
        Path("/src/store.cuh"),
        Path("/home/me/include/store.cuh"),
        Path("/src/home/me/include/store.cuh"),
        Path("/src/me/include/store.cuh"),
    ]


def test_quote_finds_each_frame_under_a_source_dir_and_says_why_when_it_cannot(tmp_path):
    # GIVEN store.cuh (3 lines) under a source dir, and a chain of three frames
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "store.cuh").write_text("a\n  p[i] = v;\nc\n")
    chain = (
        SourceFrame("/build/include/store.cuh", 2),
        SourceFrame("/build/include/store.cuh", 9),
        SourceFrame("/build/oob_store.cu", 19),
    )
    # WHEN quoted
    quoted = quote(chain, SourcePaths((tmp_path,)))
    # THEN the line is quoted, the line past the end and the missing file say why
    assert [(q.path, q.text, q.reason) for q in quoted] == [
        (tmp_path / "include" / "store.cuh", "  p[i] = v;", None),
        (tmp_path / "include" / "store.cuh", None, "the file has 3 lines"),
        (None, None, "file not found"),
    ]


def test_a_path_map_finds_a_file_moved_here(tmp_path):
    (tmp_path / "k.cu").write_text("x" * 1000 + "\n")
    (quoted,) = quote(
        [SourceFrame("/build/ci/k.cu", 1)], SourcePaths((), (PathMap("/build/ci", str(tmp_path)),))
    )
    assert quoted.path == tmp_path / "k.cu"
    assert quoted.text == "x" * 400  # long lines are cut


def test_a_path_map_matches_whole_path_components_only():
    mapped = SourcePaths(maps=(PathMap("/build/ci", "/home/me"),))
    assert Path("/home/me/k.cu") in mapped.candidates("/build/ci/k.cu")
    assert mapped.candidates("/build/ci2/k.cu") == [Path("/build/ci2/k.cu")]
    slashed = SourcePaths(maps=(PathMap("/build/", "/home/me/"),))
    assert Path("/home/me/k.cu") in slashed.candidates("/build/k.cu")


def test_a_line_table_naming_a_system_file_is_never_quoted(tmp_path):
    # A hostile line table may name /proc/self/environ: a shared report must not quote it.
    (quoted,) = quote([SourceFrame("/proc/self/environ", 1)], SourcePaths())
    assert quoted.text is None and quoted.reason == "file not found"
    link = tmp_path / "k.cu"
    link.symlink_to("/proc/self/status")
    (through_link,) = quote([SourceFrame(str(link), 1)], SourcePaths())
    assert through_link.text is None


def test_a_source_replaced_by_a_fifo_after_the_check_is_not_read(tmp_path, monkeypatch):
    # GIVEN a source file that passed the check and was then replaced by a FIFO no one writes
    fifo = tmp_path / "k.cu"
    os.mkfifo(fifo)
    monkeypatch.setattr("postmortem.analysis.fault.source._quotable", lambda path: path == fifo)
    # WHEN it is quoted
    started = time.monotonic()
    with rescued(fifo):
        (quoted,) = quote([SourceFrame(str(fifo), 1)], SourcePaths())
    # THEN it is not quoted, at once, with a note
    assert time.monotonic() - started < 5
    assert (quoted.path, quoted.text, quoted.reason) == (fifo, None, "file not readable")


KERNELS = """import triton


@triton.jit
def helper(x):
    y = x + 1
    return y


@triton.jit
def kernel(ptr):
    def inner(v):
        return v * 2

    value = helper(inner(1))
    return value
"""


def test_the_def_around_a_line_of_a_python_source_is_named(tmp_path):
    # GIVEN a Triton-style source under a source directory, named as a build machine would
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "kernels.py").write_text(KERNELS)
    function_at = function_finder(SourcePaths((tmp_path,), (PathMap("/build", "/elsewhere"),)))
    # THEN each line is named after the innermost def holding it; other lines after none
    file = "/build/pkg/kernels.py"
    assert [function_at(file, line) for line in (6, 7, 12, 13, 15, 1, 9)] == [
        "helper", "helper", "inner", "inner", "kernel", None, None,
    ]  # fmt: skip


NVRTC_PROGRAM = """// a JIT-compiled program
#define SQUARE(x) ((x) * (x))
namespace jit {
struct Pair { int a; int b; };
template <typename T>
__device__ __forceinline__ T load_twice(const T* p) {
  const char* s = "}{";
  return p[0] + p[1];
}
}  // namespace jit

extern "C" __global__ void __launch_bounds__(256) scale(float* out, const float* in) {
  auto twice = [&](int i) {
    return jit::load_twice(in + i);
  };
  if (threadIdx.x < 8) {
    out[threadIdx.x] = twice(threadIdx.x);
  }
}
"""


def test_the_function_around_a_line_of_a_cuda_source_is_named(tmp_path):
    # GIVEN an NVRTC program whose text the user saved under its default name
    (tmp_path / "default_program").write_text(NVRTC_PROGRAM)
    function_at = function_finder(SourcePaths((tmp_path,)))
    # THEN a line is named after the function body holding it: a lambda, a control block,
    # a namespace or a struct is no function of its own
    assert [function_at("default_program", line) for line in (7, 8, 14, 17, 3, 4, 1)] == [
        "load_twice", "load_twice", "scale", "scale", None, None, None,
    ]  # fmt: skip


def test_a_missing_source_or_a_python_file_that_does_not_parse_names_nothing(tmp_path):
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    function_at = function_finder(SourcePaths((tmp_path,)))
    assert function_at("broken.py", 2) is None
    assert function_at("/nowhere/kernels.py", 6) is None


def test_an_nvrtc_program_not_found_is_said_not_kept_rather_than_not_found(tmp_path):
    (quoted_program, quoted_other) = quote(
        [SourceFrame("default_program", 3), SourceFrame("/build/k.cu", 3)], SourcePaths((tmp_path,))
    )
    assert quoted_program.reason == (
        "not kept: NVRTC compiled it from a string (default_program); pass its text, saved "
        "as default_program, with --source-dir"
    )
    assert quoted_other.reason == "file not found"
