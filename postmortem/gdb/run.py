"""Drive cuda-gdb on a GPU coredump, through `postmortem.toolrun`.

Batch mode with one ``-ex`` per command, not an interactive session under pexpect: a
coredump is read once and the command set is fixed, so nothing is gained by answering
prompts, while batch mode needs no prompt parsing, keeps running after a failing command
(each ``-ex`` runs on its own; a ``-x`` script would stop), and lets one timeout kill the
whole process group. Our ``echo`` markers between commands split the output per command.

stderr is merged into stdout (``2>&1``) rather than read from a pipe of its own: gdb flushes
its stdout before it prints an error, so with one pipe each error message lands between
the markers of the command that caused it, which two pipes cannot tell.

cuobjdump's folder is put first on cuda-gdb's ``PATH``: ``x/i`` shells out to it.

Known failures are recognised by their text (`faults.KNOWN_FAULTS`). One of them is worked
around here: the Debian 11.8 build's Python unwinder fault ("A Unwinder should return
gdb.UnwindInfo instance.") makes ``bt`` fail; cuda-gdb is run once more with an empty
private ``-data-directory``, which avoids it (docs/toolchain.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.config import cache_folder
from postmortem.errors import ToolFailed, ToolNotFound, UnreadableFile
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.gdb.command import (
    DEFAULT_COMMANDS,
    OPEN_COMMAND,
    CommandOutput,
    build_cuda_gdb_argv,
    build_interactive_argv,
    split_output,
    strip_markers,
)
from postmortem.gdb.faults import diagnose
from postmortem.toolrun import ToolRun, run_interactive, run_tool
from postmortem.tools import find_tool, tool_version

_RETRY_CODE = FindingCode.GDB_PYTHON_UNWINDER_FAULT


@dataclass(frozen=True, slots=True)
class GdbSession:
    """The outcome of one cuda-gdb run on a coredump (the retry's, when there was one)."""

    version: str | None
    """cuda-gdb's version (``11.8``), None when it would not say."""
    argv: tuple[str, ...]
    """The argv of the run whose outputs are kept."""
    banner: str
    """What ``target cudacore`` printed: the exception banner and the focus line."""
    outputs: tuple[CommandOutput, ...]
    """Each command's output in order (the opening ``target cudacore`` step excluded)."""
    outside: str
    """Output outside our markers (start-up warnings)."""
    diagnoses: tuple[Finding, ...]
    """Known failures seen, in the first run and in the retry."""
    returncode: int
    """cuda-gdb's exit status (batch mode: that of the last command)."""
    seconds: float
    """Time of both runs together."""
    retried: bool
    """True when cuda-gdb ran with an empty data directory: again after its Python unwinder
    failed, or at once because this cuda-gdb's did before (`_DataDirectoryMemo`)."""
    peak_rss_kib: int | None = None
    """cuda-gdb's peak resident memory over its runs, in KiB (None: not measured)."""

    def output(self, command: str) -> str | None:
        """Returns the output of the first run of `command`, or None if it did not run."""
        return next((o.text for o in self.outputs if o.command == command), None)


def run_cuda_gdb(
    core_path: str | os.PathLike[str],
    commands: Sequence[str] = DEFAULT_COMMANDS,
    *,
    cuda_gdb: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
    cancel: threading.Event | None = None,
) -> GdbSession:
    """Opens a GPU coredump in cuda-gdb and runs `commands` on it.

    Args:
        core_path: The ``.nvcudmp`` file; it is only read.
        commands: gdb commands; each runs even if one before it fails.
        cuda_gdb: The cuda-gdb to use; found with `find_tool` when None.
        timeout: Seconds each cuda-gdb run may take.
        cancel: Set from another thread to kill cuda-gdb early (`ToolFailed`).

    Returns:
        The per-command outputs, the banner and the diagnoses.

    Raises:
        UnreadableFile: `core_path` is not a readable file.
        ToolNotFound: cuda-gdb is not installed where postmortem looks.
        ToolFailed: cuda-gdb timed out, or died before running any command.
    """
    core = Path(core_path).absolute()  # cuda-gdb runs in a scratch directory, not ours
    if not core.is_file() or not os.access(core, os.R_OK):
        raise UnreadableFile(core, "not a readable file")
    exe = find_tool("cuda-gdb", cuda_gdb)
    env = _environment()
    memo = _DataDirectoryMemo(exe)
    known = memo.known_fault()
    runs: list[ToolRun] = []
    diagnoses: tuple[Finding, ...] = ()
    if known is None:
        runs.append(_run(exe, core, commands, env, timeout, data_directory=None, cancel=cancel))
        diagnoses = diagnose(strip_markers(runs[0].stdout))
        known = next((d for d in diagnoses if d.code is _RETRY_CODE), None)
        if known is not None:
            memo.remember(known)
    else:
        diagnoses = (known,)  # said as if the first run had shown it: reports stay the same
    if known is not None:
        with tempfile.TemporaryDirectory(prefix="postmortem-gdb-data-") as empty:
            runs.append(
                _run(exe, core, commands, env, timeout, data_directory=empty, cancel=cancel)
            )
        diagnoses += tuple(
            d for d in diagnose(strip_markers(runs[-1].stdout)) if d not in diagnoses
        )
    peaks = [r.peak_rss_kib for r in runs if r.peak_rss_kib is not None]
    seconds = sum(r.seconds for r in runs)
    return _session(exe, runs[-1], diagnoses, seconds, known is not None, max(peaks, default=None))


def _run(
    exe: Path,
    core: Path,
    commands: Sequence[str],
    env: dict[str, str],
    timeout: float,
    *,
    data_directory: str | None,
    cancel: threading.Event | None = None,
) -> ToolRun:
    argv = build_cuda_gdb_argv(exe, core, commands, data_directory=data_directory)
    return run_tool(argv, timeout=timeout, env=env, merge_stderr=True, cancel=cancel)


def _session(
    exe: Path, run: ToolRun, diagnoses: tuple[Finding, ...], seconds: float, retried: bool,
    peak_rss_kib: int | None,
) -> GdbSession:  # fmt: skip
    split = split_output(run.stdout)
    if not split.outputs:
        last = run.stdout.strip().splitlines()[-1:] or ["no output"]
        raise ToolFailed("cuda-gdb", run.argv, run.returncode, last[0])
    opening = split.outputs[0] if split.outputs[0].command == OPEN_COMMAND else None
    return GdbSession(
        version=tool_version(exe),
        argv=run.argv,
        banner=opening.text if opening else "",
        outputs=tuple(o for o in split.outputs if o is not opening),
        outside=split.outside,
        diagnoses=diagnoses,
        returncode=run.returncode,
        seconds=seconds,
        retried=retried,
        peak_rss_kib=peak_rss_kib,
    )


class _DataDirectoryMemo:
    """Which cuda-gdb builds need an empty `-data-directory`, remembered across runs.

    The Debian 11.8 build fails in its Python unwinder on every dump; once seen, later runs of
    the same binary (path, size, mtime) start with the empty data directory at once instead
    of running twice. Kept in the user's cache folder; a memo that cannot be read or written
    only costs the second run.
    """

    def __init__(self, exe: Path) -> None:
        self._path = cache_folder() / "cuda-gdb-data-directory.json"
        try:
            info = exe.stat()
            self._key: str | None = f"{exe.resolve()}|{info.st_size}|{info.st_mtime_ns}"
        except OSError:
            self._key = None

    def known_fault(self) -> Finding | None:
        """The unwinder fault this cuda-gdb showed before, or None."""
        if self._key is None:
            return None
        try:
            entry = json.loads(self._path.read_text(encoding="utf-8")).get(self._key)
            evidence = tuple(str(line) for line in entry["evidence"])
            return Finding(
                _RETRY_CODE, Severity(entry["severity"]), str(entry["message"]), evidence
            )
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None

    def remember(self, fault: Finding) -> None:
        if self._key is None:
            return
        try:
            known = json.loads(self._path.read_text(encoding="utf-8"))
            known = known if isinstance(known, dict) else {}
        except (OSError, ValueError):
            known = {}
        known[self._key] = {
            "severity": fault.severity.value, "message": fault.message,
            "evidence": list(fault.evidence),
        }  # fmt: skip
        with contextlib.suppress(OSError):
            self._path.parent.mkdir(parents=True, exist_ok=True)
            partial = self._path.with_suffix(f".{os.getpid()}.part")
            partial.write_text(json.dumps(known, sort_keys=True), encoding="utf-8")
            partial.replace(self._path)


def debug_interactively(
    core_path: str | os.PathLike[str],
    extra: Sequence[str] = (),
    *,
    cuda_gdb: str | os.PathLike[str] | None = None,
) -> int:
    """Open the dump in cuda-gdb for the user, on this terminal; returns its exit status.

    Started as the batch runs are: safe flags, cuobjdump on PATH, and the empty data
    directory when this cuda-gdb's Python unwinder is known to fail.

    Raises:
        UnreadableFile: `core_path` is not a readable file.
        ToolNotFound: cuda-gdb is not installed where postmortem looks.
    """
    core = Path(core_path).absolute()
    if not core.is_file() or not os.access(core, os.R_OK):
        raise UnreadableFile(core, "not a readable file")
    exe = find_tool("cuda-gdb", cuda_gdb)
    needs_empty = _DataDirectoryMemo(exe).known_fault() is not None
    with tempfile.TemporaryDirectory(prefix="postmortem-gdb-data-") as empty:
        data_directory = empty if needs_empty else None
        argv = build_interactive_argv(exe, core, extra, data_directory=data_directory)
        print(f"postmortem: {shlex.join(argv)}", file=sys.stderr)
        return run_interactive(argv, env=_environment())


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    try:
        cuobjdump = find_tool("cuobjdump")
    except ToolNotFound:
        return env
    env["PATH"] = os.pathsep.join(p for p in (str(cuobjdump.parent), env.get("PATH")) if p)
    return env
