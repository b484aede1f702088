"""The banner cuda-gdb prints on opening a coredump: the exception, where, and the focus.

`target cudacore` prints "CUDA Exception: …" (or, for lane exceptions, only the signal
line), "The exception was triggered at PC …" with the function and source location, and
the focus line. The formats of cuda-gdb 11.8, 12.x and 13.x are read; pasted text whose
lines a terminal wrapped is joined back where that is unambiguous, else refused.
"""

from __future__ import annotations

import re

from postmortem.gdb.model import CudaException, FocusCoords, Parsed, Unparsed
from postmortem.gdb.parse import never_raises, to_dim3, to_int, unwrap

_EXCEPTION = re.compile(r"^CUDA Exception: (?P<name>.+?)\s*$", re.MULTILINE)
_ASSERTION = re.compile(r"^Assertion failed\.\s*$", re.MULTILINE)
_TRIGGERED = re.compile(
    r"^The exception was triggered at PC (?P<pc>0x[0-9a-fA-F]+)[ \t]*(?P<rest>.*?)\s*$",
    re.MULTILINE,
)
_FOCUS = re.compile(
    r"^\[(?:Current focus set to|Switching focus to) (?P<body>[^\]]*)\]\s*$", re.MULTILINE
)
# "Thread 1 "python" received signal CUDA_EXCEPTION_4, Warp Illegal Instruction."
_SIGNAL = re.compile(
    r"(?:received|terminated with) signal CUDA_EXCEPTION_(?P<code>\d+)\b"
    r"(?:, (?P<name>[^.\n]+)\.)?"
)
_OPENING = re.compile(r"^Opening GPU coredump: (?P<path>.+?)\s*$", re.MULTILINE)
# The location closes the "triggered at PC" line: "(k.cu:2)" or "(k.cu:2 in F inlined from
# f:4)"; F may be demangled, with spaces and parentheses.
_LOCATION = re.compile(
    r"(?:^|\s)\((?P<file>[^\s():]+):(?P<line>\d+)"
    r"(?: in (?P<func>.+) inlined from (?P<ifile>[^\s():]+):(?P<iline>\d+))?\)$"
)
_Location = tuple[str | None, int | None, str | None, str | None, int | None, str | None]


@never_raises
def parse_exception_banner(text: str) -> Parsed[CudaException] | Unparsed:
    """Parses what ``target cudacore`` prints: exception, error PC, location and focus."""
    raw = text
    text, cut = _rejoin_banner(text)
    if cut is not None:
        return Unparsed(raw, f"a line is or may be cut short (wrapped?), not joined: {cut!r}")
    text = unwrap(text)
    exception = _EXCEPTION.search(text)
    assertion = _ASSERTION.search(text) is not None
    focus_match = _FOCUS.search(text)
    triggered = _TRIGGERED.search(text)
    signal = _SIGNAL.search(text)
    if not (exception or assertion or focus_match or triggered or signal):
        return Unparsed(raw, "no 'CUDA Exception:', 'Assertion failed.', signal or focus line")
    file = line = function = ifile = iline = inline = None
    if triggered:
        file, line, function, ifile, iline, inline = _banner_location(triggered.group("rest"))
    # Without a "CUDA Exception:" line (lane exceptions print none), the signal line names it.
    name = exception.group("name") if exception else (signal.group("name") if signal else None)
    opening = _OPENING.search(text)
    return Parsed(
        CudaException(
            name=name,
            assertion_failed=assertion,
            error_pc=int(triggered.group("pc"), 16) if triggered else None,
            file=file,
            line=line,
            function=function,
            inlined_from_file=ifile,
            inlined_from_line=iline,
            focus=parse_focus(focus_match.group("body")) if focus_match else None,
            signal_code=int(signal.group("code")) if signal else None,
            coredump_path=opening.group("path") if opening else None,
            inline_function=inline,
        ),
        raw,
    )


def _banner_location(rest: str) -> _Location:
    # Since cuda-gdb 12.x (CUDA 12.6 and 12.9 setups at the latest), the "triggered at PC" line
    # prints the function, two spaces, then the location: "  f(float*, int)  (k.cu:2 in F
    # inlined from k.cu:4)" (unstated/vllm-blog2-cutlass-banner-inlined.txt); before: the
    # location alone, "(k.cu:2 in F inlined from k.cu:4)" (11.8/oob_store__banner.txt).
    # Without line info only the function is printed (unstated/vllm-blog-banner-no-lineinfo).
    rest = rest.strip()
    match = _LOCATION.search(rest)
    if match is None:
        return None, None, rest or None, None, None, None
    iline = match.group("iline")
    return (
        match.group("file"),
        int(match.group("line")),
        rest[: match.start()].strip() or None,
        match.group("ifile"),
        int(iline) if iline else None,
        match.group("func"),
    )


# Banner lines a terminal may have cut at its width; a cut one has a bracket left open (or no
# final full stop, for the signal line), and goes on at column 0 of the next line.
_WRAPPABLE = re.compile(
    r"^(?:The exception was triggered at PC |\[(?:Current focus set to|Switching focus to) )"
    r"|signal CUDA_EXCEPTION_\d+"
)
# How the lines that can follow a banner line begin (a source line is "245<spaces>code").
_LINE_START = re.compile(
    r"^(?:$|CUDA Exception:|The exception was|Assertion failed|\[|#\d|Thread \d|Program "
    r"|Opening GPU|Python Exception|\d+\s|0x[0-9a-fA-F]+ in )"
)


def _rejoin_banner(text: str) -> tuple[str, str | None]:
    """Joins banner lines a terminal cut at its width and continued at column 0.

    Returns the text and, when a line stays cut short or may be (a function name cut before
    any bracket cannot be told from a line of its own), that line: the caller refuses then.
    """
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if line.startswith("Opening GPU coredump: "):  # a path has no spaces
            while i < len(lines) and _is_piece(lines[i]) and " " not in lines[i]:
                line, i = line + lines[i], i + 1
        elif _WRAPPABLE.search(line):
            while _cut_short(line) and i < len(lines) and not _LINE_START.match(lines[i]):
                line, i = line + lines[i], i + 1
            if _cut_short(line) or _maybe_cut(line, lines[i] if i < len(lines) else ""):
                return text, line
        out.append(line)
    return "\n".join(out), None


def _maybe_cut(line: str, after: str) -> bool:
    # A function printed after the PC ends with its parameters' ")" or is a bare name; a bare
    # name followed by a piece at column 0 may have been cut anywhere.
    match = _TRIGGERED.match(line)
    rest = match.group("rest").strip() if match else ""
    return bool(rest) and not rest.endswith(")") and _is_piece(after)


def _is_piece(line: str) -> bool:
    # Could continue the line above: starts at column 0 and is no line of its own.
    return bool(line) and not line[0].isspace() and not _LINE_START.match(line)


def _cut_short(line: str) -> bool:
    line = line.rstrip()
    if "signal CUDA_EXCEPTION_" in line:
        return not line.endswith(".")
    return any(line.count(o) > line.count(c) for o, c in ("()", "<>", "[]"))


_FOCUS_FIELD = re.compile(r"(?P<key>[A-Za-z][A-Za-z ]*?) (?P<value>\([-\d,]+\)|-?\d+)")


def parse_focus(body: str) -> FocusCoords:
    """Reads ``CUDA kernel 0, grid 7, block (5,0,0), thread (67,0,0), device 0, …``.

    Args:
        body: The text between the brackets of a focus line.

    Returns:
        The coordinates; fields the text does not name are None.
    """
    values: dict[str, str] = {}
    for match in _FOCUS_FIELD.finditer(body):
        key = match.group("key").strip().removeprefix("CUDA ").strip()
        values.setdefault(key, match.group("value"))
    return FocusCoords(
        kernel=to_int(values.get("kernel")),
        grid=to_int(values.get("grid")),
        block=to_dim3(values.get("block")),
        thread=to_dim3(values.get("thread")),
        device=to_int(values.get("device")),
        sm=to_int(values.get("sm")),
        warp=to_int(values.get("warp")),
        lane=to_int(values.get("lane")),
        cluster=to_dim3(values.get("cluster")),
    )
