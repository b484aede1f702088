"""Pure parsers for where code is: ``info symbol``, ``info line``, ``bt``, ``p/x``, ``x/Ni``.

Like every parser of this package they never raise; see `parse.never_raises`.
"""

from __future__ import annotations

import re

from postmortem.gdb.model import (
    CodeAddress,
    Frame,
    Instruction,
    LineInfo,
    Parsed,
    SymbolInfo,
    Unparsed,
)
from postmortem.gdb.parse import never_raises, to_dim3, unwrap

_HEX = r"0x[0-9a-fA-F]+"


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


_SYMBOL = re.compile(
    r"^(?P<sym>.+?)(?: \+ (?P<off>\d+))? in section (?P<sec>\S+)(?: of (?P<obj>.+))?$"
)


@never_raises
def parse_info_symbol(text: str) -> Parsed[SymbolInfo] | Unparsed:
    """Parses ``info symbol ADDR``: ``oob_kernel + 272 in section .text.oob_kernel of F``."""
    for line in _lines(text):
        match = _SYMBOL.match(line)
        if match:
            return Parsed(
                SymbolInfo(
                    symbol=match.group("sym"),
                    offset=int(match.group("off") or 0),
                    section=match.group("sec"),
                    objfile=match.group("obj"),
                ),
                text,
            )
    return Unparsed(text, "no 'SYMBOL [+ N] in section S' line")


_PRINT = re.compile(rf"^\$\d+ = (?:\([^)]*\) )?(?P<value>{_HEX}|-?\d+)\b")


@never_raises
def parse_print_int(text: str) -> Parsed[int] | Unparsed:
    """Parses ``p/x EXPR``: ``$1 = 0x7f0000000290``."""
    for line in _lines(text):
        match = _PRINT.match(line)
        if match:
            value = match.group("value")
            return Parsed(int(value, 16) if value.startswith("0x") else int(value), text)
    return Unparsed(text, "no '$N = VALUE' line")


_ADDR = rf"(?P<{{n}}>{_HEX})(?: <(?P<{{n}}_sym>[^>]*)>)?"
_LINE = re.compile(
    r'^Line (?P<line>\d+) of "(?P<file>[^"]+)"\s+'
    r"(?:starts at address "
    + _ADDR.format(n="start")
    + r" and ends at "
    + _ADDR.format(n="end")
    + r"|is at address "
    + _ADDR.format(n="at")
    + r" but contains no code)"
    r"(?: inlined from (?P<ifunc>\S+) at line (?P<iline>\d+) of (?P<ifile>.+?))?\.?$"
)
_NO_LINE = re.compile(
    r"^No line number information available for address " + _ADDR.format(n="addr")
)


@never_raises
def parse_info_line(text: str) -> Parsed[LineInfo] | Unparsed:
    """Parses ``info line *ADDR``, with or without line info, inlined or not."""
    joined = " ".join(_lines(text))
    match = _LINE.search(joined)
    if match:
        start = _code_address(match, "start") or _code_address(match, "at")
        iline = match.group("iline")
        return Parsed(
            LineInfo(
                has_line_info=True,
                file=match.group("file"),
                line=int(match.group("line")),
                start=start,
                end=_code_address(match, "end"),
                inlined_function=match.group("ifunc"),
                inlined_line=int(iline) if iline else None,
                inlined_file=match.group("ifile"),
            ),
            text,
        )
    match = _NO_LINE.search(joined)
    if match:
        info = LineInfo(False, None, None, _code_address(match, "addr"), None, None, None, None)
        return Parsed(info, text)
    return Unparsed(text, "no 'Line N of \"F\"' or 'No line number information' sentence")


def _code_address(match: re.Match[str], name: str) -> CodeAddress | None:
    address = match.group(name)
    if address is None:
        return None
    symbol, offset = split_symbol(match.group(f"{name}_sym"))
    return CodeAddress(int(address, 16), symbol, offset)


def split_symbol(text: str | None) -> tuple[str | None, int | None]:
    """Splits ``oob_kernel+272`` into the symbol and the offset (0 when there is none).

    gdb's ``disassemble`` of a whole function prints ``+1056`` alone: an offset in that
    function, read as (None, 1056).

    Args:
        text: What gdb printed between ``<`` and ``>``, or None.

    Returns:
        (symbol, offset); (None, None) for None or empty text.
    """
    if not text:
        return None, None
    head, plus, tail = text.rpartition("+")
    if plus and tail.isdigit():
        return (head or None), int(tail)
    return text, 0


_FRAME_START = re.compile(rf"^#(?P<level>\d+)\s+(?:(?P<pc>{_HEX}) in )?(?P<rest>.*)$")
_INLINED = re.compile(r" in (?P<func>\S+) inlined from (?P<file>[^\s:]+):(?P<line>\d+)$")
_AT = re.compile(r" at (?P<file>\S+):(?P<line>\d+)$")
_FROM = re.compile(r" from (?P<lib>\S+)$")
_LAUNCH = re.compile(r"<<<(?P<grid>\(\d+,\d+,\d+\)),(?P<block>\(\d+,\d+,\d+\))>>>$")


@never_raises
def parse_backtrace(text: str) -> Parsed[tuple[Frame, ...]] | Unparsed:
    """Parses ``bt``: one `Frame` per ``#N`` line (wrapped lines are joined first)."""
    frames: list[Frame] = []
    for line in unwrap(text).splitlines():
        match = _FRAME_START.match(line.strip())
        if match:
            frames.append(_frame(int(match.group("level")), match.group("pc"), match.group("rest")))
    if not frames:
        return Unparsed(text, "no '#N' frame line")
    return Parsed(tuple(frames), text)


def _frame(level: int, pc: str | None, rest: str) -> Frame:
    rest = rest.strip()
    ifunc = ifile = iline = file = line = None
    match = _INLINED.search(rest)
    if match:
        ifunc, ifile, iline = match.group("func"), match.group("file"), int(match.group("line"))
        rest = rest[: match.start()]
    match = _AT.search(rest) or _FROM.search(rest)
    if match:
        if "line" in match.groupdict():
            file, line = match.group("file"), int(match.group("line"))
        rest = rest[: match.start()]
    function, args = _function_and_args(rest.strip())
    launch = _LAUNCH.search(function)
    grid_dim = block_dim = None
    if launch:
        grid_dim, block_dim = to_dim3(launch.group("grid")), to_dim3(launch.group("block"))
        function = function[: launch.start()]
    return Frame(
        level=level,
        pc=int(pc, 16) if pc else None,
        function=function,
        grid_dim=grid_dim,
        block_dim=block_dim,
        args=args,
        file=file,
        line=line,
        inline_function=ifunc,
        inlined_from_file=ifile,
        inlined_from_line=iline,
    )


def _function_and_args(text: str) -> tuple[str, str | None]:
    # gdb prints "name (args)": the argument list is the last balanced "(...)" after a space.
    if not text.endswith(")"):
        return text, None
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                if i > 0 and text[i - 1] == " ":
                    return text[: i - 1].rstrip(), text[i + 1 : -1]
                return text, None
    return text, None


# The symbol may hold ">" (templates), so it runs to the first ">:" that ends the address.
_INSN = re.compile(
    rf"^(?P<mark>\*=>|=>|\*>)?\s*(?P<addr>{_HEX})(?: <(?P<sym>.*?)>)?:(?:\s+(?P<text>.*?))?\s*$"
)


@never_raises
def parse_disassembly(text: str) -> Parsed[tuple[Instruction, ...]] | Unparsed:
    """Parses ``x/Ni ADDR`` and ``disassemble``; ``=>`` marks the PC, ``*>`` the error PC.

    ``*=>`` marks both. ``disassemble`` of a whole function prints ``<+1056>``, an offset in
    that function (12.6/jetson-indcall__disas.txt), where ``x/i`` and ``disassemble`` of a
    range print ``<sym+1056>`` (docs-13.4/disas-pc.txt); such rows have no symbol. Lines that
    are no instruction (``Dump of assembler code …``, gdb's pager prompt) are skipped.
    """
    found: list[Instruction] = []
    for line in text.splitlines():
        match = _INSN.match(line.strip())
        if not match:
            continue
        mark = match.group("mark") or ""
        symbol, offset = split_symbol(match.group("sym"))
        found.append(
            Instruction(
                address=int(match.group("addr"), 16),
                symbol=symbol,
                offset=offset,
                text=match.group("text") or "",
                is_pc="=>" in mark,
                is_error_pc=mark.startswith("*"),
            )
        )
    if not found:
        return Unparsed(text, "no 'ADDR <sym+off>: INSN' line")
    return Parsed(tuple(found), text)
