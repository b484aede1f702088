"""Build the cuda-gdb command line, and split its output back into per-command text.

Pure functions, no I/O. cuda-gdb runs in batch mode with every command as its own ``-ex``
(in batch mode a failing command of a ``-x`` script aborts the rest; separate ``-ex``
commands each run), bracketed by ``echo`` markers of ours so that the output of each
command can be cut out again, error messages included (the runner merges stderr into
stdout, see `run.py`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_COMMANDS: tuple[str, ...] = (
    "info cuda devices",
    "info cuda contexts",
    "info cuda kernels",
    "info cuda blocks",
    "info cuda warps",
    "info cuda lanes",
    "p/x $errorpc",
    "info symbol $errorpc",
    "info line *$errorpc",
    "bt",
    "x/16i $errorpc-96",
)
"""What postmortem asks by default: the tables, the error PC and its symbol and line, the
frames, and a window of SASS around the error PC (16 instructions of 16 bytes)."""

OPEN_COMMAND = "target cudacore"
"""The pseudo-command name under which the banner of ``target cudacore`` is kept."""

# A coredump directory is untrusted input: never read a .gdbinit (-nx) or auto-load
# scripts from it; never page, wrap or ask.
_EARLY_SETTINGS: tuple[str, ...] = (
    "set auto-load off",
    "set pagination off",
    "set confirm off",
    "set width 0",
    "set height 0",
)

_BEGIN = "@@pm:begin"
_END = "@@pm:end"
_MARKER = re.compile(r"@@pm:(?P<kind>begin|end) (?P<index>\d+) (?P<command>[^\n]*?)@@\n?")


def build_cuda_gdb_argv(
    cuda_gdb: str | os.PathLike[str],
    core_path: str | os.PathLike[str],
    commands: Sequence[str] = DEFAULT_COMMANDS,
    *,
    data_directory: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Builds the argv that opens a GPU coredump and runs `commands` on it.

    Args:
        cuda_gdb: The cuda-gdb executable.
        core_path: The ``.nvcudmp`` file.
        commands: gdb commands, each run as its own ``-ex`` between markers.
        data_directory: A ``-data-directory`` for cuda-gdb (an empty one works around the
            Debian 11.8 build's Python unwinder fault).

    Returns:
        The argv list (no shell quoting needed or applied).
    """
    argv = [os.fspath(cuda_gdb), "-batch", "-nx"]
    if data_directory is not None:
        argv += ["-data-directory", os.fspath(data_directory)]
    for setting in _EARLY_SETTINGS:
        argv += ["-iex", setting]
    steps = [f"{OPEN_COMMAND} {os.fspath(core_path)}", *commands]
    for index, command in enumerate(steps):
        label = OPEN_COMMAND if index == 0 else command
        argv += ["-ex", _echo(_BEGIN, index, label), "-ex", command]
        argv += ["-ex", _echo(_END, index, label)]
    return argv


def build_interactive_argv(
    cuda_gdb: str | os.PathLike[str],
    core_path: str | os.PathLike[str],
    extra: Sequence[str] = (),
    *,
    data_directory: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Builds the argv that opens a GPU coredump in an interactive cuda-gdb session.

    The same safe start as the batch runs (no ~/.gdbinit, no auto-loaded scripts from the
    dump's paths), then ``target cudacore``; `extra` arguments go last, as the user gave them.
    """
    argv = [os.fspath(cuda_gdb), "-nx"]
    if data_directory is not None:
        # Without its Python files cuda-gdb prints a "Python Exception … No module named
        # 'gdb'" at every stop and frame; one warning at start-up says it all.
        argv += ["-data-directory", os.fspath(data_directory), "-iex", QUIET_PYTHON]
    for setting in _EARLY_SETTINGS:
        argv += ["-iex", setting]
    return [*argv, "-ex", f"{OPEN_COMMAND} {os.fspath(core_path)}", *extra]


QUIET_PYTHON = "set python print-stack none"


def _echo(kind: str, index: int, command: str) -> str:
    # gdb's echo reads C escapes: double the backslashes, keep the marker on one line.
    text = command.replace("\\", "\\\\").replace("\n", " ")
    return f"echo {kind} {index} {text}@@\\n"


@dataclass(frozen=True, slots=True)
class CommandOutput:
    """What cuda-gdb printed for one command, stderr included."""

    command: str
    """The command as given (``target cudacore`` for the opening step)."""
    text: str
    """Its output between our markers."""
    complete: bool
    """False when the end marker never came (cuda-gdb died or was killed mid-command)."""


@dataclass(frozen=True, slots=True)
class SplitOutput:
    """cuda-gdb's output cut at our markers."""

    outputs: tuple[CommandOutput, ...]
    """One entry per command that started, in order."""
    outside: str
    """Text printed outside any marker pair (start-up warnings, for instance)."""


def split_output(text: str) -> SplitOutput:
    """Cuts cuda-gdb's merged output into the text of each command.

    A marker is found anywhere in a line: output that does not end with a newline runs into
    the marker echoed after it (seen with cuda-gdb 11.8's ABI warning).

    Args:
        text: Everything cuda-gdb printed (stdout with stderr merged in).

    Returns:
        The per-command texts and whatever fell outside the markers.
    """
    outputs: list[CommandOutput] = []
    outside: list[str] = []
    current: tuple[str, list[str]] | None = None
    position = 0
    for match in _MARKER.finditer(text):
        chunk = text[position : match.start()]
        (current[1] if current is not None else outside).append(chunk)
        position = match.end()
        if current is not None:
            complete = match.group("kind") == "end"
            outputs.append(CommandOutput(current[0], _joined(current[1]), complete))
            current = None
        if match.group("kind") == "begin":
            current = (match.group("command"), [])
    (current[1] if current is not None else outside).append(text[position:])
    if current is not None:
        outputs.append(CommandOutput(current[0], _joined(current[1]), False))
    return SplitOutput(tuple(outputs), _joined(outside).strip("\n"))


def _joined(chunks: list[str]) -> str:
    text = "".join(chunks)
    return text[:-1] if text.endswith("\n") else text


def strip_markers(text: str) -> str:
    """Returns cuda-gdb's output with our markers taken out (each leaves a line break)."""
    return _MARKER.sub("\n", text)
