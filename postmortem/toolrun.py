"""Run an external tool: the only module of postmortem that calls `subprocess`.

Every external program (nvdisasm, cuobjdump, cuda-gdb) is started here, from an argv list
and never through a shell, with stdin closed, in a session of its own so that a timeout
kills the tool *and* everything it started (cuda-gdb starts cuobjdump, for one). Its output
is read with a cap: a tool that prints without end (a hostile cubin, a tool bug) is killed
when one of its streams passes the cap, so memory stays bounded.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.errors import ToolFailed, ToolNotFound

MAX_OUTPUT_BYTES = 256 << 20
"""The default cap on each of a tool's output streams."""
_CHUNK = 1 << 16


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
    peak_rss_kib: int | None = None
    """The tool's peak resident memory in KiB (its VmHWM, sampled while it ran); None when
    the system would not say, or the tool ended before a sample."""


def run_tool(
    argv: Sequence[str | os.PathLike[str]],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    merge_stderr: bool = False,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
    cancel: threading.Event | None = None,
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
        max_output_bytes: The most bytes read from stdout, and from stderr; a tool that
            prints more is killed (with its process group).
        cancel: Set from another thread to kill the tool (and its group) early; a tool
            started in its own session does not see the user's Ctrl-C.

    Returns:
        The tool's output, exit status and run time.

    Raises:
        ToolNotFound: The program could not be started (missing, not executable).
        ToolFailed: It did not finish within `timeout`, or was cancelled (returncode None), or
            printed more than `max_output_bytes` on one stream (returncode: the killing
            signal, negated).
    """
    args = tuple(os.fspath(a) for a in argv)
    tool = Path(args[0]).name if args else "?"
    started = time.monotonic()
    limits = _Limits(timeout, max_output_bytes, cancel)
    with tempfile.TemporaryDirectory(prefix="postmortem-tool-") as scratch:
        return _run(args, tool, limits, env, cwd or scratch, merge_stderr, started)


def run_interactive(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> int:
    """Runs a tool on the user's terminal (its stdin, stdout and stderr), with no time limit,
    and returns its exit status. Ctrl-C goes to the tool, as in a shell.

    Raises:
        ToolNotFound: The program could not be started.
    """
    try:
        process = subprocess.Popen(list(argv), env=None if env is None else dict(env))
    except OSError as exc:
        tool = Path(argv[0]).name if argv else "?"
        detail = f"it cannot be started ({exc.strerror or exc}); check the path"
        raise ToolNotFound(tool, (argv[0] if argv else "",), detail) from exc
    with process:
        while process.returncode is None:
            with contextlib.suppress(KeyboardInterrupt):  # the tool got it too, and decides
                process.wait()
        return process.returncode


@dataclass(frozen=True, slots=True)
class _Limits:
    timeout: float
    max_output_bytes: int
    cancel: threading.Event | None = None


def _no_core_files(pid: int) -> None:
    # A tool that crashes must not leave a core file beside the user's dump: cuda-gdb 11.8
    # hits an internal error on ABI v8 cubins and aborts (fixtures/dumps/oob_store_v8). Set
    # on the started tool, not in a preexec_fn, which is unsafe while other threads run (the
    # cuda-gdb cross-check runs beside nvdisasm).
    with contextlib.suppress(OSError):
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))


def _run(
    args: tuple[str, ...],
    tool: str,
    limits: _Limits,
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
        )
        _no_core_files(proc.pid)
    except OSError as exc:
        raise ToolNotFound(
            tool,
            (args[0] if args else "",),
            f"it cannot be started ({exc.strerror or exc}); check the path",
        ) from exc
    try:
        peak = _Peak(proc.pid)
        out, err = _collect(proc, started + limits.timeout, limits, peak)
        proc.wait(timeout=max(0.0, started + limits.timeout - time.monotonic()))
        _close_pipes(proc)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        detail = f"no result within {limits.timeout:g} s; killed"
        raise ToolFailed(tool, args, None, detail) from None
    except _Cancelled:
        _kill_group(proc)
        raise ToolFailed(tool, args, None, "cancelled; killed") from None
    except _TooMuchOutput as excess:
        _kill_group(proc)
        detail = f"{excess.stream} output exceeds {limits.max_output_bytes} bytes; killed"
        raise ToolFailed(tool, args, proc.returncode, detail) from None
    return ToolRun(
        argv=args,
        stdout=_decode(bytes(out)),
        stderr=_decode(bytes(err)),
        returncode=proc.returncode,
        seconds=time.monotonic() - started,
        peak_rss_kib=peak.kib,
    )


_SAMPLE_S = 0.02  # how often a running tool's peak memory is read


class _Peak:
    """The tool's peak resident memory, from its VmHWM in /proc, sampled while it runs.

    Not wait4's ru_maxrss: Linux counts there the memory of the process that started the
    tool, up to its exec (200 MB for `true` started from a 200 MB Python).
    """

    def __init__(self, pid: int) -> None:
        self._status = f"/proc/{pid}/status"
        self.kib: int | None = None

    def sample(self) -> None:
        try:
            with open(self._status, "rb") as status:
                for line in status:
                    if line.startswith(b"VmHWM:"):
                        kib = int(line.split()[1])
                        self.kib = kib if self.kib is None else max(self.kib, kib)
                        return
        except (OSError, ValueError, IndexError):
            pass  # the tool has ended, or this is not Linux


class _Cancelled(Exception):
    pass


class _TooMuchOutput(Exception):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.stream = stream


def _collect(
    proc: subprocess.Popen[bytes], deadline: float, limits: _Limits, peak: _Peak
) -> tuple[bytearray, bytearray]:
    """Read stdout and stderr until both close, each up to the cap, until `deadline`.

    Raises:
        subprocess.TimeoutExpired: The deadline passed first.
        _Cancelled: The caller cancelled the run.
        _TooMuchOutput: A stream passed the cap.
    """
    cap = limits.max_output_bytes
    out, err = bytearray(), bytearray()
    buffers = {"stdout": out, "stderr": err}
    with selectors.DefaultSelector() as selector:
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            if pipe is not None:
                selector.register(pipe, selectors.EVENT_READ, name)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, 0)
            if limits.cancel is not None and limits.cancel.is_set():
                raise _Cancelled
            peak.sample()
            for key, _ in selector.select(min(left, _SAMPLE_S)):
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer = buffers[key.data]
                buffer += chunk
                if len(buffer) > cap:
                    raise _TooMuchOutput(key.data)
    return out, err


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # The tool leads its own session (start_new_session), so its pid is the group id.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    # Whatever is left in the pipes is not read: it may be endless.
    _close_pipes(proc)
    proc.wait()


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _decode(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="replace")
