"""Finding and quoting the source lines of an inline chain on the triage machine.

The paths in a cubin's line table are the build machine's. They are tried as they are,
rewritten by `--map-path OLD=NEW` prefixes, then looked up under every `--source-dir`
(as the full relative path, then by dropping leading directories one at a time).
"""

from __future__ import annotations

import ast
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from postmortem.cubin.sass import SourceFrame
from postmortem.errors import UnreadableFile
from postmortem.safefile import read_regular

_MAX_LINE_CHARS = 400


@dataclass(frozen=True, slots=True)
class PathMap:
    """A build-machine path prefix and what it is called here."""

    old: str
    new: str

    @classmethod
    def parse(cls, text: str) -> PathMap:
        """`OLD=NEW` → PathMap; raises ValueError on anything else."""
        old, sep, new = text.partition("=")
        if not sep or not old:
            raise ValueError(f"expected OLD=NEW, got {text!r}")
        return cls(old, new)


@dataclass(frozen=True, slots=True)
class QuotedLine:
    """One frame of a chain and the source line it names, when found."""

    frame: SourceFrame
    path: Path | None
    """The file found on this machine, or None."""
    text: str | None
    """The line itself (without its newline), or None."""
    reason: str | None
    """Why there is no text (file not found, line past its end)."""


def candidates(file: str, source_dirs: Sequence[Path], path_maps: Sequence[PathMap]) -> list[Path]:
    """Every place `file` may be on this machine, most specific first."""
    names = [file] + [m.new + file[len(m.old) :] for m in path_maps if _under(file, m.old)]
    found: list[Path] = []
    for name in names:
        found.append(Path(name))
        parts = PurePosixPath(name).parts
        relative = parts[1:] if parts and parts[0] == "/" else parts
        for directory in source_dirs:
            found.extend(directory.joinpath(*relative[i:]) for i in range(len(relative)))
    return list(dict.fromkeys(found))


def _under(file: str, prefix: str) -> bool:
    # By path component: /build/ci maps /build/ci/k.cu, never /build/ci2/k.cu.
    return file.startswith(prefix) and (
        len(file) == len(prefix) or prefix.endswith("/") or file[len(prefix)] == "/"
    )


def quote(
    chain: Sequence[SourceFrame], source_dirs: Sequence[Path], path_maps: Sequence[PathMap]
) -> tuple[QuotedLine, ...]:
    """Each frame with its source line, or the reason it could not be found."""
    cache: dict[Path, list[str] | None] = {}
    quoted = []
    for frame in chain:
        path = next(
            (p for p in candidates(frame.file, source_dirs, path_maps) if _quotable(p)), None
        )
        if path is None:
            quoted.append(QuotedLine(frame, None, None, "file not found"))
            continue
        if path not in cache:
            cache[path] = _read_lines(path)
        lines = cache[path]
        if lines is None:
            quoted.append(QuotedLine(frame, path, None, "file not readable"))
        elif not 1 <= frame.line <= len(lines):
            quoted.append(QuotedLine(frame, path, None, f"the file has {len(lines)} lines"))
        else:
            quoted.append(QuotedLine(frame, path, lines[frame.line - 1][:_MAX_LINE_CHARS], None))
    return tuple(quoted)


FunctionAt = Callable[[str, int], str | None]
"""(file as the line table names it, line) → the name of the function whose body holds the
line in that file's source found on this machine; None when the file is not found, or no
function the reader understands holds the line."""


def function_finder(source_dirs: Sequence[Path], path_maps: Sequence[PathMap]) -> FunctionAt:
    """Which `def` holds a line of a Python source (Triton kernels are Python): the file is
    found as `quote` finds it, parsed once, and the innermost `def` around the line named.
    A file that does not parse as Python (CUDA C++, an NVRTC program) names nothing."""
    spans: dict[str, list[tuple[int, int, str]] | None] = {}

    def function_at(file: str, line: int) -> str | None:
        if file not in spans:
            spans[file] = _python_functions(file, source_dirs, path_maps)
        holding = [s for s in spans[file] or () if s[0] <= line <= s[1]]
        return max(holding)[2] if holding else None  # the innermost: the latest to start

    return function_at


def _python_functions(
    file: str, source_dirs: Sequence[Path], path_maps: Sequence[PathMap]
) -> list[tuple[int, int, str]] | None:
    """(first line, last line, name) of every `def` of the file, or None."""
    path = next((p for p in candidates(file, source_dirs, path_maps) if _quotable(p)), None)
    lines = None if path is None else _read_lines(path)
    if lines is None:
        return None
    try:
        tree = ast.parse("\n".join(lines), filename=file)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return [
        (node.lineno, node.end_lineno or node.lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


_MAX_SOURCE_BYTES = 64 << 20
# File names come from the dump's line table: never quote what is not a source file into a
# report meant to be shared (/proc/self/environ would hold the user's environment).
_SYSTEM_TREES = frozenset({"proc", "sys", "dev"})


def _quotable(path: Path) -> bool:
    try:
        real = path.resolve()
        info = real.stat()
    except (OSError, RuntimeError):
        return False
    parts = real.parts
    system = len(parts) > 1 and parts[1] in _SYSTEM_TREES
    return stat.S_ISREG(info.st_mode) and not system and info.st_size <= _MAX_SOURCE_BYTES


def _read_lines(path: Path) -> list[str] | None:
    # Read through safefile even after `_quotable`: a FIFO or a device put in the file's
    # place since then is refused, not waited on or read forever.
    try:
        data = read_regular(path, _MAX_SOURCE_BYTES)
    except UnreadableFile:
        return None
    return data.decode("utf-8", errors="replace").splitlines()
