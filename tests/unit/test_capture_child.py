"""The captured command's output: passed on, logged line by line, and not waited for forever
when a process it left behind keeps its pipes open."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time


def capture(folder, *command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "postmortem", "capture", "--dir", str(folder), "--no-analyze"]
    return subprocess.run([*argv, "--", *command], capture_output=True, text=True, timeout=timeout)


def test_both_streams_are_passed_on_and_logged_whole_lines_at_a_time(tmp_path):
    # GIVEN a program that writes parts of lines to both streams, and a last line unfinished
    program = (
        "import sys\n"
        "for i in range(200):\n"
        "    sys.stdout.write(f'out {i} '); sys.stdout.flush()\n"
        "    sys.stderr.write(f'err {i}\\n'); sys.stderr.flush()\n"
        "    sys.stdout.write('end\\n'); sys.stdout.flush()\n"
        "sys.stdout.write('no newline')\n"
    )
    result = capture(tmp_path, sys.executable, "-c", program)
    # THEN each stream arrives whole where it belongs, and the log never splits a line
    assert result.returncode == 0, result.stderr
    assert result.stdout == "".join(f"out {i} end\n" for i in range(200)) + "no newline"
    assert result.stderr.startswith("".join(f"err {i}\n" for i in range(200)))
    (log,) = tmp_path.glob("host.*.log")
    lines = log.read_text().splitlines()
    assert sorted(lines) == sorted(
        [f"out {i} end" for i in range(200)] + [f"err {i}" for i in range(200)] + ["no newline"]
    )


def test_a_process_left_behind_with_the_pipes_does_not_hold_capture(tmp_path):
    # GIVEN a program that starts a long sleeper holding its output pipes, then exits
    pid_file = tmp_path / "sleeper"
    program = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\n"
    )
    started = time.monotonic()
    try:
        result = capture(tmp_path / "dumps", sys.executable, "-c", program)
        # THEN capture ends a few seconds after the program, with its output
        assert time.monotonic() - started < 30
        assert result.returncode == 0 and result.stdout == "started\n"
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_last_line_without_newline_is_not_glued_to_the_other_stream_s(tmp_path):
    # GIVEN a program that ends its output unfinished, then writes on its error stream
    program = (
        "import os, sys, time\n"
        "sys.stdout.write('no newline'); sys.stdout.flush(); os.close(1)\n"
        "time.sleep(0.5)\n"
        "sys.stderr.write('err\\n'); sys.stderr.flush()\n"
    )
    result = capture(tmp_path, sys.executable, "-c", program)
    # THEN the output is passed on as written, and the log holds the two lines apart
    assert result.returncode == 0, result.stderr
    assert result.stdout == "no newline"
    (log,) = tmp_path.glob("host.*.log")
    assert log.read_text() == "no newline\nerr\n"


def test_a_closed_standard_output_ends_the_command_as_a_shell_pipeline_would(tmp_path):
    # GIVEN `capture -- yes | head -1`: a command that writes forever, read by one that stops
    line = f"{sys.executable} -m postmortem capture --dir {tmp_path} --no-analyze -- yes | head -1"
    # WHEN it runs (a hang here would be capture passing on forever to nobody)
    result = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=60)
    # THEN it ends, with head's one line, and the log holds what was read
    assert result.stdout == "y\n"
    (log,) = tmp_path.glob("host.*.log")
    assert log.read_text().startswith("y\n")


def test_the_host_log_is_written_in_whole_lines_and_rotated_past_its_bound(tmp_path):
    from postmortem.capture.child import run_child

    # GIVEN a program that prints 200,000 numbered lines (about 1.3 MB), and a 256 KiB bound
    program = "import sys\nsys.stdout.writelines(f'line {i}\\n' for i in range(200_000))\n"
    with open(os.devnull, "wb") as sink:
        child = run_child(
            [sys.executable, "-c", program], dict(os.environ), tmp_path,
            stdout=sink, stderr=sink, max_log_bytes=256 << 10,
        )  # fmt: skip
    # THEN the log was rotated, the newest output is in the log and the one before in .1,
    # each under the bound, every line whole
    assert child.returncode == 0 and child.rotations >= 4
    newest = child.log.read_bytes()
    before = child.log.with_name(child.log.name + ".1").read_bytes()
    assert len(newest) <= 256 << 10 and len(before) <= 256 << 10
    assert newest.endswith(b"line 199999\n")
    lines = (before + newest).decode().splitlines()
    numbers = [int(text.removeprefix("line ")) for text in lines]
    assert numbers == list(range(numbers[0], 200_000))
