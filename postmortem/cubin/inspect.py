"""What a cubin holds: its functions, their sections and load addresses, its debug info.

Read with pyelftools through a window onto the coredump's memory map, so locating a PC
touches only the section headers and the symbol table of each image, never a copy of
the whole cubin. The symbol table is read from its raw bytes because pyelftools drops
the CUDA bits of `st_other` (STO_CUDA_ENTRY marks a kernel).
"""

from __future__ import annotations

import io
import mmap
import struct
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import StringTableSection

from postmortem.demangle import demangle

SHF_EXECINSTR = 0x4
STT_FUNC = 2
STO_CUDA_ENTRY = 0x10
_SYM = struct.Struct("<IBBHQQ")
_DEBUG_SECTIONS = (".debug_line", ".nv_debug_line_sass", ".debug_info")


@dataclass(frozen=True, slots=True)
class Function:
    """A function defined in the cubin: a kernel or a device function."""

    name: str
    """Mangled name, as the symbol table holds it."""
    symbol_index: int
    """Index in `.symtab`: what `nvdisasm -fun` takes."""
    section: str
    """Its code section, e.g. `.text._Z10oob_kernelPfif`."""
    section_index: int
    address: int
    """Start address (absolute in a relocated image, 0-based in a compiled cubin)."""
    size_bytes: int
    is_kernel: bool
    """True for a `__global__` entry point (STO_CUDA_ENTRY)."""

    @property
    def demangled(self) -> str:
        return demangle(self.name)

    def contains(self, pc: int) -> bool:
        return self.address <= pc < self.address + self.size_bytes


@dataclass(frozen=True, slots=True)
class CodeSection:
    """An executable section of a cubin and the function it holds."""

    name: str
    """Section name, e.g. `.text._Z10oob_kernelPfif`."""
    index: int
    """Section index inside the cubin."""
    address: int
    """Load address (`sh_addr`; absolute in a relocated image)."""
    size_bytes: int
    function: str | None
    """Mangled name of the STT_FUNC symbol defined in this section."""
    symbol_index: int | None
    """That symbol's index in `.symtab` (what `nvdisasm -fun` takes)."""

    def contains(self, pc: int) -> bool:
        return self.address <= pc < self.address + self.size_bytes


@dataclass(frozen=True, slots=True)
class CubinSummary:
    """The parts of a cubin needed to map a PC to a function and to judge its debug info."""

    abi_version: int
    """`e_ident[EI_ABIVERSION]`: 7 for CUDA 11/12 toolchains, 8 for CUDA 13."""
    sm_arch: int
    """The SM architecture from `e_flags` (e.g. 90), 0 when unknown."""
    code_sections: tuple[CodeSection, ...]
    functions: tuple[Function, ...]
    """Every defined function, kernels and device functions, in symbol-table order."""
    debug_sections: tuple[str, ...]
    """Which of `.debug_line`, `.nv_debug_line_sass`, `.debug_info` are present."""

    @property
    def has_line_info(self) -> bool:
        """True when source lines can be recovered (`.debug_line` is present)."""
        return ".debug_line" in self.debug_sections

    @property
    def kernels(self) -> tuple[Function, ...]:
        return tuple(f for f in self.functions if f.is_kernel)

    def find_code(self, pc: int) -> CodeSection | None:
        return next((s for s in self.code_sections if s.contains(pc)), None)

    def find_function(self, pc: int) -> Function | None:
        """The function whose symbol range holds `pc` (kernel or device function)."""
        return next((f for f in self.functions if f.contains(pc)), None)


class _Window(io.RawIOBase):
    """A read-only file view of `[start, start + size)` of a memory map."""

    def __init__(self, buffer: mmap.mmap | bytes, start: int, size: int) -> None:
        self._buffer, self._start, self._size, self._pos = buffer, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        count = max(0, min(len(target), self._size - self._pos))
        begin = self._start + self._pos
        target[:count] = self._buffer[begin : begin + count]
        self._pos += count
        return count


def summarize_cubin(
    buffer: mmap.mmap | bytes, start: int = 0, size: int | None = None
) -> CubinSummary:
    """Read the code sections, functions and debug sections of the cubin at `[start, start+size)`.

    Raises whatever pyelftools raises on a malformed image; callers translate it.
    """
    size = len(buffer) - start if size is None else size
    elf = ELFFile(io.BufferedReader(_Window(buffer, start, size)))
    names = [section.name for section in elf.iter_sections()]
    functions = _functions(elf, names)
    by_section = {f.section_index: f for f in functions}
    sections = []
    for index, section in enumerate(elf.iter_sections()):
        if section["sh_flags"] & SHF_EXECINSTR:
            owner = by_section.get(index)
            sections.append(
                CodeSection(
                    section.name, index, section["sh_addr"], section["sh_size"],
                    owner.name if owner else None, owner.symbol_index if owner else None,
                )
            )  # fmt: skip
    abi = elf.e_ident_raw[8]
    # ABI v8 (CUDA 13) moved the SM number from bits 0-7 of e_flags to bits 8-15.
    arch = (elf["e_flags"] >> 8) & 0xFF if abi >= 8 else elf["e_flags"] & 0xFF
    debug = tuple(name for name in _DEBUG_SECTIONS if name in names)
    return CubinSummary(abi, arch, tuple(sections), functions, debug)


def _functions(elf: ELFFile, names: list[str]) -> tuple[Function, ...]:
    symtab = elf.get_section_by_name(".symtab")
    if symtab is None:
        return ()
    strtab = elf.get_section(symtab["sh_link"])
    if not isinstance(strtab, StringTableSection):
        return ()
    data = symtab.data()
    found = []
    for number in range(len(data) // _SYM.size):
        name_offset, info, other, shndx, value, size = _SYM.unpack_from(data, number * _SYM.size)
        if info & 0xF != STT_FUNC or not 0 < shndx < len(names):
            continue  # undefined (e.g. __assertfail, resolved by the driver) or not code
        found.append(
            Function(
                strtab.get_string(name_offset), number, names[shndx], shndx, value, size,
                bool(other & STO_CUDA_ENTRY),
            )
        )  # fmt: skip
    return tuple(found)
