"""The `.debug_line` program of a cubin, decoded natively: for any PC, its inline chain.

A `-lineinfo` cubin names every inlined function. ptxas writes a DWARF line program
(version 2 from CUDA 11, 3 from CUDA 12 and 13; 4 and 5 are read too) with one extension
that NVIDIA does not document, an extended opcode that sets the *inline context* of the
rows after it:

    DW_LNE 0x90, ULEB128 inlined_at, ULEB128 function
        inlined_at  the 1-based number, within the sequence, of the row this code was
                    inlined at (the call site); 0: not inlined (the sequence's own function)
        function    an offset into .debug_str: the mangled name of the inlined function

The context is a register like `file`: it holds until the next 0x90 or the end of the
sequence. A row's chain is the row itself, then the row it was inlined at, then that row's
call site, and so on, innermost first.

ptxas writes a new context only when the call site changes, never for a new function at the
same call site. Where its optimizer has collapsed a chain (code of a function inlined into
an inlined function, attributed to the outer call site), the name it wrote last at a call
site may be the deeper function's, and the rows after it inherit that name although their
lines are the called function's own (fixtures/cu/cutlass_like.cu, epilogue.cuh:51). A row
that inherits its context is therefore named after the first function written for its call
site: the function called there. This reading is inferred, not documented: it was
worked out on the fixture cubins of both ABI versions (fixtures/cu/README.md) and is held to
`nvdisasm -gi` at every instruction of every fixture kernel by the tests, and to cuda-gdb's
innermost function name. Rows are numbered per sequence, from 1: a second kernel's contexts
point to its own rows.

Bounds-checked like the rest of the ELF layer: a program that runs past its section, a
header that lies about its length or an inline context that points nowhere ends the decoding
of that unit (`MalformedElf`) or drops the one bad link; nothing else is trusted.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from postmortem.cubin.debugrefs import code_relocations, code_sections, string_at
from postmortem.cubin.elfimage import ElfImage
from postmortem.errors import MalformedElf

__all__ = ["InlineFrame", "LineRow", "LineTable", "decode_line_program", "read_line_table"]

Place = Callable[[int, int], "tuple[int, int] | None"]
"""(offset of a DW_LNE_set_address operand in .debug_line, its value) → (code section,
offset in it), or None when the address is in no code section."""

_DW_LNE_END_SEQUENCE = 0x01
_DW_LNE_SET_ADDRESS = 0x02
_DW_LNE_DEFINE_FILE = 0x03
_DW_LNE_NV_INLINE_CONTEXT = 0x90  # inferred; see the module docstring
_MAX_CHAIN = 256  # deeper than any real inlining; stops a context cycle in a hostile table


@dataclass(frozen=True, slots=True)
class LineRow:
    """One row of a sequence of the line table."""

    offset: int
    """Where the row starts, as an offset in its code section."""
    file: str
    """As nvdisasm prints it: the include directory joined with the file name."""
    line: int
    function: str | None
    """Mangled name of the inlined function the row is in; None: the section's own."""
    inlined_at: int | None
    """Index (0-based, in the same sequence) of the row this code was inlined at."""


@dataclass(frozen=True, slots=True)
class InlineFrame:
    """One frame of an inline chain."""

    function: str | None
    """Mangled name; None for the outermost frame, which is the function of the section."""
    file: str
    line: int


@dataclass(frozen=True, slots=True)
class _Sequence:
    section: int
    rows: tuple[LineRow, ...]
    starts: tuple[int, ...]
    end: int
    """The offset just past the last instruction the sequence covers."""


class LineTable:
    """Every sequence of a cubin's line program, by code section."""

    def __init__(self, sequences: list[_Sequence], files: tuple[str, ...] = ()) -> None:
        self.files = files
        """The first unit's file names, by the numbers its program (and `DW_AT_call_file`)
        uses: from 1 in DWARF 2-4 (entry 0 is empty), from 0 in DWARF 5."""
        self._by_section: dict[int, list[_Sequence]] = {}
        for sequence in sequences:
            self._by_section.setdefault(sequence.section, []).append(sequence)

    @property
    def sections(self) -> tuple[int, ...]:
        """The code sections the table covers (section header indices)."""
        return tuple(sorted(self._by_section))

    def rows(self, section: int) -> tuple[LineRow, ...]:
        """Every row of the section's sequences, in program order."""
        return tuple(row for s in self._by_section.get(section, ()) for row in s.rows)

    def chain(self, section: int, offset: int) -> tuple[InlineFrame, ...]:
        """The inline chain at `offset` of code section `section`, innermost first; empty
        when no row covers it."""
        for sequence in self._by_section.get(section, ()):
            if not sequence.rows or not sequence.starts[0] <= offset < sequence.end:
                continue
            # The last row at the highest address at or before the offset: rows that share
            # an address are the frames of one instruction, the deepest last.
            index = bisect_right(sequence.starts, offset) - 1
            return _chain(sequence.rows, index)
        return ()


def _chain(rows: tuple[LineRow, ...], index: int) -> tuple[InlineFrame, ...]:
    frames: list[InlineFrame] = []
    seen: set[int] = set()
    current: int | None = index
    while current is not None and current not in seen and len(frames) < _MAX_CHAIN:
        seen.add(current)
        row = rows[current]
        frames.append(InlineFrame(row.function, row.file, row.line))
        current = row.inlined_at
    return tuple(frames)


def read_line_table(image: ElfImage) -> LineTable | None:
    """The cubin's line table, or None when it has no `.debug_line`.

    Raises:
        MalformedElf: the program is cut short or its header is inconsistent.
    """
    data = image.section_data(".debug_line")
    if data is None:
        return None
    strings = image.section_data(".debug_str") or b""
    line_strings = image.section_data(".debug_line_str") or b""
    return decode_line_program(data, strings, line_strings, _Places(image).place)


def decode_line_program(
    data: bytes, strings: bytes = b"", line_strings: bytes = b"", place: Place | None = None
) -> LineTable:
    """The line table of a `.debug_line` section's bytes.

    Args:
        data: The section.
        strings: `.debug_str`, which the inline contexts name functions in.
        line_strings: `.debug_line_str` (DWARF 5 file tables).
        place: Where each DW_LNE_set_address points; by default, section 0 at the value.

    Raises:
        MalformedElf: the program is cut short or its header is inconsistent.
    """
    sequences: list[_Sequence] = []
    files: tuple[str, ...] | None = None
    offset = 0
    while offset < len(data):
        unit = _Unit(data, offset, strings, line_strings, place or _at_value)
        sequences.extend(unit.sequences())
        files = tuple(unit.files) if files is None else files
        offset = unit.end
    return LineTable(sequences, files or ())


def _at_value(_operand: int, value: int) -> tuple[int, int]:
    return 0, value


class _Places:
    """Where a DW_LNE_set_address points: a code section and an offset in it.

    A cubin's `.rela.debug_line` names the section's symbol for each address; a relocated
    image from a dump may hold the load address itself (the relocation applied), which
    the code sections' `sh_addr` place.
    """

    def __init__(self, image: ElfImage) -> None:
        self._code = code_sections(image)
        self._relocations = code_relocations(image, ".rela.debug_line")

    def place(self, operand_offset: int, value: int) -> tuple[int, int] | None:
        found = self._relocations.get(operand_offset)
        if found is not None:
            return found
        for section in self._code:
            if section.addr and section.addr <= value < section.addr + section.size_bytes:
                return section.index, value - section.addr
        if len(self._code) == 1 and value < self._code[0].size_bytes:
            return self._code[0].index, value
        return None


class _Unit:
    """One line-program unit: its header, then its sequences."""

    def __init__(
        self, data: bytes, start: int, strings: bytes, line_strings: bytes, place: Place
    ) -> None:
        self._data, self._strings, self._place = data, strings, place
        self._line_strings = line_strings
        length, self._pos = self._u32(start), start + 4
        self._offset_size = 4
        if length == 0xFFFFFFFF:
            length, self._offset_size = self._u64(self._pos), 8
            self._pos += 8
        self.end = self._pos + length
        if self.end > len(data):
            raise MalformedElf(".debug_line", f"unit at {start} runs past the section")
        self.version = self._u16(self._pos)
        self._pos += 2
        if not 2 <= self.version <= 5:
            raise MalformedElf(".debug_line", f"DWARF version {self.version}")
        if self.version >= 5:
            self._pos += 2  # address_size, segment_selector_size
        header_length = self._offset()
        self._program = self._pos + header_length
        self._min_length = self._byte()
        if self.version >= 4:
            self._byte()  # maximum_operations_per_instruction: 1 on a GPU
        self._byte()  # default_is_stmt
        self._line_base = struct.unpack_from("<b", data, self._need(1))[0]
        self._pos += 1
        self._line_range = self._byte()
        self._opcode_base = self._byte()
        if self._line_range == 0 or self._opcode_base == 0:
            raise MalformedElf(".debug_line", "line_range or opcode_base is 0")
        self._lengths = [self._byte() for _ in range(self._opcode_base - 1)]
        self._directories = [""]
        self.files = self._files_v5() if self.version >= 5 else self._files_v2()
        if not self._program <= self.end:
            raise MalformedElf(".debug_line", "header_length runs past the unit")

    # -- the header --------------------------------------------------------------

    def _files_v2(self) -> list[str]:
        while (name := self._cstring()) != "":
            self._directories.append(name)
        files = [""]  # DWARF 2-4 number files from 1
        while (name := self._cstring()) != "":
            directory = self._uleb()
            self._uleb(), self._uleb()  # mtime, length
            files.append(_join(self._directories, directory, name))
        return files

    def _files_v5(self) -> list[str]:
        directories = [self._entry(formats)[0] for formats in self._formats_and_count()]
        files = []
        for formats in self._formats_and_count():
            name, directory = self._entry(formats)
            files.append(_join(directories, directory if isinstance(directory, int) else 0, name))
        return files

    def _formats_and_count(self) -> Iterator[list[tuple[int, int]]]:
        formats = [(self._uleb(), self._uleb()) for _ in range(self._byte())]
        count = self._uleb()
        # Each entry takes at least a byte, unless it has no fields: a count the header's
        # bytes cannot hold is a lie (and, with no fields, an endless loop).
        if count and (not formats or count > self._program - self._pos):
            raise MalformedElf(".debug_line", f"{count} entries cannot fit the header")
        for _ in range(count):
            yield formats

    def _entry(self, formats: list[tuple[int, int]]) -> tuple[str, int | str | None]:
        name, directory = "", None
        for content, form in formats:
            value = self._form(form)
            if content == 1:  # DW_LNCT_path
                name = str(value)
            elif content == 2:  # DW_LNCT_directory_index
                directory = value
        return name, directory

    def _form(self, form: int) -> int | str:
        if form == 0x08:  # DW_FORM_string
            return self._cstring()
        if form in (0x0E, 0x1F):  # DW_FORM_strp, DW_FORM_line_strp
            table = self._strings if form == 0x0E else self._line_strings
            return string_at(table, self._offset())
        if form == 0x0F:  # DW_FORM_udata
            return self._uleb()
        sizes = {0x0B: 1, 0x05: 2, 0x06: 4, 0x07: 8, 0x1E: 16}
        if form in sizes:
            size = sizes[form]
            value = int.from_bytes(self._data[self._need(size) : self._pos + size], "little")
            self._pos += size
            return value
        if form == 0x09:  # DW_FORM_block
            size = self._uleb()
            self._pos = self._need(size) + size
            return 0
        raise MalformedElf(".debug_line", f"unknown form 0x{form:x} in the file table")

    # -- the program -------------------------------------------------------------

    def sequences(self) -> Iterator[_Sequence]:
        self._pos = self._program
        state = _State()
        while self._pos < self.end:
            opcode = self._byte()
            if opcode >= self._opcode_base:
                adjusted = opcode - self._opcode_base
                state.advance(adjusted // self._line_range * self._min_length)
                state.line += self._line_base + adjusted % self._line_range
                state.emit(self._file(state.file))
            elif opcode == 0:
                done = self._extended(state)
                if done is not None:
                    yield done
                    state = _State()
            else:
                self._standard(opcode, state)

    def _extended(self, state: _State) -> _Sequence | None:
        length = self._uleb()
        start = self._need(length)
        end = start + length
        if length == 0:
            return None
        sub = self._byte()
        finished = None
        if sub == _DW_LNE_END_SEQUENCE:
            finished = state.finish()
        elif sub == _DW_LNE_SET_ADDRESS:
            value = int.from_bytes(self._data[self._pos : end], "little")
            state.place(self._place(self._pos, value))
        elif sub == _DW_LNE_DEFINE_FILE:
            name = self._cstring()
            directory = self._uleb()
            self.files.append(_join(self._directories, directory, name))
        elif sub == _DW_LNE_NV_INLINE_CONTEXT:
            inlined_at, function = self._uleb(), self._uleb()
            state.inlined_at = inlined_at - 1 if inlined_at else None
            named = inlined_at or function
            state.function = string_at(self._strings, function) if named else None
            state.fresh = True
        self._pos = end
        return finished

    def _standard(self, opcode: int, state: _State) -> None:
        if opcode == 1:  # DW_LNS_copy
            state.emit(self._file(state.file))
        elif opcode == 2:  # DW_LNS_advance_pc
            state.advance(self._uleb() * self._min_length)
        elif opcode == 3:  # DW_LNS_advance_line
            state.line += self._sleb()
        elif opcode == 4:  # DW_LNS_set_file
            state.file = self._uleb()
        elif opcode == 8:  # DW_LNS_const_add_pc
            state.advance((255 - self._opcode_base) // self._line_range * self._min_length)
        elif opcode == 9:  # DW_LNS_fixed_advance_pc
            state.advance(self._u16(self._pos))
            self._pos += 2
        else:  # set_column, negate_stmt, basic_block, prologue_end, ...: operands skipped
            for _ in range(self._lengths[opcode - 1]):
                self._uleb()

    def _file(self, number: int) -> str:
        return self.files[number] if 0 <= number < len(self.files) else f"<file {number}>"

    # -- bounds-checked reads -----------------------------------------------------

    def _need(self, size: int) -> int:
        if size < 0 or self._pos + size > self.end:
            raise MalformedElf(".debug_line", f"a read at {self._pos} runs past the unit")
        return self._pos

    def _byte(self) -> int:
        value = self._data[self._need(1)]
        self._pos += 1
        return value

    def _u16(self, at: int) -> int:
        if at + 2 > self.end:
            raise MalformedElf(".debug_line", f"a read at {at} runs past the unit")
        return int(struct.unpack_from("<H", self._data, at)[0])

    def _u32(self, at: int) -> int:
        if at + 4 > len(self._data):
            raise MalformedElf(".debug_line", f"a unit header at {at} is cut short")
        return int(struct.unpack_from("<I", self._data, at)[0])

    def _u64(self, at: int) -> int:
        if at + 8 > len(self._data):
            raise MalformedElf(".debug_line", f"a unit header at {at} is cut short")
        return int(struct.unpack_from("<Q", self._data, at)[0])

    def _offset(self) -> int:
        start = self._need(self._offset_size)
        value = int.from_bytes(self._data[start : start + self._offset_size], "little")
        self._pos += self._offset_size
        return value

    def _uleb(self) -> int:
        result = shift = 0
        while True:
            byte = self._byte()
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7
            if shift > 63:
                raise MalformedElf(".debug_line", f"a LEB128 number at {self._pos} is too long")

    def _sleb(self) -> int:
        result = shift = 0
        while True:
            byte = self._byte()
            result |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return result - (1 << shift) if byte & 0x40 else result
            if shift > 63:
                raise MalformedElf(".debug_line", f"a LEB128 number at {self._pos} is too long")

    def _cstring(self) -> str:
        end = self._data.find(b"\0", self._pos, self.end)
        if end < 0:
            raise MalformedElf(".debug_line", f"a string at {self._pos} runs past the unit")
        text = self._data[self._pos : end].decode("utf-8", "replace")
        self._pos = end + 1
        return text


class _State:
    """The registers of the line-number state machine, and the rows of one sequence."""

    def __init__(self) -> None:
        self.section: int | None = None
        self.offset = 0
        self.file, self.line = 1, 1
        self.function: str | None = None
        self.inlined_at: int | None = None
        self.fresh = False
        """True from a context opcode to the next row: the row is the one it was written for."""
        self.called_at: dict[int | None, str | None] = {}
        """The first function written for each call site (row index) of the sequence."""
        self.rows: list[LineRow] = []

    def place(self, where: tuple[int, int] | None) -> None:
        if where is None:
            self.section = None
            return
        if self.section is not None and where[0] != self.section:
            self.rows.clear()  # a sequence that moves to another section: keep the last
        self.section, self.offset = where

    def advance(self, step: int) -> None:
        self.offset += step

    def emit(self, file: str) -> None:
        if self.section is None:
            return
        # A context that points at a row not yet seen is dropped, not followed.
        inlined_at = self.inlined_at
        if inlined_at is not None and not 0 <= inlined_at < len(self.rows):
            inlined_at = None
        function = self.function
        if self.fresh:
            self.called_at.setdefault(inlined_at, function)
            self.fresh = False
        else:
            function = self.called_at.get(inlined_at, function)
        self.rows.append(LineRow(self.offset, file, self.line, function, inlined_at))

    def finish(self) -> _Sequence | None:
        if self.section is None or not self.rows:
            return None
        rows = tuple(self.rows)
        return _Sequence(self.section, rows, tuple(r.offset for r in rows), self.offset)


def _join(directories: list[str], index: int, name: str) -> str:
    # nvdisasm's spelling: the directory joined with the name; directory 0 of DWARF 2-4
    # (the compilation directory, unrecorded) adds nothing.
    directory = directories[index] if 0 <= index < len(directories) else ""
    return f"{directory}/{name}" if directory and not name.startswith("/") else name
