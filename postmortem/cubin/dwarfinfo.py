"""The inlined subroutines of a `-G` cubin's `.debug_info`: the inline chain of a debug build.

A `-G` build inlines `__forceinline__` functions like an optimized one, but its line table
carries no inline contexts (`postmortem.cubin.lines`); `nvdisasm -gi` prints a flat chain.
Its `.debug_info` says it instead, in standard DWARF: a `DW_TAG_subprogram` per kernel, and
nested in it a `DW_TAG_inlined_subroutine` per inlined call, with the PC range it covers, the
function (`DW_AT_abstract_origin`, whose linkage name is the mangled name) and the call site
(`DW_AT_call_file`, `DW_AT_call_line`).

Addresses are read through `.rela.debug_info`: ptxas leaves stale values in the section
bytes and writes the code offsets into the relocations' addends (checked against the SASS of
a `-G` build of fixtures/cu/oob_store.cu). A relocated image from a dump may hold applied
load addresses instead, which the code sections' `sh_addr` place.

Only what the chain needs is kept. Bounds-checked: a unit or an attribute that runs past
its section, or a form this reader does not know, raises `MalformedElf`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from postmortem.cubin.debugrefs import code_relocations, code_sections, string_at
from postmortem.cubin.elfimage import ElfImage
from postmortem.errors import MalformedElf

__all__ = ["InlinedCall", "InlineTree", "read_inline_tree"]

_TAG_SUBPROGRAM = 0x2E
_TAG_INLINED_SUBROUTINE = 0x1D
_AT_NAME, _AT_LOW_PC, _AT_HIGH_PC = 0x03, 0x11, 0x12
_AT_ABSTRACT_ORIGIN, _AT_SPECIFICATION = 0x31, 0x47
_AT_CALL_FILE, _AT_CALL_LINE = 0x58, 0x59
_AT_LINKAGE_NAMES = (0x6E, 0x2007)  # DW_AT_linkage_name, DW_AT_MIPS_linkage_name
_FORM_ADDR, _FORM_INDIRECT, _FORM_IMPLICIT_CONST = 0x01, 0x16, 0x21
_FIXED = {0x0B: 1, 0x05: 2, 0x06: 4, 0x07: 8, 0x1E: 16, 0x0C: 1, 0x11: 1, 0x12: 2,
          0x13: 4, 0x14: 8, 0x20: 8, 0x19: 0, 0x25: 1, 0x26: 2, 0x27: 3, 0x28: 4,
          0x29: 1, 0x2A: 2, 0x2B: 3, 0x2C: 4}  # fmt: skip
_OFFSET_FORMS = {0x0E, 0x10, 0x17, 0x1F, 0x1D, 0x1C}  # strp, ref_addr, sec_offset, …
_LEB_FORMS = {0x0F, 0x0D, 0x15, 0x1A, 0x1B, 0x22, 0x23}  # udata, sdata, ref_udata, …
_BLOCK_FORMS = {0x0A: 1, 0x03: 2, 0x04: 4, 0x09: -1, 0x18: -1}  # block1/2/4, block, exprloc
_KEPT = frozenset({_AT_LOW_PC, _AT_HIGH_PC, _AT_CALL_FILE, _AT_CALL_LINE, _AT_NAME,
                   _AT_ABSTRACT_ORIGIN, _AT_SPECIFICATION, *_AT_LINKAGE_NAMES})  # fmt: skip
_MAX_DEPTH = 256


@dataclass(frozen=True, slots=True)
class InlinedCall:
    """One inlined call: the code range it covers, what was called, and from where."""

    function: str | None
    """The called function's mangled name (its name, when it has no linkage name)."""
    low: int
    high: int
    """The range it covers, as offsets in its code section (high excluded)."""
    call_file: int
    """Index into the line table's file list."""
    call_line: int
    calls: tuple[InlinedCall, ...] = ()
    """The calls inlined into this one."""


@dataclass(frozen=True, slots=True)
class _Function:
    section: int
    name: str | None
    low: int
    high: int
    calls: tuple[InlinedCall, ...]


@dataclass
class InlineTree:
    """The kernels and device functions of a `-G` cubin with the calls inlined into them."""

    functions: list[_Function] = field(default_factory=list)

    def calls_at(self, section: int, offset: int) -> tuple[InlinedCall, ...]:
        """The inlined calls whose range holds `offset`, outermost first."""
        for function in self.functions:
            if function.section == section and function.low <= offset < function.high:
                found: list[InlinedCall] = []
                calls = function.calls
                while inner := next((c for c in calls if c.low <= offset < c.high), None):
                    found.append(inner)
                    calls = inner.calls
                return tuple(found)
        return ()


def read_inline_tree(image: ElfImage) -> InlineTree | None:
    """The inline tree of the cubin's `.debug_info`; None without one, or when it records no
    inlined call (an optimized build keeps its inline chain in the line table).

    Raises:
        MalformedElf: a unit, an abbreviation or an attribute runs out of bounds.
    """
    info = image.section_data(".debug_info")
    abbrev = image.section_data(".debug_abbrev")
    if not info or not abbrev:
        return None
    reader = _Reader(image, info, abbrev)
    tree = InlineTree(reader.functions())
    return tree if any(f.calls for f in tree.functions) else None


@dataclass
class _Die:
    offset: int
    tag: int
    attributes: dict[int, int | str]
    children: list[_Die] = field(default_factory=list)


class _Reader:
    def __init__(self, image: ElfImage, info: bytes, abbrev: bytes) -> None:
        self._info, self._abbrev = info, abbrev
        self._strings = image.section_data(".debug_str") or b""
        self._code = code_sections(image)
        self._relocations = code_relocations(image, ".rela.debug_info")
        self._by_offset: dict[int, _Die] = {}
        self._abbreviations: dict[int, dict[int, tuple[int, bool, list[tuple[int, int, int]]]]] = {}
        # Attributes of zero width (flag_present, implicit_const) cost no byte of .debug_info:
        # a budget keeps a hostile one-byte DIE with a long abbreviation from costing hours.
        self._reads_left = 16 * len(info) + 4096

    def functions(self) -> list[_Function]:
        roots: list[_Die] = []
        offset = 0
        while offset + 11 <= len(self._info):
            offset = self._unit(offset, roots)
        found = []
        for die in _walk(roots):
            if die.tag == _TAG_SUBPROGRAM and _LOW in die.attributes:
                section, low = self._place(die)
                high = self._high(die, low)
                if section is not None:
                    found.append(
                        _Function(section, self._name(die), low, high, self._calls(die, 0))
                    )
        return found

    def _calls(self, die: _Die, depth: int) -> tuple[InlinedCall, ...]:
        calls = []
        for child in die.children:
            if depth > _MAX_DEPTH:
                break
            if child.tag == _TAG_INLINED_SUBROUTINE and _LOW in child.attributes:
                _, low = self._place(child)
                origin = self._by_offset.get(_number(child.attributes.get(_AT_ABSTRACT_ORIGIN), -1))
                calls.append(
                    InlinedCall(
                        self._name(origin) if origin else None, low, self._high(child, low),
                        _number(child.attributes.get(_AT_CALL_FILE)),
                        _number(child.attributes.get(_AT_CALL_LINE)),
                        self._calls(child, depth + 1),
                    )
                )  # fmt: skip
            elif child.tag != _TAG_SUBPROGRAM:  # lexical blocks hold inlined calls too
                calls.extend(self._calls(child, depth + 1))
        return tuple(calls)

    def _name(self, die: _Die, hops: int = 0) -> str | None:
        for key in (*_AT_LINKAGE_NAMES, _AT_NAME):
            if isinstance(value := die.attributes.get(key), str):
                return value
        target = die.attributes.get(_AT_SPECIFICATION, die.attributes.get(_AT_ABSTRACT_ORIGIN))
        other = self._by_offset.get(int(target)) if isinstance(target, int) else None
        return self._name(other, hops + 1) if other is not None and hops < 8 else None

    def _place(self, die: _Die) -> tuple[int | None, int]:
        relocated = self._relocations.get(_number(die.attributes.get(_LOW_AT), -1))
        if relocated is not None:
            return relocated
        value = _number(die.attributes.get(_LOW))
        for section in self._code:
            if section.addr and section.addr <= value < section.addr + section.size_bytes:
                return section.index, value - section.addr
        return (self._code[0].index if len(self._code) == 1 else None), value

    def _high(self, die: _Die, low: int) -> int:
        if _HIGH not in die.attributes:
            return low
        if die.attributes.get(_HIGH_IS_ADDRESS):
            relocated = self._relocations.get(_number(die.attributes.get(_HIGH_AT), -1))
            if relocated is not None:
                return relocated[1]
            value = _number(die.attributes.get(_HIGH))
            section = next((s for s in self._code if s.addr and s.addr <= value), None)
            return value - section.addr if section else value
        return low + _number(die.attributes.get(_HIGH))  # DWARF 4+: an offset from low_pc

    # -- units, abbreviations and attributes ---------------------------------------------

    def _unit(self, start: int, roots: list[_Die]) -> int:
        length, pos = self._u(start, 4), start + 4
        size = 4
        if length == 0xFFFFFFFF:
            length, pos, size = self._u(pos, 8), pos + 8, 8
        end = pos + length
        if end > len(self._info):
            raise MalformedElf(".debug_info", f"the unit at {start} runs past the section")
        version = self._u(pos, 2)
        if version >= 5:  # version, unit_type, address_size, debug_abbrev_offset
            address_size, abbrev_offset = self._u(pos + 3, 1), self._u(pos + 4, size)
            pos += 4 + size
        else:  # version, debug_abbrev_offset, address_size
            abbrev_offset, address_size = self._u(pos + 2, size), self._u(pos + 2 + size, 1)
            pos += 3 + size
        abbrevs = self._abbreviations.get(abbrev_offset)
        if abbrevs is None:  # units share their table: read it once
            abbrevs = self._abbreviations[abbrev_offset] = _abbreviations(
                self._abbrev, abbrev_offset
            )
        stack: list[_Die] = []
        while pos < end:
            die_offset = pos
            code, pos = _uleb(self._info, pos, end)
            if code == 0:
                if stack:
                    stack.pop()
                continue
            if code not in abbrevs:
                raise MalformedElf(".debug_info", f"abbreviation {code} at {die_offset} unknown")
            tag, has_children, specs = abbrevs[code]
            die = _Die(die_offset, tag, {})
            for name, form, constant in specs:
                value, pos = self._attribute(form, pos, end, address_size, size, start, constant)
                if name in _KEPT:
                    die.attributes[name] = value
                    if name == _AT_LOW_PC:
                        die.attributes[_LOW_AT] = pos - address_size
                    elif name == _AT_HIGH_PC:
                        die.attributes[_HIGH_AT] = pos - address_size
                        die.attributes[_HIGH_IS_ADDRESS] = int(form == _FORM_ADDR)
            self._by_offset[die_offset] = die
            (stack[-1].children if stack else roots).append(die)
            if has_children and len(stack) < _MAX_DEPTH:
                stack.append(die)
        return end

    def _attribute(
        self, form: int, pos: int, end: int, address_size: int, size: int, unit: int,
        constant: int,
    ) -> tuple[int | str, int]:  # fmt: skip
        data = self._info
        self._reads_left -= 1
        if self._reads_left < 0:
            raise MalformedElf(".debug_info", "more attributes than its bytes can hold")
        if form == _FORM_INDIRECT:
            form, pos = _uleb(data, pos, end)
        if form == _FORM_IMPLICIT_CONST:
            return constant, pos
        if form == _FORM_ADDR:
            return self._u(pos, address_size, end), pos + address_size
        if form == 0x08:  # DW_FORM_string
            stop = data.find(b"\0", pos, end)
            if stop < 0:
                raise MalformedElf(".debug_info", f"a string at {pos} runs past the unit")
            return data[pos:stop].decode("utf-8", "replace"), stop + 1
        if form in _OFFSET_FORMS:
            value = self._u(pos, size, end)
            if form == 0x0E:  # DW_FORM_strp
                return string_at(self._strings, value), pos + size
            return value, pos + size
        if form in _FIXED:
            width = _FIXED[form]
            value = self._u(pos, width, end) if width in (1, 2, 4, 8) else 0
            # DW_FORM_ref1/2/4/8 are offsets from the unit's start
            return (unit + value if form in (0x11, 0x12, 0x13, 0x14) else value), pos + width
        if form in _LEB_FORMS:
            value, pos = _uleb(data, pos, end)
            return (unit + value if form == 0x15 else value), pos
        if form in _BLOCK_FORMS:
            width = _BLOCK_FORMS[form]
            if width < 0:
                length, pos = _uleb(data, pos, end)
            else:
                length, pos = self._u(pos, width, end), pos + width
            if pos + length > end:
                raise MalformedElf(".debug_info", f"a block at {pos} runs past the unit")
            return 0, pos + length
        raise MalformedElf(".debug_info", f"unknown attribute form 0x{form:x} at {pos}")

    def _u(self, at: int, width: int, end: int | None = None) -> int:
        if at < 0 or at + width > (len(self._info) if end is None else end):
            raise MalformedElf(".debug_info", f"a read at {at} runs past the unit")
        return int.from_bytes(self._info[at : at + width], "little")


# Keys of the values the reader keeps beside the attributes: where low_pc and high_pc sit
# (for their relocations), and whether high_pc is an address or a length.
_LOW, _HIGH = _AT_LOW_PC, _AT_HIGH_PC
_LOW_AT, _HIGH_AT, _HIGH_IS_ADDRESS = -1, -2, -3


def _abbreviations(
    data: bytes, start: int
) -> dict[int, tuple[int, bool, list[tuple[int, int, int]]]]:
    found: dict[int, tuple[int, bool, list[tuple[int, int, int]]]] = {}
    pos, end = start, len(data)
    while pos < end:
        code, pos = _uleb(data, pos, end)
        if code == 0:
            return found
        tag, pos = _uleb(data, pos, end)
        if pos >= end:
            raise MalformedElf(".debug_abbrev", f"abbreviation {code} is cut short")
        children = data[pos] == 1
        pos += 1
        specs = []
        while True:
            name, pos = _uleb(data, pos, end)
            form, pos = _uleb(data, pos, end)
            if name == 0 and form == 0:
                break
            constant = 0
            if form == _FORM_IMPLICIT_CONST:
                constant, pos = _uleb(data, pos, end)
            specs.append((name, form, constant))
        found[code] = (tag, children, specs)
    raise MalformedElf(".debug_abbrev", f"the table at {start} runs past the section")


def _number(value: int | str | None, default: int = 0) -> int:
    # An attribute of an unexpected form (a string where a number belongs) counts as absent.
    return value if isinstance(value, int) else default


def _walk(dies: list[_Die]) -> list[_Die]:
    found, stack = [], list(reversed(dies))
    while stack:
        die = stack.pop()
        found.append(die)
        stack.extend(reversed(die.children))
    return found


def _uleb(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise MalformedElf(".debug_info", f"a LEB128 number at {pos} runs past the data")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise MalformedElf(".debug_info", f"a LEB128 number at {pos} is too long")
