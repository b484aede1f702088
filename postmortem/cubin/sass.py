"""Parse the SASS listings nvdisasm (and cuobjdump) print: pure text → typed instructions.

What a listing looks like (``nvdisasm -ndf -c -gi -fun 10 k.cubin``, 13.5)::

    //--------------------- .text._Z10oob_kernelPfif  --------------------------
        .section  .text._Z10oob_kernelPfif,"ax",@progbits
    _Z10oob_kernelPfif:
    .L_x_2:
        //## File "include/store.cuh", line 10 inlined at "include/store.cuh", line 16
        //## File "include/store.cuh", line 16 inlined at "oob_store.cu", line 19
        //## File "oob_store.cu", line 19
            /*00d0*/                   STG.E desc[UR4][R2.64], R7 ;

A block of ``//##`` lines (innermost frame first, the last one without ``inlined at``) is the
inline chain of the next instruction *and of every instruction after it* until the next block.
Older printers add ``/* 0x… */`` encodings, blank lines between bundles, ``{ … }`` dual-issue
braces (Maxwell/Pascal), and ``&wr=…`` / ``?trans…`` scheduling tokens; all are accepted.
`parse_sass` never raises: a line it does not understand is kept in `SassListing.unparsed`.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from dataclasses import dataclass

__all__ = ["SassInstruction", "SassListing", "SourceFrame", "parse_sass"]


@dataclass(frozen=True, slots=True)
class SourceFrame:
    """One source position of an inline chain."""

    file: str
    """The file as nvdisasm printed it (as recorded in .debug_line: may be relative)."""
    line: int
    """1-based line number."""


@dataclass(frozen=True, slots=True)
class SassInstruction:
    """One SASS instruction of a listing."""

    offset: int
    """The address nvdisasm printed (``/*00d0*/``): the offset from the start of the function's
    ``.text`` section in a cubin; an absolute address (``/*7ff533bb91d0*/``) in a relocated
    image, whose sections carry their load address."""
    predicate: str | None
    """The guard without its ``@`` (``P0``, ``!P0``, ``!PT``); None when unpredicated."""
    opcode: str
    """The full opcode with its modifiers, e.g. ``STG.E.128``."""
    operands: tuple[str, ...]
    """Operands split on top-level commas (``desc[UR4][R2.64]`` stays whole)."""
    text: str
    """The instruction as printed, predicate included, without offset, encodings and ``;``."""
    inline_chain: tuple[SourceFrame, ...]
    """Source positions, innermost first; () without line info."""
    labels: tuple[str, ...]
    """Labels printed immediately before the instruction (``.L_x_2``, the function name)."""

    @property
    def base_opcode(self) -> str:
        """The opcode without modifiers: ``STG`` for ``STG.E.128``."""
        return self.opcode.split(".", 1)[0]

    @property
    def modifiers(self) -> tuple[str, ...]:
        """The opcode's modifiers: ``("E", "128")`` for ``STG.E.128``."""
        return tuple(self.opcode.split(".")[1:])


@dataclass(frozen=True, slots=True)
class SassListing:
    """The instructions of one function, as read from a listing."""

    function: str | None
    """The function (kernel) name, mangled; None when the text names none."""
    section: str | None
    """Its section, ``.text.<name>``; None when the text names none."""
    instructions: tuple[SassInstruction, ...]
    """The function's instructions in offset order."""
    unparsed: tuple[str, ...]
    """Non-blank lines that were not understood, kept as printed."""
    has_line_info: bool
    """True when the text holds any ``//##`` line-info annotation."""
    other_functions: tuple[str, ...] = ()
    """Functions after the first one: named here, their instructions not kept.
    Empty for a ``-fun`` listing."""

    def at(self, offset: int) -> SassInstruction | None:
        """Finds the instruction at an offset (binary search).

        Args:
            offset: Byte offset from the start of the function's section.

        Returns:
            The instruction that starts there, or None.
        """
        index = bisect.bisect_left(self.instructions, offset, key=_offset_of)
        if index < len(self.instructions) and self.instructions[index].offset == offset:
            return self.instructions[index]
        return None

    def before(self, offset: int) -> SassInstruction | None:
        """The instruction that ends where the one at `offset` starts, or None."""
        return self.at(offset - INSTRUCTION_BYTES)

    def rebased(self, base: int) -> SassListing:
        """The listing with `base` subtracted from every offset.

        nvdisasm prints absolute load addresses (`/*7f3c2a0000d0*/`) for a relocated image
        taken from a dump; rebasing on the section's address gives section offsets again.
        """
        moved = tuple(dataclasses.replace(i, offset=i.offset - base) for i in self.instructions)
        return dataclasses.replace(self, instructions=moved)

    def window(self, offset: int, before: int, after: int) -> tuple[SassInstruction, ...]:
        """Returns the instructions around an offset, for context in a report.

        Args:
            offset: Byte offset of the centre instruction.
            before: How many instructions to include before it.
            after: How many instructions to include after it.

        Returns:
            Up to ``before + 1 + after`` instructions in order; when no instruction starts at
            `offset`, those before and after the place where it would be.
        """
        index = bisect.bisect_left(self.instructions, offset, key=_offset_of)
        found = index < len(self.instructions) and self.instructions[index].offset == offset
        stop = index + max(after, 0) + (1 if found else 0)
        return self.instructions[max(index - max(before, 0), 0) : stop]


def _offset_of(instruction: SassInstruction) -> int:
    return instruction.offset


INSTRUCTION_BYTES = 16
"""Bytes per SASS instruction: sm_70 and later encode every instruction in 16."""

_OFFSET_LINE = re.compile(r"^\s*/\*([0-9a-fA-F]{1,16})\*/(.*)$")
_ENCODING_ONLY = re.compile(r"^\s*/\*\s*0x[0-9a-fA-F]+\s*\*/\s*$")
_COMMENT = re.compile(r"/\*.*?\*/")
_LINE_INFO = re.compile(r'^\s*//##\s*File\s+"(?P<file>[^"]*)",\s*line\s+(?P<line>\d+)(?P<rest>.*)$')
_INLINED_AT = re.compile(r'\binlined at\s+"')
_HEADER = re.compile(r"^//-+\s+(?P<name>\S+)\s+-+\s*$")
_SECTION = re.compile(r"^\s*\.section\s+(?P<name>[^\s,]+)")
_TYPE_FUNCTION = re.compile(r"^\s*\.type\s+(?P<name>[^\s,]+)\s*,\s*@function\b")
_CUOBJDUMP_FUNCTION = re.compile(r"^\s*Function\s*:\s*(?P<name>\S+)\s*$")
_LABEL = re.compile(r"^\s*(?P<name>[^\s:/][^\s:]*):\s*$")
_DIRECTIVE = re.compile(r"^\s*\.[A-Za-z_]\w*(?:\s|$)")
_PREDICATE = re.compile(r"^@(?P<guard>!?[A-Za-z0-9_.]+)\s+")
_SCHEDULING = re.compile(r"^[&?]\S*$")
_TEXT_PREFIX = ".text."


class _State:
    """What the line-by-line reader has seen so far."""

    def __init__(self) -> None:
        self.function: str | None = None
        self.section: str | None = None
        self.others: list[str] = []
        self.instructions: list[SassInstruction] = []
        self.unparsed: list[str] = []
        self.has_line_info = False
        self.chain: tuple[SourceFrame, ...] = ()
        self.block: list[SourceFrame] | None = None
        self.block_done = False
        self.labels: list[str] = []
        self.in_code = True  # False in the SYMBOLS part and in later functions
        self.seen_function = False

    def start_function(self, name: str, section: str | None) -> None:
        if self.seen_function and (name == self.function or name in self.others):
            return  # the header, .section and .type lines name the same function
        if self.seen_function:
            self.others.append(name)
            self.in_code = False
            return
        self.seen_function = True
        self.function, self.section = name, section
        self.in_code = True
        self.chain, self.block, self.labels = (), None, []


def parse_sass(text: str) -> SassListing:
    """Parses a SASS listing from nvdisasm (``-c``, ``-g``/``-gi``) or ``cuobjdump -sass``.

    Never raises: lines it does not understand are kept in ``unparsed``.

    Args:
        text: The tool's standard output.

    Returns:
        The first function's instructions with their inline chains and labels.
    """
    state = _State()
    # Lines end at "\n" only: nvdisasm copies line-table file names as they are, and a
    # name holding "\r" or another separator str.splitlines() knows must not end a line.
    for line in text.split("\n"):
        if line.strip():
            _read_line(state, line)
    ordered = sorted(state.instructions, key=_offset_of)
    return SassListing(
        function=state.function,
        section=state.section,
        instructions=tuple(ordered),
        unparsed=tuple(state.unparsed),
        has_line_info=state.has_line_info,
        other_functions=tuple(state.others),
    )


def _read_line(state: _State, line: str) -> None:
    match = _OFFSET_LINE.match(line)
    if match:
        if state.in_code:
            _read_instruction(state, int(match.group(1), 16), match.group(2), line)
        return
    match = _LINE_INFO.match(line)
    if match:
        state.has_line_info = True
        if state.in_code:
            _read_line_info(state, match)
        return
    if not _read_structure(state, line):
        _read_other(state, line)


def _read_line_info(state: _State, match: re.Match[str]) -> None:
    frame = SourceFrame(match.group("file"), int(match.group("line")))
    # A frame without "inlined at" closes its block; the next //## line starts a new one.
    if state.block is None or state.block_done:
        state.block = []
    state.block.append(frame)
    state.block_done = _INLINED_AT.search(match.group("rest")) is None


def _read_structure(state: _State, line: str) -> bool:
    """Handles the lines that say which function (or none) follows; True if it was one."""
    match = _HEADER.match(line)
    if match:
        name = match.group("name")
        if name.startswith(_TEXT_PREFIX) and len(name) > len(_TEXT_PREFIX):
            state.start_function(name[len(_TEXT_PREFIX) :], name)
        else:  # "SYMBOLS", or a data section printed without -c
            state.in_code = False
        return True
    match = _CUOBJDUMP_FUNCTION.match(line)
    if match:
        state.start_function(match.group("name"), None)
        return True
    match = _SECTION.match(line)
    if match:
        name = match.group("name")
        if name.startswith(_TEXT_PREFIX) and len(name) > len(_TEXT_PREFIX):
            state.start_function(name[len(_TEXT_PREFIX) :], name)
        return True
    match = _TYPE_FUNCTION.match(line)
    if match:
        # The SYMBOLS part lists called functions (__assertfail) with the same directive.
        if state.in_code and not state.seen_function:
            state.start_function(match.group("name"), None)
        return True
    return False


def _read_other(state: _State, line: str) -> None:
    match = _LABEL.match(line)
    if match:
        if state.in_code:
            state.labels.append(match.group("name"))
        return
    stripped = line.strip()
    if _DIRECTIVE.match(line) or _ENCODING_ONLY.match(line) or stripped.startswith("//"):
        return
    state.unparsed.append(line)


def _read_instruction(state: _State, offset: int, body: str, line: str) -> None:
    statement = _statement(body)
    if statement is None:
        state.unparsed.append(line)
        return
    if statement.startswith("."):
        return  # data (.byte, .word) printed in a non-code section
    if state.block is not None:
        state.chain, state.block = tuple(state.block), None
    predicate, opcode, operands = _split_statement(statement)
    state.instructions.append(
        SassInstruction(
            offset=offset,
            predicate=predicate,
            opcode=opcode,
            operands=operands,
            text=statement,
            inline_chain=state.chain,
            labels=tuple(state.labels),
        )
    )
    state.labels = []


def _statement(body: str) -> str | None:
    """The instruction text of what follows ``/*offset*/``: comments, braces and ``;`` removed."""
    text = _COMMENT.sub(" ", body).strip()
    # Dual-issue pairs (sm_5x/6x): "{ A ;" on one line, "B ; }" on the next.
    if text.startswith("{"):
        text = text[1:].lstrip()
    if text.endswith("}"):
        text = text[:-1].rstrip()
    text = text.rstrip()
    if text.endswith(";"):
        text = text[:-1].rstrip()
    text = " ".join(text.split())
    if not text or text[0] in "{};,":
        return None
    return text


def _split_statement(statement: str) -> tuple[str | None, str, tuple[str, ...]]:
    predicate = None
    rest = statement
    match = _PREDICATE.match(rest)
    if match:
        predicate = match.group("guard")
        rest = rest[match.end() :]
    opcode, _, tail = rest.partition(" ")
    operands = [part for part in _split_operands(tail) if part]
    if operands:
        # Old printers append scheduling tokens (&wr=0x0 ?trans1) after the last operand.
        words = operands[-1].split()
        while words and _SCHEDULING.match(words[-1]):
            words.pop()
        operands[-1] = " ".join(words)
        if not operands[-1]:
            operands.pop()
    return predicate, opcode, tuple(operands)


def _split_operands(tail: str) -> list[str]:
    """Splits on commas outside brackets: ``desc[UR4][R2.64], c[0x0][0x210]`` → 2 operands."""
    parts: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(tail):
        if char in "[({":
            depth += 1
        elif char in "])}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            parts.append(tail[start:index].strip())
            start = index + 1
    parts.append(tail[start:].strip())
    return parts
