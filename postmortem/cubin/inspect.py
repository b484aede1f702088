"""What a cubin holds: its executable sections, their load addresses and functions.

Read with pyelftools through a window onto the coredump's memory map, so locating a PC
touches only the section headers and the symbol table of each image, never a copy of
the whole cubin.
"""

from __future__ import annotations

import io
import mmap
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile

SHF_EXECINSTR = 0x4
STT_FUNC = 2


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
    """The parts of a cubin needed to map a PC to a function."""

    abi_version: int
    """`e_ident[EI_ABIVERSION]`: 7 for CUDA 11/12 toolchains, 8 for CUDA 13."""
    sm_arch: int
    """The SM architecture from `e_flags` (e.g. 90), 0 when unknown."""
    code_sections: tuple[CodeSection, ...]

    def find_code(self, pc: int) -> CodeSection | None:
        return next((s for s in self.code_sections if s.contains(pc)), None)


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


def summarize_cubin(buffer: mmap.mmap | bytes, start: int, size: int) -> CubinSummary:
    """Read the code sections and function symbols of the cubin at `[start, start+size)`.

    Raises whatever pyelftools raises on a malformed image; callers translate it.
    """
    elf = ELFFile(io.BufferedReader(_Window(buffer, start, size)))
    functions: dict[int, tuple[str, int]] = {}
    symtab = elf.get_section_by_name(".symtab")
    if symtab is not None and hasattr(symtab, "iter_symbols"):
        for number, symbol in enumerate(symtab.iter_symbols()):
            shndx = symbol["st_shndx"]
            if symbol["st_info"]["type"] == "STT_FUNC" and isinstance(shndx, int):
                functions.setdefault(shndx, (symbol.name, number))
    sections = []
    for index, section in enumerate(elf.iter_sections()):
        if not section["sh_flags"] & SHF_EXECINSTR:
            continue
        function, symbol_index = functions.get(index, (None, None))
        sections.append(
            CodeSection(
                section.name,
                index,
                section["sh_addr"],
                section["sh_size"],
                function,
                symbol_index,
            )
        )
    abi = elf.e_ident_raw[8]
    # ABI v8 (CUDA 13) moved the SM number from bits 0-7 of e_flags to bits 8-15.
    arch = (elf["e_flags"] >> 8) & 0xFF if abi >= 8 else elf["e_flags"] & 0xFF
    return CubinSummary(abi, arch, tuple(sections))
