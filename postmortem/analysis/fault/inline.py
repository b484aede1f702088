"""The inline chain at a PC from the cubin's own debug info, every frame named.

`nvdisasm -gi` prints each frame's file and line but no function; cuda-gdb names the
innermost frame only. The line table names them all (`postmortem.cubin.lines`): the
outermost frame is the function of the code section, every inner one the inlined function
the table's context names. A `-G` build has no contexts in its line table; its
`.debug_info` holds the inlined calls instead (`postmortem.cubin.dwarfinfo`). Where nvdisasm
ran, its chain must agree (files and lines); where it did not, the cubin alone gives it.

Triton writes every inline context of a kernel under the kernel's own name, so an inlined
helper's frame (`write_zeros_to_output` at fused_moe.py:61) would read "in fused_moe_kernel".
No function is inlined into itself: an inner frame the table names after the function of the
section takes its name from the function around its line (a Python `def`) when the source is
found, and is left unnamed, with the reason in the chain's notes, when it is not.
"""

from __future__ import annotations

from dataclasses import dataclass

from postmortem.analysis.fault.source import FunctionAt, not_kept
from postmortem.codemap import CodeMap
from postmortem.cubin.dwarfinfo import InlinedCall, InlineTree
from postmortem.cubin.inspect import Function, function_name
from postmortem.cubin.lines import InlineFrame, LineTable
from postmortem.cubin.sass import SourceFrame
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import Module

LINE_TABLE = "line table"
DEBUG_INFO = "debug info"
SYMBOL_TABLE = "symbol table"
SOURCE_FILE = "source file"
CUDA_GDB = "cuda-gdb"


@dataclass(frozen=True, slots=True)
class FrameName:
    """The function a frame of an inline chain is in, and who said so."""

    function: str
    """Its name as the source gave it: mangled (line table, symbol table, cuda-gdb), or as
    the source file spells it (source file)."""
    source: str
    """Where the name came from: "line table", "symbol table" (the outermost frame: the
    function of the code section), "source file" (the function around the frame's line, where
    the line table names the kernel itself) or "cuda-gdb"."""

    @property
    def demangled(self) -> str:
        return function_name(self.function)


@dataclass(frozen=True, slots=True)
class NamedChain:
    """An inline chain, innermost first, and the function of each frame."""

    frames: tuple[SourceFrame, ...]
    names: tuple[FrameName | None, ...]
    origin: str = LINE_TABLE
    """Where the chain came from: "line table" or "debug info" (a `-G` build)."""
    notes: tuple[str, ...] = ()
    """Why a frame's name was not taken from the line table, or is missing."""


def line_table_chain(
    code_map: CodeMap,
    module: Module,
    function: Function,
    offset: int,
    function_at: FunctionAt | None = None,
) -> NamedChain | None:
    """The chain at `offset` of `function`'s code section, from the module's line table;
    None without line info there. `function_at` (`source.function_finder`) names the frames
    the table names after the kernel itself, from their source."""
    table = code_map.line_table(module)
    if table is None:
        return None
    tree = code_map.inline_tree(module) if table.sections else None
    return cubin_chain(table, tree, function, offset, function_at)


def cubin_chain(
    table: LineTable,
    tree: InlineTree | None,
    function: Function,
    offset: int,
    function_at: FunctionAt | None = None,
) -> NamedChain | None:
    """The named chain at `offset` of `function`'s section, from a cubin's line table and,
    for a `-G` build, its `.debug_info`; None where the table covers no row there.

    An inner frame the table names after `function` itself (Triton names every context so)
    is named after the function (a Python `def`) that holds its line when `function_at`
    finds its source, and left unnamed otherwise: never the kernel's name, which would be
    false."""
    frames = table.chain(function.section_index, offset)
    if not frames:
        return None
    calls = tree.calls_at(function.section_index, offset) if tree and len(frames) == 1 else ()
    if calls:
        return _from_debug_info(frames[0], calls, table.files, function)
    names: list[FrameName | None] = []
    notes: list[str] = []
    for depth, frame in enumerate(frames):
        if depth == len(frames) - 1 and not frame.function:
            names.append(FrameName(function.name, SYMBOL_TABLE))
        elif frame.function == function.name and depth < len(frames) - 1:
            name, note = _self_named(depth, frame, function_at)
            names.append(name)
            notes.append(note)
        else:
            names.append(FrameName(frame.function, LINE_TABLE) if frame.function else None)
    chain = tuple(SourceFrame(f.file, f.line) for f in frames)
    return NamedChain(chain, tuple(names), notes=tuple(notes))


def _self_named(
    depth: int, frame: InlineFrame, function_at: FunctionAt | None
) -> tuple[FrameName | None, str]:
    """The name of an inner frame the line table names after the function it is inlined
    into, and what was done about it."""
    where = f"frame #{depth} ({frame.file}:{frame.line})"
    said = f"the line table names the kernel itself for {where}, an inlined frame"
    found = function_at(frame.file, frame.line) if function_at else None
    if found:
        return FrameName(found, SOURCE_FILE), f"{said}: named from the function around its line"
    why = not_kept(frame.file) or (
        "no source was looked up" if function_at is None
        else "its source was not found, or no function in it holds the line"
    )  # fmt: skip
    return None, f"{said}: left unnamed ({why})"


def _from_debug_info(
    innermost: InlineFrame, calls: tuple[InlinedCall, ...], files: tuple[str, ...],
    function: Function,
) -> NamedChain:  # fmt: skip
    # The PC's own row gives the innermost file and line; each call, innermost first, gives
    # the line it was called from, in the function of the call around it.
    frames = [SourceFrame(innermost.file, innermost.line)]
    names: list[FrameName | None] = [_debug_name(calls[-1].function)]
    for depth in range(len(calls) - 1, -1, -1):
        call = calls[depth]
        file = files[call.call_file] if 0 <= call.call_file < len(files) else "?"
        frames.append(SourceFrame(file, call.call_line))
        names.append(
            _debug_name(calls[depth - 1].function) if depth
            else FrameName(function.name, SYMBOL_TABLE)
        )  # fmt: skip
    return NamedChain(tuple(frames), tuple(names), DEBUG_INFO)


def _debug_name(name: str | None) -> FrameName | None:
    return FrameName(name, DEBUG_INFO) if name else None


def reconcile(
    native: NamedChain | None, listed: tuple[SourceFrame, ...]
) -> tuple[NamedChain, Finding | None]:
    """The chain a report shows: the line table's, named, when nvdisasm's agrees with it
    (or nvdisasm gave none); nvdisasm's, unnamed, with a finding, when they differ."""
    if native is None:
        return NamedChain(listed, (None,) * len(listed)), None
    # A -G build's nvdisasm chain is flat: the PC's own line, which the debug info extends.
    flat = native.origin == DEBUG_INFO and len(listed) == 1 and listed[0] == native.frames[0]
    if not listed or listed == native.frames or flat:
        return native, None
    return NamedChain(listed, (None,) * len(listed)), Finding(
        FindingCode.LINE_TABLE_DISAGREES,
        Severity.WARNING,
        "the cubin's line table and nvdisasm -gi give different inline chains at the PC: "
        "nvdisasm's is shown, without function names",
        evidence=(f"line table: {_shown(native.frames)}", f"nvdisasm: {_shown(listed)}"),
    )


def _shown(frames: tuple[SourceFrame, ...]) -> str:
    return " < ".join(f"{f.file}:{f.line}" for f in frames)
