"""The cuda-gdb argv builder and the marker splitter (pure; no cuda-gdb needed)."""

from __future__ import annotations

from postmortem.gdb import DEFAULT_COMMANDS, build_cuda_gdb_argv, split_output
from postmortem.gdb.command import CommandOutput


def pairs(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_argv_starts_batch_without_init_files_or_auto_load():
    argv = build_cuda_gdb_argv("/opt/cuda/bin/cuda-gdb", "core.nvcudmp", ["bt"])
    assert argv[:3] == ["/opt/cuda/bin/cuda-gdb", "-batch", "-nx"]
    assert pairs(argv, "-iex") == [
        "set auto-load off",
        "set pagination off",
        "set confirm off",
        "set width 0",
        "set height 0",
    ]


def test_each_command_is_its_own_ex_between_markers():
    argv = build_cuda_gdb_argv(
        "cuda-gdb", "dir with space/core.nvcudmp", ["info cuda kernels", "bt"]
    )
    assert pairs(argv, "-ex") == [
        "echo @@pm:begin 0 target cudacore@@\\n",
        "target cudacore dir with space/core.nvcudmp",
        "echo @@pm:end 0 target cudacore@@\\n",
        "echo @@pm:begin 1 info cuda kernels@@\\n",
        "info cuda kernels",
        "echo @@pm:end 1 info cuda kernels@@\\n",
        "echo @@pm:begin 2 bt@@\\n",
        "bt",
        "echo @@pm:end 2 bt@@\\n",
    ]


def test_data_directory_comes_before_any_command():
    argv = build_cuda_gdb_argv("cuda-gdb", "c", ["bt"], data_directory="/tmp/empty")
    assert argv[3:5] == ["-data-directory", "/tmp/empty"]
    assert argv.index("-data-directory") < argv.index("-iex") < argv.index("-ex")


def test_backslash_in_a_command_is_escaped_for_echo():
    argv = build_cuda_gdb_argv("cuda-gdb", "c", ['printf "%d\\n", 1'])
    assert 'echo @@pm:begin 1 printf "%d\\\\n", 1@@\\n' in argv


def test_default_commands_cover_tables_error_pc_and_frames():
    for needed in ("info cuda kernels", "info cuda lanes", "p/x $errorpc", "bt"):
        assert needed in DEFAULT_COMMANDS


def test_split_output_cuts_at_markers_and_keeps_the_rest_outside():
    text = (
        "warning: early\n"
        "@@pm:begin 0 target cudacore@@\nOpening GPU coredump: c\nCUDA Exception: X\n"
        "@@pm:end 0 target cudacore@@\n"
        "@@pm:begin 1 bt@@\nA Unwinder should return gdb.UnwindInfo instance.\n@@pm:end 1 bt@@\n"
        "@@pm:begin 2 info cuda lanes@@\n  Ln State\n"
    )
    split = split_output(text)
    assert split.outside == "warning: early"
    assert split.outputs == (
        CommandOutput("target cudacore", "Opening GPU coredump: c\nCUDA Exception: X", True),
        CommandOutput("bt", "A Unwinder should return gdb.UnwindInfo instance.", True),
        CommandOutput("info cuda lanes", "  Ln State", False),
    )
