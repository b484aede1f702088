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

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.errors import ToolFailed, ToolNotFound, UnreadableFile
from postmortem.findings import Finding, FindingCode
from postmortem.gdb.command import (
    DEFAULT_COMMANDS,
    OPEN_COMMAND,
    CommandOutput,
    build_cuda_gdb_argv,
    split_output,
    strip_markers,
)
from postmortem.gdb.faults import diagnose
from postmortem.toolrun import ToolRun, run_tool
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
    """True when cuda-gdb was run again with an empty data directory."""

    def output(self, command: str) -> str | None:
        """Returns the output of the first run of `command`, or None if it did not run."""
        return next((o.text for o in self.outputs if o.command == command), None)


def run_cuda_gdb(
    core_path: str | os.PathLike[str],
    commands: Sequence[str] = DEFAULT_COMMANDS,
    *,
    cuda_gdb: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
) -> GdbSession:
    """Opens a GPU coredump in cuda-gdb and runs `commands` on it.

    Args:
        core_path: The ``.nvcudmp`` file; it is only read.
        commands: gdb commands; each runs even if one before it fails.
        cuda_gdb: The cuda-gdb to use; found with `find_tool` when None.
        timeout: Seconds each cuda-gdb run may take.

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
    run = _run(exe, core, commands, env, timeout, data_directory=None)
    diagnoses = diagnose(strip_markers(run.stdout))
    seconds = run.seconds
    retried = any(d.code is _RETRY_CODE for d in diagnoses)
    if retried:
        with tempfile.TemporaryDirectory(prefix="postmortem-gdb-data-") as empty:
            run = _run(exe, core, commands, env, timeout, data_directory=empty)
        seconds += run.seconds
        diagnoses += tuple(d for d in diagnose(strip_markers(run.stdout)) if d not in diagnoses)
    return _session(exe, run, diagnoses, seconds, retried)


def _run(
    exe: Path,
    core: Path,
    commands: Sequence[str],
    env: dict[str, str],
    timeout: float,
    *,
    data_directory: str | None,
) -> ToolRun:
    argv = build_cuda_gdb_argv(exe, core, commands, data_directory=data_directory)
    return run_tool(argv, timeout=timeout, env=env, merge_stderr=True)


def _session(
    exe: Path, run: ToolRun, diagnoses: tuple[Finding, ...], seconds: float, retried: bool
) -> GdbSession:
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
    )


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    try:
        cuobjdump = find_tool("cuobjdump")
    except ToolNotFound:
        return env
    env["PATH"] = os.pathsep.join(p for p in (str(cuobjdump.parent), env.get("PATH")) if p)
    return env
