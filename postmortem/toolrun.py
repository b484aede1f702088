"""Run an external tool: the only module of postmortem that calls `subprocess`.

Every external program (nvdisasm, cuobjdump, cuda-gdb) is started here, from an argv list
and never through a shell, with stdin closed, in a session of its own so that a timeout
kills the tool *and* everything it started (cuda-gdb starts cuobjdump, for one).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.errors import ToolFailed, ToolNotFound


@dataclass(frozen=True, slots=True)
class ToolRun:
    """What one run of an external tool produced."""

    argv: tuple[str, ...]
    """The exact argv the tool was started with."""
    stdout: str
    """Its standard output, decoded as UTF-8 (undecodable bytes replaced)."""
    stderr: str
    """Its standard error; empty when it was merged into `stdout`."""
    returncode: int
    """Its exit status (negative: killed by that signal)."""
    seconds: float
    """Wall-clock time of the run."""


def run_tool(
    argv: Sequence[str | os.PathLike[str]],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    merge_stderr: bool = False,
) -> ToolRun:
    """Runs one external tool to completion and returns what it printed.

    A non-zero exit status is not an error here: callers judge the output.

    Args:
        argv: The program and its arguments; never passed to a shell.
        timeout: Seconds to wait before the tool's whole process group is killed.
        env: The environment of the tool; the current one when None.
        cwd: The working directory of the tool; a private scratch directory when None,
            so whatever a tool writes (a core file of its own) never lands elsewhere.
        merge_stderr: Send stderr into the same pipe as stdout (2>&1), so that error
            messages stay in order with the output around them.

    Returns:
        The tool's output, exit status and run time.

    Raises:
        ToolNotFound: The program could not be started (missing, not executable).
        ToolFailed: It did not finish within `timeout` (returncode None).
    """
    args = tuple(os.fspath(a) for a in argv)
    tool = Path(args[0]).name if args else "?"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="postmortem-tool-") as scratch:
        return _run(args, tool, timeout, env, cwd or scratch, merge_stderr, started)


def _no_core_files() -> None:
    # A tool that crashes must not leave a core file beside the user's dump: cuda-gdb 11.8
    # hits an internal error on ABI v8 cubins and aborts (fixtures/dumps/oob_store_v8).
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run(
    args: tuple[str, ...],
    tool: str,
    timeout: float,
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str],
    merge_stderr: bool,
    started: float,
) -> ToolRun:
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_no_core_files,
        )
    except OSError as exc:
        raise ToolNotFound(
            tool,
            (args[0] if args else "",),
            f"it cannot be started ({exc.strerror or exc}); check the path",
        ) from exc
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise ToolFailed(tool, args, None, f"no result within {timeout:g} s; killed") from None
    return ToolRun(
        argv=args,
        stdout=_decode(out),
        stderr=_decode(err),
        returncode=proc.returncode,
        seconds=time.monotonic() - started,
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # The tool leads its own session (start_new_session), so its pid is the group id.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _decode(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="replace")
