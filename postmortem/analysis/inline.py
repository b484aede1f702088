"""The inline chain at a PC from the cubin's own line table, every frame named.

`nvdisasm -gi` prints each frame's file and line but no function; cuda-gdb names the
innermost frame only. The line table names them all (`postmortem.cubin.lines`): the
outermost frame is the function of the code section, every inner one the inlined function
the table's context names. Where nvdisasm ran, its chain must agree with the table's (files
and lines); where it did not, the table alone gives the chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from postmortem.codemap import CodeMap
from postmortem.cubin.inspect import Function
from postmortem.cubin.sass import SourceFrame
from postmortem.demangle import demangle
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import Module

LINE_TABLE = "line table"
SYMBOL_TABLE = "symbol table"
CUDA_GDB = "cuda-gdb"


@dataclass(frozen=True, slots=True)
class FrameName:
    """The function a frame of an inline chain is in, and who said so."""

    function: str
    """Its name as the source gave it: mangled (line table, symbol table, cuda-gdb)."""
    source: str
    """Where the name came from: "line table", "symbol table" (the outermost frame: the
    function of the code section) or "cuda-gdb"."""

    @property
    def demangled(self) -> str:
        return demangle(self.function)


@dataclass(frozen=True, slots=True)
class NamedChain:
    """An inline chain, innermost first, and the function of each frame."""

    frames: tuple[SourceFrame, ...]
    names: tuple[FrameName | None, ...]


def line_table_chain(
    code_map: CodeMap, module: Module, function: Function, offset: int
) -> NamedChain | None:
    """The chain at `offset` of `function`'s code section, from the module's line table;
    None without line info there."""
    table = code_map.line_table(module)
    frames = table.chain(function.section_index, offset) if table else ()
    if not frames:
        return None
    names = tuple(
        FrameName(f.function, LINE_TABLE) if f.function
        else FrameName(function.name, SYMBOL_TABLE) if depth == len(frames) - 1
        else None
        for depth, f in enumerate(frames)
    )  # fmt: skip
    return NamedChain(tuple(SourceFrame(f.file, f.line) for f in frames), names)


def reconcile(
    native: NamedChain | None, listed: tuple[SourceFrame, ...]
) -> tuple[NamedChain, Finding | None]:
    """The chain a report shows: the line table's, named, when nvdisasm's agrees with it
    (or nvdisasm gave none); nvdisasm's, unnamed, with a finding, when they differ."""
    if native is None:
        return NamedChain(listed, (None,) * len(listed)), None
    if not listed or listed == native.frames:
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
