"""The check of the coredump variables: every misconfiguration that loses a dump is caught and
said with its fix, a sound environment gives no problem, the folders are looked at for real,
a running process's environment is read from /proc, and the commands act on the verdict
(`capture --check`, `--check --pid`, `--print-env`, and a capture that refuses to start)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from postmortem.capture import trigger
from postmortem.capture.checks import (
    DUMP_FILE,
    FLAGS,
    GENERATION_FLAGS,
    LIGHTWEIGHT,
    ON_EXCEPTION,
    PIPE,
    SHOW_PROGRESS,
    USER_TRIGGER,
    WAITS,
    DumpKind,
    Severity,
    check_environment,
)
from postmortem.capture.environment import LIGHTWEIGHT_FLAGS, CaptureSettings, plan_environment
from postmortem.capture.trigger import cwd_of_pid, environ_of_pid
from postmortem.errors import UnreadableFile
from postmortem.model import GENERATION_FLAGS as FLAG_BITS
from tests.tooling import invoke

HOST = "node-1"


def clean(folder: Path) -> dict[str, str]:
    """What `capture` sets, with the dumps going into `folder`."""
    return {
        ON_EXCEPTION: "1",
        SHOW_PROGRESS: "1",
        FLAGS: LIGHTWEIGHT_FLAGS,
        DUMP_FILE: f"{folder}/core_%h.%p.%t.nvcudmp",
    }


def clean_hang(folder: Path) -> dict[str, str]:
    """`capture --hang`'s: dumps on demand through a pipe in `folder` too."""
    return {**clean(folder), USER_TRIGGER: "1", PIPE: f"{folder}/corepipe.%h.%p"}


def without(environ: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in names}


def a_file(folder: Path) -> Path:
    path = folder / "file"
    path.write_text("not a folder")
    return path


class Case(NamedTuple):
    environ: Callable[[Path], dict[str, str]]
    severity: Severity
    variable: str
    said: str
    """Part of the problem's message."""
    fix: str
    """Part of its fix."""
    on_exception: bool
    on_demand: bool = False


CASES = {
    "waits-on-exception": Case(
        lambda f: {**clean_hang(f), WAITS: "1"}, Severity.ERROR, WAITS,
        '"CUDA coredump is not supported with CUDA attach on exception"',
        "unset CUDA_DEVICE_WAITS_ON_EXCEPTION", on_exception=False,
    ),
    "lightweight-variable-removed-in-13": Case(
        lambda f: {**without(clean(f), FLAGS), LIGHTWEIGHT: "1"}, Severity.WARNING, LIGHTWEIGHT,
        "CUDA 13.0 removed CUDA_ENABLE_LIGHTWEIGHT_COREDUMP",
        f"use {FLAGS}={LIGHTWEIGHT_FLAGS} instead of {LIGHTWEIGHT}=1", on_exception=True,
    ),
    "flag-misspelled": Case(
        lambda f: {**clean(f), FLAGS: "skip_global_mem,skip_shared_memory"}, Severity.WARNING,
        FLAGS, "'skip_global_mem' is not a flag name the driver documents",
        "did you mean skip_global_memory?", on_exception=True,
    ),
    "flag-in-upper-case": Case(
        lambda f: {**clean(f), FLAGS: "skip_global_memory,SKIP_ABORT"}, Severity.WARNING, FLAGS,
        "'SKIP_ABORT'", "write it in lower case, skip_abort", on_exception=True,
    ),
    "flag-unknown": Case(
        lambda f: {**clean(f), FLAGS: "compress_it_all"}, Severity.WARNING, FLAGS,
        "'compress_it_all'", "use only skip_nonrelocated_elf_images,", on_exception=True,
    ),
    "dump-folder-missing": Case(
        lambda f: {**clean(f), DUMP_FILE: f"{f}/missing/core.%p"}, Severity.ERROR, DUMP_FILE,
        "/missing does not exist: no dump is written", "mkdir -p ", on_exception=False,
    ),
    "dump-folder-is-a-file": Case(
        lambda f: {**clean(f), DUMP_FILE: f"{a_file(f)}/core.%p"}, Severity.ERROR, DUMP_FILE,
        "/file is not a folder: no dump is written", "export CUDA_COREDUMP_FILE=DIR/core.%p",
        on_exception=False,
    ),
    "dump-folder-under-a-file": Case(
        lambda f: {**clean(f), DUMP_FILE: f"{a_file(f)}/sub/core.%p"}, Severity.ERROR,
        DUMP_FILE, "/sub cannot exist (", "export CUDA_COREDUMP_FILE=DIR/core.%p",
        on_exception=False,
    ),
    "dump-folder-per-process": Case(
        lambda f: {**clean(f), DUMP_FILE: f"{f}/%p/core.nvcudmp"}, Severity.ERROR, DUMP_FILE,
        "its folder holds %p or %t", "CUDA_COREDUMP_FILE=DIR/core.nvcudmp", on_exception=False,
    ),
    "pipe-folder-missing": Case(
        lambda f: {**clean_hang(f), PIPE: f"{f}/gone/corepipe.%h.%p"}, Severity.ERROR, PIPE,
        "/gone does not exist: no pipe is written", "mkdir -p ", on_exception=True,
    ),
    "trigger-without-pipe": Case(
        lambda f: without(clean_hang(f), PIPE), Severity.WARNING, PIPE,
        "makes each process's pipe as corepipe.cuda.%h.%p in its working folder (",
        "export CUDA_COREDUMP_PIPE=DIR/corepipe.%h.%p", on_exception=True, on_demand=True,
    ),
    "on-exception-unset": Case(
        lambda f: without(clean(f), ON_EXCEPTION), Severity.ERROR, ON_EXCEPTION,
        "CUDA_ENABLE_COREDUMP_ON_EXCEPTION is not set, not 1: GPU coredumps are off, whatever",
        "export CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1", on_exception=False,
    ),
    "on-exception-0": Case(
        lambda f: {**clean(f), ON_EXCEPTION: "0"}, Severity.ERROR, ON_EXCEPTION,
        "CUDA_ENABLE_COREDUMP_ON_EXCEPTION is '0', not 1", "=1", on_exception=False,
    ),
    "on-exception-true": Case(
        lambda f: {**clean(f), ON_EXCEPTION: "true"}, Severity.ERROR, ON_EXCEPTION,
        "CUDA_ENABLE_COREDUMP_ON_EXCEPTION is 'true', not 1", "=1", on_exception=False,
    ),
    "trigger-without-on-exception": Case(
        lambda f: without(clean_hang(f), ON_EXCEPTION), Severity.ERROR, ON_EXCEPTION,
        "a hang can be dumped on demand, but a GPU exception writes no dump",
        "export CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1", on_exception=False, on_demand=True,
    ),
    "progress-off": Case(
        lambda f: {**clean(f), SHOW_PROGRESS: "0"}, Severity.WARNING, SHOW_PROGRESS,
        'does not log where it writes a dump (its "Writing ELF file to" line',
        "export CUDA_COREDUMP_SHOW_PROGRESS=1", on_exception=True,
    ),
    "nothing-set": Case(
        lambda f: {}, Severity.ERROR, ON_EXCEPTION,
        "no coredump variable is set: a GPU exception writes no dump",
        "or run the command under `postmortem capture`", on_exception=False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_each_misconfiguration_is_one_problem_with_its_fix(tmp_path, case):
    # GIVEN an environment with one thing wrong
    environ = case.environ(tmp_path)
    # WHEN it is checked
    check = check_environment(environ, tmp_path, host=HOST)
    # THEN that one problem is found, with its severity, variable, message and fix
    (problem,) = check.problems
    assert problem.severity is case.severity
    assert problem.variables[0] == case.variable
    assert case.said in problem.message, problem.message
    assert case.fix in problem.fix, problem.fix
    assert "\n" not in problem.message + problem.fix
    # AND the verdict follows from it
    assert check.on_exception is case.on_exception
    assert check.on_demand is case.on_demand


@pytest.mark.parametrize(
    "environ",
    [
        pytest.param(clean, id="on-exception"),
        pytest.param(clean_hang, id="on-exception-and-hang"),
        pytest.param(
            lambda f: {**clean_hang(f), "CUDA_LAUNCH_BLOCKING": "1"}, id="launch-blocking"
        ),
        pytest.param(lambda f: {**clean(f), LIGHTWEIGHT: "1"}, id="lightweight-with-flags"),
        pytest.param(lambda f: {**clean(f), WAITS: "0"}, id="waits-off"),
        pytest.param(lambda f: {**clean(f), FLAGS: " skip_abort , gzip_compress,"}, id="spaces"),
    ],
)
def test_a_sound_environment_gives_no_problem(tmp_path, environ):
    env = environ(tmp_path)
    check = check_environment(env, tmp_path, host=HOST)
    assert check.problems == ()
    assert check.on_exception
    assert check.on_demand is (USER_TRIGGER in env)
    assert check.dump.folder == tmp_path and not check.dump.default


def test_the_plan_of_capture_is_sound_before_its_folder_is_made(tmp_path):
    # GIVEN capture's own plan, whose folder capture makes before the command starts
    folder = tmp_path / "dumps"
    plan = plan_environment(CaptureSettings(folder, hang=True), {})
    environ = plan.environment({})
    # THEN it is sound once made, and before, when it is known to be made
    assert check_environment(environ, tmp_path, made=(folder,)).problems == ()
    dump, pipe = check_environment(environ, tmp_path).problems
    assert dump.variables == (DUMP_FILE,) and "does not exist" in dump.message
    assert pipe.variables == (PIPE,) and "does not exist" in pipe.message
    folder.mkdir()
    assert check_environment(environ, tmp_path).problems == ()


def test_a_folder_to_be_made_under_a_file_is_an_error(tmp_path):
    folder = a_file(tmp_path) / "dumps"
    environ = clean(folder)
    (problem,) = check_environment(environ, tmp_path, made=(folder,)).problems
    assert "cannot exist" in problem.message and str(tmp_path / "file") in problem.message


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder this user cannot write: a mode of 0555 for a user, a folder of /proc for root
    (which the mode bits do not stop); skipped, and said, when there is none."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    if not os.access(folder, os.W_OK):
        return folder
    proc = Path("/proc/sys")
    if proc.is_dir() and not os.access(proc, os.W_OK):
        return proc
    pytest.skip("no folder here that this user cannot write (root, and /proc/sys writable)")


def test_a_read_only_dump_folder_is_an_error(tmp_path):
    folder = _unwritable_folder(tmp_path)
    check = check_environment(clean(folder), tmp_path, host=HOST)
    (problem,) = check.problems
    assert problem.severity is Severity.ERROR
    assert f"{folder} is not writable: no dump is written" in problem.message
    assert not check.on_exception


def test_a_folder_to_be_made_in_a_read_only_one_is_an_error(tmp_path):
    folder = _unwritable_folder(tmp_path) / "dumps"
    (problem,) = check_environment(clean(folder), tmp_path, made=(folder,)).problems
    assert "cannot be made" in problem.message and "is not writable" in problem.message


def test_a_relative_dump_name_is_taken_from_the_working_folder_and_h_is_the_host(tmp_path):
    (tmp_path / "node-1").mkdir()
    environ = {**clean(tmp_path), DUMP_FILE: "%h/core.%p.nvcudmp"}
    check = check_environment(environ, tmp_path, host=HOST)
    assert check.problems == ()
    assert check.dump.folder == tmp_path / "node-1"


def test_without_a_dump_name_the_dump_goes_into_the_working_folder(tmp_path):
    check = check_environment(without(clean(tmp_path), DUMP_FILE), tmp_path, host=HOST)
    assert check.problems == ()
    assert check.dump.default and check.dump.folder == tmp_path


@pytest.mark.parametrize(
    ("flags", "kind", "skipped", "aborts", "compressed"),
    [
        (LIGHTWEIGHT_FLAGS, DumpKind.LIGHTWEIGHT, 5, True, False),
        # CU_COREDUMP_LIGHTWEIGHT_FLAGS before CUDA 12.6: the constant banks kept
        (LIGHTWEIGHT_FLAGS.replace(",skip_constbank_memory", ""), DumpKind.LIGHTWEIGHT, 4, 1, 0),
        ("", DumpKind.FULL, 0, True, False),
        ("skip_abort,gzip_compress", DumpKind.FULL, 0, False, True),
        ("skip_global_memory", DumpKind.PARTIAL, 1, True, False),
        ("faulted_contexts_only", DumpKind.PARTIAL, 1, True, False),
    ],
)
def test_the_flags_say_what_the_dump_keeps_and_leaves_out(
    tmp_path, flags, kind, skipped, aborts, compressed
):
    contents = check_environment({**clean(tmp_path), FLAGS: flags}, tmp_path).contents
    assert contents.kind is kind
    assert len(contents.skipped) == skipped
    assert contents.aborts is bool(aborts) and contents.compressed is bool(compressed)
    assert "registers and device tables" in contents.kept
    assert not set(contents.kept) & set(contents.skipped)


def test_the_removed_variable_alone_leaves_the_contents_to_the_driver(tmp_path):
    environ = {**without(clean(tmp_path), FLAGS), LIGHTWEIGHT: "1"}
    assert check_environment(environ, tmp_path).contents.kind is DumpKind.DRIVER_DEPENDENT


def test_the_flag_names_are_those_a_dump_records():
    # The reader names a dump's recorded flags (model.GENERATION_FLAGS) from the same enum.
    assert set(GENERATION_FLAGS) == set(FLAG_BITS.values())
    assert set(LIGHTWEIGHT_FLAGS.split(",")) <= set(GENERATION_FLAGS)


@pytest.fixture
def sleeper():
    """Starts `sleep 30` with a chosen environment and working folder; killed after."""
    started: list[subprocess.Popen[bytes]] = []

    def start(environ: dict[str, str], cwd: Path) -> int:
        process = subprocess.Popen(["sleep", "30"], env=environ, cwd=cwd)
        started.append(process)
        # Popen returns once exec has begun; the kernel shows the new environment a moment
        # later (until then /proc/PID/environ reads empty).
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{process.pid}/environ").read_bytes():
            assert time.monotonic() < deadline, "sleep never showed its environment"
            time.sleep(0.01)
        return process.pid

    yield start
    for process in started:
        process.kill()
        process.wait(timeout=30)


def _path_only(**more: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **more}


def test_a_running_process_s_environment_and_folder_are_read(tmp_path, sleeper):
    # GIVEN a process started with a coredump environment that has one thing wrong
    environ = _path_only(**clean(tmp_path), **{WAITS: "1", "ODD": "a=b\tc"})
    pid = sleeper(environ, tmp_path)
    # WHEN its environment and working folder are read
    seen, cwd = environ_of_pid(pid), cwd_of_pid(pid)
    # THEN they are what it started with, and its check finds the problem
    assert seen == environ
    assert cwd.resolve() == tmp_path.resolve()
    (problem,) = check_environment(seen, cwd).problems
    assert problem.variables[0] == WAITS


def _missing_pid() -> int:
    # Past pid_max no process can ever have the number.
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_a_missing_process_is_one_line_of_error():
    pid = _missing_pid()
    with pytest.raises(UnreadableFile) as raised:
        environ_of_pid(pid)
    assert str(raised.value) == f"/proc/{pid}/environ: cannot read: no process {pid}"
    with pytest.raises(UnreadableFile, match=f"no process {pid}"):
        cwd_of_pid(pid)


def test_an_environment_past_the_bound_is_refused(tmp_path, sleeper, monkeypatch):
    pid = sleeper(_path_only(**clean(tmp_path)), tmp_path)
    monkeypatch.setattr(trigger, "MAX_ENVIRON_BYTES", 64)
    with pytest.raises(UnreadableFile, match="the environment is larger than 64 bytes"):
        environ_of_pid(pid)


def _isolated(**environ: str) -> dict[str, str | None]:
    """`environ` for an in-process run, every coredump variable of ours removed."""
    ours = {name: None for name in os.environ if name.startswith(("CUDA_", "SGLANG_"))}
    return {**ours, **environ}


def test_check_says_what_a_crash_and_a_hang_leave_and_exits_0(tmp_path):
    # GIVEN the removed variable exported: capture's flags make it harmless
    folder = tmp_path / "dumps"
    env = _isolated(**{LIGHTWEIGHT: "1"})
    result = invoke("capture", "--check", "--hang", "--dir", folder, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    crash, hang, contents = result.stdout.splitlines()
    assert crash.startswith(f"on a GPU exception: a dump is written as {folder}/core_%h.%p.%t.")
    trigger_line = "on a hang: `postmortem trigger --pid PID` dumps it through the pipe "
    assert hang.startswith(f"{trigger_line}{folder}/corepipe.%h.%p")
    assert contents.startswith("dump contents: lightweight: keeps registers")
    assert not folder.exists()  # checking makes nothing


def test_check_of_an_environment_that_loses_the_crash_exits_2(tmp_path):
    env = _isolated(**{WAITS: "1", FLAGS: "skip_global_mem"})
    result = invoke("capture", "--check", "--dir", tmp_path, env=env, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert lines[0] == "on a GPU exception: no dump is written (see the errors below)"
    assert lines[2].startswith("error: CUDA_DEVICE_WAITS_ON_EXCEPTION=1 turns GPU coredumps off")
    assert lines[2].endswith("(fix: unset CUDA_DEVICE_WAITS_ON_EXCEPTION)")
    assert lines[3].startswith("warning: CUDA_COREDUMP_GENERATION_FLAGS: 'skip_global_mem'")
    assert lines[3].endswith("(fix: did you mean skip_global_memory?)")


def test_check_of_a_running_process(tmp_path, sleeper):
    # GIVEN two processes: one started as capture would, one with the wait for a debugger
    sound = sleeper(_path_only(**clean_hang(tmp_path)), tmp_path)
    waiting = sleeper(_path_only(**clean(tmp_path), **{WAITS: "1"}), tmp_path)
    # WHEN each is checked
    ok = invoke("capture", "--check", "--pid", sound, env=_isolated())
    bad = invoke("capture", "--check", "--pid", waiting, env=_isolated())
    # THEN the sound one exits 0 with a dump on a crash and on a hang; the other 2 with why
    assert ok.returncode == 0, ok.stdout + ok.stderr
    first, crash, hang = ok.stdout.splitlines()[:3]
    assert first.startswith(f"process {sound}: the environment it started with")
    assert crash.startswith(f"on a GPU exception: a dump is written as {tmp_path}/core_%h.")
    assert hang.startswith("on a hang: `postmortem trigger --pid PID` dumps it")
    assert bad.returncode == 2
    assert "error: CUDA_DEVICE_WAITS_ON_EXCEPTION=1 turns GPU coredumps off" in bad.stdout


def test_check_of_a_missing_process_is_one_line(tmp_path):
    pid = _missing_pid()
    result = invoke("capture", "--check", "--pid", pid, env=_isolated())
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: /proc/{pid}/environ: cannot read: no process {pid}"
    ]


def test_pid_without_check_is_refused():
    result = invoke("capture", "--pid", "1", env=_isolated())
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: --pid: goes with --check"]


def test_print_env_puts_the_problems_above_the_exports_as_comments(tmp_path):
    env = _isolated(**{SHOW_PROGRESS: "0", FLAGS: "skip_global_memory,skip_local_mem"})
    result = invoke("capture", "--print-env", "--dir", tmp_path / "dumps", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# warning: CUDA_COREDUMP_GENERATION_FLAGS: 'skip_local_mem'")
    assert lines[0].endswith("(fix: did you mean skip_local_memory?)")
    assert lines[1].startswith("# warning: CUDA_COREDUMP_SHOW_PROGRESS is not 1")
    assert lines[2] == f"mkdir -p {tmp_path / 'dumps'}"
    assert all(line.startswith("export ") for line in lines[3:])


def test_capture_refuses_to_start_a_command_whose_crash_would_not_be_dumped(tmp_path):
    # GIVEN the wait for a debugger exported by the user
    folder, marker = tmp_path / "dumps", tmp_path / "ran"
    program = f"open({str(marker)!r}, 'w').close()"
    argv = ("capture", "--dir", folder, "--no-analyze", "--", sys.executable, "-c", program)
    # WHEN capture is asked to run a command
    result = invoke(*argv, env=_isolated(**{WAITS: "1"}))
    # THEN it says why in one line, exits 2, and neither runs it nor makes the folder
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "error: COMMAND: not started: CUDA_DEVICE_WAITS_ON_EXCEPTION=1 turns GPU coredumps off"
    )
    assert "(fix: unset CUDA_DEVICE_WAITS_ON_EXCEPTION)" in line
    assert not marker.exists() and not folder.exists()


def test_capture_checks_a_value_the_user_kept_over_the_plan(tmp_path):
    # GIVEN a dump name exported by the user into a folder that does not exist
    env = _isolated(**{DUMP_FILE: f"{tmp_path}/nowhere/core.%p"})
    result = invoke("capture", "--dir", tmp_path, "--no-analyze", "--", "true", env=env)
    # THEN the kept value is said, then the refusal
    assert result.returncode == 2
    keeping, refusal = result.stderr.splitlines()
    assert keeping.startswith("postmortem: keeping CUDA_COREDUMP_FILE=")
    assert refusal.startswith("error: COMMAND: not started: CUDA_COREDUMP_FILE: the folder ")
    assert f"{tmp_path}/nowhere does not exist" in refusal


def test_capture_says_warnings_and_runs_the_command(tmp_path):
    # GIVEN progress lines switched off by the user: a dump is still written
    argv = [sys.executable, "-m", "postmortem", "capture", "--dir", str(tmp_path)]
    argv += ["--no-analyze", "--", sys.executable, "-c", "print('ran')"]
    env = {**os.environ, SHOW_PROGRESS: "0"}
    env.pop(WAITS, None)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    # THEN the warning is said on standard error and the command runs
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ran\n"
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("postmortem: warning: CUDA_COREDUMP_SHOW_PROGRESS is not 1")
