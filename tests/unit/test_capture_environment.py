"""The variables `postmortem capture` runs a command with: what is set, what the user's own
values override, and the `--print-env` lines a shell reads back."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from postmortem.capture.environment import (
    LIGHTWEIGHT_FLAGS,
    CaptureSettings,
    plan_environment,
    sanitizer_warning,
)
from postmortem.errors import BadOption
from tests.tooling import invoke

DIR = Path("/data/dumps")
BASE = {
    "CUDA_ENABLE_COREDUMP_ON_EXCEPTION": "1",
    "CUDA_COREDUMP_SHOW_PROGRESS": "1",
    "CUDA_COREDUMP_GENERATION_FLAGS": LIGHTWEIGHT_FLAGS,
    "CUDA_COREDUMP_FILE": "/data/dumps/core_%h.%p.%t.nvcudmp",
    "CUDA_LOG_FILE": "stderr",
    "PYTHONUNBUFFERED": "1",
}
HANG = {
    "CUDA_ENABLE_USER_TRIGGERED_COREDUMP": "1",
    "CUDA_COREDUMP_PIPE": "/data/dumps/corepipe.%h.%p",
}
SGLANG = {"SGLANG_CUDA_COREDUMP": "1", "SGLANG_CUDA_COREDUMP_DIR": "/data/dumps"}
API_LOG = {"SGLANG_KERNEL_API_LOGDEST": "/data/dumps/kernel_api.%i.log"}


def _without(mapping: dict[str, str], name: str) -> dict[str, str]:
    return {k: v for k, v in mapping.items() if k != name}


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        pytest.param(CaptureSettings(DIR), BASE, id="default"),
        pytest.param(
            CaptureSettings(DIR, full=True),
            _without(BASE, "CUDA_COREDUMP_GENERATION_FLAGS"),
            id="full",
        ),
        pytest.param(CaptureSettings(DIR, hang=True), {**BASE, **HANG}, id="hang"),
        pytest.param(CaptureSettings(DIR, sglang=True), {**BASE, **SGLANG}, id="sglang"),
        pytest.param(
            CaptureSettings(DIR, kernel_api_log="3"),
            {**BASE, "SGLANG_KERNEL_API_LOGLEVEL": "3", **API_LOG},
            id="kernel-api-log-3",
        ),
        pytest.param(
            CaptureSettings(DIR, kernel_api_log="10"),
            {
                **BASE,
                "SGLANG_KERNEL_API_LOGLEVEL": "10",
                **API_LOG,
                "SGLANG_KERNEL_API_DUMP_DIR": "/data/dumps/kernel_api_dumps",
            },
            id="kernel-api-log-10-snapshots",
        ),
    ],
)
def test_the_plan_sets_what_the_guides_prescribe(settings, expected):
    plan = plan_environment(settings, {})
    assert {v.name: v.value for v in plan.variables} == expected
    assert plan.notes == ()


def test_an_exported_value_wins_and_is_said_once():
    # GIVEN a user who exported their own dump file name, and an empty flags variable
    environ = {"CUDA_COREDUMP_FILE": "/scratch/core.%p", "CUDA_COREDUMP_GENERATION_FLAGS": ""}
    # WHEN the plan is made
    plan = plan_environment(CaptureSettings(DIR), environ)
    # THEN theirs is kept and said in one line; the empty one counts as not exported
    assert plan.value("CUDA_COREDUMP_FILE") == "/scratch/core.%p"
    assert plan.value("CUDA_COREDUMP_GENERATION_FLAGS") == LIGHTWEIGHT_FLAGS
    (note,) = plan.notes
    assert note.startswith("keeping CUDA_COREDUMP_FILE=/scratch/core.%p (already set;")
    assert "/data/dumps/core_%h.%p.%t.nvcudmp" in note


def test_an_exported_value_equal_to_ours_needs_no_note():
    plan = plan_environment(CaptureSettings(DIR), {"CUDA_COREDUMP_SHOW_PROGRESS": "1"})
    assert plan.notes == ()
    assert [v.kept for v in plan.variables if v.name == "CUDA_COREDUMP_SHOW_PROGRESS"] == [True]


def test_the_environment_adds_the_plan_to_the_current_one():
    plan = plan_environment(CaptureSettings(DIR), {"PATH": "/bin"})
    env = plan.environment({"PATH": "/bin", "HOME": "/root"})
    assert env["PATH"] == "/bin" and env["HOME"] == "/root"
    assert env["CUDA_ENABLE_COREDUMP_ON_EXCEPTION"] == "1"


def test_a_folder_with_a_percent_sign_is_refused():
    with pytest.raises(BadOption, match="holds %"):
        plan_environment(CaptureSettings(Path("/data/100%")), {})


def test_print_env_is_shell_that_sets_every_value(tmp_path):
    # GIVEN a dump folder whose name needs quoting in a shell, and an exported value to keep
    folder = tmp_path / "dumps of 'today' $HOME"
    env = {"PATH": "/usr/bin:/bin", "CUDA_COREDUMP_SHOW_PROGRESS": "0"}
    # WHEN the exports are printed (in this process, with that environment only) and a shell
    # sources them
    only = {**dict.fromkeys(os.environ), **env}
    printed = invoke("capture", "--print-env", "--dir", folder, "--hang", "--sglang", env=only)
    assert printed.returncode == 0, printed.stderr
    assert not folder.exists()  # printing runs nothing and makes nothing
    script = tmp_path / "exports.sh"
    script.write_text(printed.stdout)
    shell = subprocess.run(
        ["sh", "-c", '. "$1"; env', "sh", str(script)],
        capture_output=True, text=True, env={"PATH": env["PATH"]}, timeout=60,
    )  # fmt: skip
    # THEN the shell holds exactly the planned values, the kept one included
    assert shell.returncode == 0, shell.stderr
    seen = dict(line.split("=", 1) for line in shell.stdout.splitlines() if "=" in line)
    expected = plan_environment(CaptureSettings(folder, hang=True, sglang=True), env)
    for variable in expected.variables:
        assert seen[variable.name] == variable.value
    assert seen["CUDA_COREDUMP_FILE"] == f"{folder}/core_%h.%p.%t.nvcudmp"
    assert seen["CUDA_COREDUMP_SHOW_PROGRESS"] == "0"
    assert printed.stderr.splitlines() == [
        "postmortem: keeping CUDA_COREDUMP_SHOW_PROGRESS=0 (already set; capture would set 1)"
    ]
    assert folder.is_dir()  # the printed mkdir -p made it: the driver cannot make it


def test_print_env_pasted_into_a_script_elsewhere_keeps_the_dumps_where_asked(tmp_path):
    # GIVEN the lines printed for a relative --dir in one folder
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    printed = invoke("capture", "--print-env", "--dir", "dumps", cwd=here)
    assert printed.returncode == 0, printed.stderr
    # WHEN a job script runs them in another folder
    shell = subprocess.run(
        ["sh", "-euc", printed.stdout + 'echo "$CUDA_COREDUMP_FILE"'],
        capture_output=True, text=True, cwd=elsewhere, timeout=60,
    )  # fmt: skip
    # THEN the dump path is the absolute one asked for, and its folder exists for the driver
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines()[-1] == f"{here / 'dumps'}/core_%h.%p.%t.nvcudmp"
    assert (here / "dumps").is_dir() and not (elsewhere / "dumps").exists()


@pytest.mark.parametrize(
    ("argv", "warned"),
    [
        (("compute-sanitizer", "--tool", "memcheck", "python", "x.py"), True),
        (("/usr/local/cuda/bin/compute-sanitizer", "./app"), True),
        (("python", "serve.py"), False),
        (("python", "x.py", "--", "a", "compute-sanitizer"), False),
    ],
)
def test_a_command_under_compute_sanitizer_is_warned_of(argv, warned):
    warning = sanitizer_warning(argv)
    assert (warning is not None) is warned
    if warned:
        assert "clears the coredump variables" in warning
