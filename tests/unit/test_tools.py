"""Finding external tools and reading their versions."""

from __future__ import annotations

import re
import stat
import sys
import time

import pytest

from postmortem import AnalyzeOptions, LocalizeOptions, Tool
from postmortem.errors import ToolFailed, ToolNotFound
from postmortem.toolrun import run_tool
from postmortem.tools import env_var_name, find_tool, install_hint, parse_version_text, tool_version


def make_tool(
    folder, name, script="#!/bin/sh\necho 'Cuda compilation tools, release 13.5, V13.5.37'\n"
):
    path = folder / name
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("POSTMORTEM_NVDISASM", "POSTMORTEM_CUDA_GDB", "CUDA_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    monkeypatch.setattr(sys, "path", [])
    return monkeypatch


def test_env_var_names():
    assert env_var_name("cuda-gdb") == "POSTMORTEM_CUDA_GDB"
    assert env_var_name("nvdisasm") == "POSTMORTEM_NVDISASM"


def test_explicit_path_wins_over_everything(clean_env, tmp_path):
    explicit = make_tool(tmp_path, "my-nvdisasm")
    clean_env.setenv("POSTMORTEM_NVDISASM", str(make_tool(tmp_path, "other")))
    assert find_tool("nvdisasm", explicit) == explicit


def test_missing_explicit_path_is_not_replaced_by_a_search(clean_env, tmp_path):
    make_tool(tmp_path, "nvdisasm")
    clean_env.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolNotFound) as info:
        find_tool("nvdisasm", tmp_path / "nope")
    assert info.value.searched == (f"given path {tmp_path / 'nope'}",)


def test_env_var_before_path(clean_env, tmp_path):
    on_path = tmp_path / "bin"
    on_path.mkdir()
    make_tool(on_path, "nvdisasm")
    from_env = make_tool(tmp_path, "env-nvdisasm")
    clean_env.setenv("PATH", str(on_path))
    clean_env.setenv("POSTMORTEM_NVDISASM", str(from_env))
    assert find_tool("nvdisasm") == from_env


def test_path_before_cuda_home(clean_env, tmp_path):
    on_path, home = tmp_path / "p", tmp_path / "cuda"
    on_path.mkdir()
    (home / "bin").mkdir(parents=True)
    make_tool(home / "bin", "nvdisasm")
    found = make_tool(on_path, "nvdisasm")
    clean_env.setenv("PATH", str(on_path))
    clean_env.setenv("CUDA_HOME", str(home))
    assert find_tool("nvdisasm") == found


def test_cuda_home_then_wheel_folder(clean_env, tmp_path):
    site = tmp_path / "site-packages"
    (site / "nvidia" / "cu13" / "bin").mkdir(parents=True)
    wheel_tool = make_tool(site / "nvidia" / "cu13" / "bin", "cuobjdump")
    sys.path.append(str(site))
    assert find_tool("cuobjdump") == wheel_tool
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    home_tool = make_tool(home / "bin", "cuobjdump")
    clean_env.setenv("CUDA_HOME", str(home))
    assert find_tool("cuobjdump") == home_tool


def test_not_found_lists_every_place_and_hint(clean_env, tmp_path):
    clean_env.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    with pytest.raises(ToolNotFound) as info:
        find_tool("nvdisasm")
    error = info.value
    assert error.searched[:3] == ("$PATH", str(tmp_path / "cuda" / "bin"), "/usr/local/cuda/bin")
    assert error.hint == "pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump"
    assert "nvdisasm not found" in str(error)


def test_install_hints():
    assert "nvidia-cuda-gdb" in install_hint("cuda-gdb") and "non-free" in install_hint("cuda-gdb")
    assert install_hint("cuobjdump") == "pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump"


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (
            "nvdisasm: NVIDIA (R) CUDA disassembler\n"
            "Cuda compilation tools, release 13.5, V13.5.37\n",
            "13.5.37",
        ),
        (
            "NVIDIA (R) CUDA Debugger\n11.8 release\n"
            "Portions Copyright (C) 2007-2022 NVIDIA Corporation\nGNU gdb (GDB) 10.2\n",
            "11.8",
        ),
        ("NVIDIA (R) CUDA Debugger\nCUDA Toolkit 12.1 release\nGNU gdb (GDB) 12.1\n", "12.1"),
        ("NVIDIA (R) cuda-gdb 11.8\n", "11.8"),
        ("GNU gdb (GDB) 10.2\n", None),
        ("", None),
    ],
    ids=["nvdisasm", "cuda-gdb-11.8", "cuda-gdb-12.1", "named", "plain-gdb", "empty"],
)
def test_parse_version_text(text, version):
    assert parse_version_text(text) == version


def test_tool_version_runs_the_tool(tmp_path):
    tool = make_tool(tmp_path, "nvdisasm")
    assert tool_version(tool) == "13.5.37"
    assert tool_version(tmp_path / "missing") is None


def test_run_tool_captures_output_and_status(tmp_path):
    tool = make_tool(tmp_path, "t", "#!/bin/sh\necho out; echo err >&2; exit 3\n")
    run = run_tool([tool], timeout=10)
    assert (run.stdout, run.stderr, run.returncode) == ("out\n", "err\n", 3)
    merged = run_tool([tool], timeout=10, merge_stderr=True)
    assert merged.stdout == "out\nerr\n" and merged.stderr == ""


def test_run_tool_timeout_kills_the_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    tool = make_tool(tmp_path, "hang", f"#!/bin/sh\nsleep 60 &\necho $! > {pidfile}\nwait\n")
    with pytest.raises(ToolFailed) as info:
        run_tool([tool], timeout=1)
    assert info.value.returncode is None and "timed out" in str(info.value)
    child = int(pidfile.read_text())
    # SIGKILL is delivered at once, but on a loaded machine the child may take a moment to die.
    deadline = time.monotonic() + 5
    while is_running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_running(child)


def is_running(pid):
    # A killed child whose new parent has not reaped it yet is a zombie ("Z"): not running.
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_run_tool_missing_program():
    with pytest.raises(ToolNotFound):
        run_tool(["/nonexistent/tool"], timeout=5)


def test_every_install_hint_names_packages_of_the_index_as_the_extras_do():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    from postmortem._version import EXTRA_PACKAGES
    from tests.conftest import FIXTURES

    extras = tomllib.loads((FIXTURES.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra, packages in EXTRA_PACKAGES.items():
        wanted = {re.split(r"[<>=!]", r)[0] for r in extras[extra]}
        assert {p.strip("'") for p in packages.split()} == wanted, extra


def test_a_tool_is_off_searched_or_named_whatever_shorthand_a_script_passes(clean_env, tmp_path):
    named = make_tool(tmp_path, "nvdisasm")
    # False is off, True and None are searched for, a path is that program
    assert Tool.of(False) == Tool.OFF and not Tool.OFF.run
    assert Tool.of(True) == Tool.of(None) == Tool()
    assert Tool.of(named) == Tool(path=str(named))
    assert AnalyzeOptions(cuda_gdb=False).cuda_gdb == Tool.OFF
    assert LocalizeOptions(nvdisasm=named).nvdisasm.locate("nvdisasm").path == named
    # what named a program is what the provenance says chose it
    choice = Tool(path=named, origin="--nvdisasm").locate("nvdisasm")
    assert (choice.path, choice.origin) == (named, "--nvdisasm")


def test_a_named_tool_that_is_not_there_is_not_replaced_by_a_search(clean_env, tmp_path):
    (tmp_path / "empty-path").mkdir()
    make_tool(tmp_path / "empty-path", "nvdisasm")  # one on PATH, which must not be taken
    with pytest.raises(ToolNotFound, match="--nvdisasm"):
        Tool(path=tmp_path / "missing", origin="--nvdisasm").locate("nvdisasm")
