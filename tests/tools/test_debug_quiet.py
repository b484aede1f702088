"""`postmortem debug` opens the dump in cuda-gdb with the empty data directory that cures the
Debian build's unwinder fault: cuda-gdb then warns once that its Python files are missing,
not at every stop and frame (fixtures/transcripts/cuda-gdb/11.8/calls__bt.txt shows the
repeats the batch runs see)."""

from __future__ import annotations

import subprocess

from postmortem.gdb.command import QUIET_PYTHON, build_interactive_argv
from tests.tooling import DUMPS, require_tool


def test_the_interactive_session_warns_about_python_once(tmp_path):
    cuda_gdb = require_tool("cuda-gdb")
    argv = build_interactive_argv(
        cuda_gdb, DUMPS / "calls.nvcudmp", ("-batch", "-ex", "bt", "-ex", "frame 1"),
        data_directory=tmp_path,
    )  # fmt: skip
    assert argv[argv.index(QUIET_PYTHON) - 1] == "-iex"
    run = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    output = run.stdout + run.stderr
    # THEN the three frames are there, and at most the start-up's Python warning
    assert "#2" in output and "two_level" in output
    assert output.count("Python Exception") <= 1
