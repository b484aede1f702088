"""Finding and quoting the source lines of an inline chain on the triage machine.

The paths in a cubin's line table are the build machine's. They are tried as they are,
rewritten by `--map-path OLD=NEW` prefixes, then looked up under every `--source-dir`
(as the full relative path, then by dropping leading directories one at a time).
"""

from __future__ import annotations

import ast
import re
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
class SourcePaths:
    """Where the sources a line table names are looked for on this machine: the folders of
    `--source-dir` and the prefixes of `--map-path`, one value wherever they travel."""

    dirs: tuple[Path, ...] = ()
    maps: tuple[PathMap, ...] = ()

    def candidates(self, file: str) -> list[Path]:
        """Every place `file` may be on this machine, most specific first."""
        names = [file] + [m.new + file[len(m.old) :] for m in self.maps if _under(file, m.old)]
        found: list[Path] = []
        for name in names:
            # A relative name is looked up in `dirs` only, never in whatever folder this
            # process happens to run in (a scan worker's is not the user's).
            if PurePosixPath(name).is_absolute():
                found.append(Path(name))
            parts = PurePosixPath(name).parts
            relative = parts[1:] if parts and parts[0] == "/" else parts
            for directory in self.dirs:
                found.extend(directory.joinpath(*relative[i:]) for i in range(len(relative)))
        return list(dict.fromkeys(found))

    def find(self, file: str) -> Path | None:
        """The first candidate of `file` that is a regular file, or None."""
        return next((p for p in self.candidates(file) if _quotable(p)), None)


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


def _under(file: str, prefix: str) -> bool:
    # By path component: /build/ci maps /build/ci/k.cu, never /build/ci2/k.cu.
    return file.startswith(prefix) and (
        len(file) == len(prefix) or prefix.endswith("/") or file[len(prefix)] == "/"
    )


def quote(chain: Sequence[SourceFrame], sources: SourcePaths) -> tuple[QuotedLine, ...]:
    """Each frame with its source line, or the reason it could not be found."""
    cache: dict[Path, list[str] | None] = {}
    quoted = []
    for frame in chain:
        path = sources.find(frame.file)
        if path is None:
            quoted.append(QuotedLine(frame, None, None, not_kept(frame.file) or "file not found"))
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


NVRTC_PROGRAM = "default_program"
"""The name NVRTC gives a program compiled from a string when the caller names none."""


def not_kept(file: str) -> str | None:
    """Why a line table's file cannot be on any disk, or None: NVRTC's `default_program`
    was a string in the process that compiled it."""
    if PurePosixPath(file).name != NVRTC_PROGRAM:
        return None
    return (
        f"not kept: NVRTC compiled it from a string ({NVRTC_PROGRAM}); pass its text, saved "
        f"as {NVRTC_PROGRAM}, with --source-dir"
    )


FunctionAt = Callable[[str, int], str | None]
"""(file as the line table names it, line) → the name of the function whose body holds the
line in that file's source found on this machine; None when the file is not found, or no
function the reader understands holds the line."""


def function_finder(sources: SourcePaths) -> FunctionAt:
    """Which function holds a line of a source found here, as the source spells its name: the
    innermost `def` of a Python file (Triton kernels are Python, read with `ast`), the
    innermost function body of any other file (CUDA C++, an NVRTC program), read by matching
    braces. Each file is found as `quote` finds it and read once."""
    spans: dict[str, list[_Span] | None] = {}

    def function_at(file: str, line: int) -> str | None:
        if file not in spans:
            spans[file] = _functions(file, sources)
        holding = [s for s in spans[file] or () if s[0] <= line <= s[1]]
        return max(holding)[2] if holding else None  # the innermost: the latest to start

    return function_at


_Span = tuple[int, int, str]
"""(first line, last line, name) of a function in a source file."""


def _functions(file: str, sources: SourcePaths) -> list[_Span] | None:
    path = sources.find(file)
    lines = None if path is None else _read_lines(path)
    if lines is None:
        return None
    text = "\n".join(lines)
    if PurePosixPath(file).suffix != ".py":
        return _braced_functions(text)
    try:
        tree = ast.parse(text, filename=file)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return [
        (node.lineno, node.end_lineno or node.lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


# Comments and string or character literals, blanked before braces are matched.
_LITERALS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_CONTROL = frozenset({"if", "for", "while", "switch", "do", "else", "catch", "return", "sizeof"})
_SCOPES = re.compile(r"(?:template\s*<[^{]*>\s*)?(?:namespace|struct|class|union|enum)\b")
# Parenthesized qualifiers that come before a function's name, not names of their own.
_ATTRIBUTES = re.compile(
    r"\b(?:__launch_bounds__|__cluster_dims__|__maxnreg__|__attribute__|__declspec|alignas"
    r"|__align__)\s*\((?:[^()]|\([^()]*\))*\)"
)
_CALLED = re.compile(r"(operator\s*\(\s*\)|operator\s*[^\s(]+|~?[A-Za-z_]\w*)\s*\(")


def _braced_functions(text: str) -> list[_Span]:
    """The function bodies of a C-like source: a `{` opens one when the text before it (from
    the last `;`, `{` or `}`) reads as a function header, not a control statement, a
    namespace or a type."""
    text = _LITERALS.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    spans: list[_Span] = []
    open_: list[tuple[str | None, int]] = []
    header_start, line = 0, 1
    for mark in re.finditer(r"[{};\n]", text):
        char = mark.group()
        if char == "\n":
            line += 1
            continue
        if char == "{":
            open_.append((_header_name(text[header_start : mark.start()]), line))
        elif char == "}" and open_:
            name, first = open_.pop()
            if name:
                spans.append((first, line, name))
        header_start = mark.end()
    return spans


def _header_name(header: str) -> str | None:
    header = _ATTRIBUTES.sub(" ", re.sub(r"#[^\n]*", " ", header)).strip()
    if "(" not in header or _SCOPES.match(header):
        return None
    called = _CALLED.search(re.sub(r"^template\s*<[^{]*?>\s*", "", header))
    if called is None or called.group(1) in _CONTROL:
        return None
    return re.sub(r"\s+", "", called.group(1))


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
