"""run_tool reads a tool's output with a cap: real programs that print a lot, no mocking."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from postmortem.errors import ToolFailed
from postmortem.toolrun import run_tool

CAP = 64 * 1024


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_output_up_to_the_cap_is_read_whole():
    run = run_tool(_python(f"import sys; sys.stdout.write('x' * {CAP})"), timeout=30,
                   max_output_bytes=CAP)  # fmt: skip
    assert run.returncode == 0
    assert run.stdout == "x" * CAP


def test_stdout_past_the_cap_stops_the_tool():
    with pytest.raises(ToolFailed) as failed:
        run_tool(_python(f"import sys; sys.stdout.write('x' * {4 * CAP})"), timeout=30,
                 max_output_bytes=CAP)  # fmt: skip
    assert f"output exceeds {CAP} bytes" in str(failed.value)
    assert failed.value.returncode is not None and failed.value.returncode < 0


def test_stderr_past_the_cap_stops_the_tool():
    with pytest.raises(ToolFailed) as failed:
        run_tool(_python(f"import sys; sys.stderr.write('e' * {4 * CAP})"), timeout=30,
                 max_output_bytes=CAP)  # fmt: skip
    assert f"stderr output exceeds {CAP} bytes" in failed.value.detail


def test_an_endless_tool_is_killed_by_the_cap_long_before_its_timeout():
    yes = shutil.which("yes")
    if yes is None:
        pytest.skip("no `yes` on this machine")
    started = time.monotonic()
    with pytest.raises(ToolFailed) as failed:
        run_tool([yes], timeout=300, max_output_bytes=CAP)
    assert "output exceeds" in failed.value.detail
    print(f"`yes` stopped after {time.monotonic() - started:.3f} s")


def test_the_cap_kills_the_tools_whole_process_group(tmp_path: Path):
    # GIVEN a tool that starts a child, then prints without end
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh on this machine")
    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; exec {sys.executable} -c 'while 1: print(1)'"
    # WHEN its output passes the cap
    with pytest.raises(ToolFailed):
        run_tool([sh, "-c", script], timeout=60, max_output_bytes=CAP)
    # THEN the child it started is gone too
    child = int(pid_file.read_text())
    assert _gone(child), f"child {child} still running"


def _gone(pid: int, wait: float = 5.0) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":  # killed, waiting for init to reap it
            return True
        time.sleep(0.05)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_timeout_still_kills_a_quiet_tool():
    with pytest.raises(ToolFailed) as failed:
        run_tool(_python("import time; time.sleep(30)"), timeout=0.5)
    assert failed.value.returncode is None
    assert "no result within 0.5 s" in failed.value.detail


def test_a_tool_s_peak_memory_is_its_own():
    # GIVEN this process holding 100 MB, a tool holding 60 MB for a moment, and one holding little
    held = bytearray(100_000_000)
    hold = "import time; x = bytearray(60_000_000); time.sleep(0.3)"
    big = run_tool([sys.executable, "-c", hold], timeout=30)
    small = run_tool([sys.executable, "-c", "import time; time.sleep(0.1)"], timeout=30)
    # THEN each run reports its own peak (KiB): not ours, not the largest tool's so far
    assert big.peak_rss_kib is not None and small.peak_rss_kib is not None
    assert big.peak_rss_kib > 60_000 > small.peak_rss_kib
    assert len(held) == 100_000_000


def test_an_exit_status_and_a_signal_still_come_back():
    assert run_tool(["sh", "-c", "exit 7"], timeout=30).returncode == 7
    assert run_tool(["sh", "-c", "kill -TERM $$"], timeout=30).returncode == -15


def test_a_cancelled_tool_is_killed_with_its_group_at_once(tmp_path):
    # GIVEN a tool that would run for a minute, its child beside it
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "slow"
    script.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {pidfile}\nwait\n")
    script.chmod(0o755)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    # WHEN another thread cancels it
    started = time.monotonic()
    with pytest.raises(ToolFailed, match="cancelled") as raised:
        run_tool([script], timeout=60, cancel=cancel)
    # THEN it ends within a moment, not at its timeout, and nothing of it is left running
    assert time.monotonic() - started < 10 and raised.value.returncode is None
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child)


def _running(pid: int) -> bool:
    # A killed child not yet reaped by its new parent is a zombie ("Z"): not running.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (OSError, IndexError):
        return False
    return state != "Z"
