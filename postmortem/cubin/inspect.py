"""What a cubin holds: its functions, their sections and load addresses, its debug info.

Read with `postmortem.elf` through a view of the coredump's memory map, so locating a PC
touches only the section headers and the symbol table of each image, never a copy of the
whole cubin. `st_other` keeps its CUDA bits (STO_CUDA_ENTRY marks a kernel).
"""

from __future__ import annotations

from dataclasses import dataclass

from postmortem.demangle import demangle
from postmortem.elf import (
    SHF_EXECINSTR,
    SHT_SYMTAB,
    STT_FUNC,
    Buffer,
    Fetch,
    Sections,
    read_header,
)

STO_CUDA_ENTRY = 0x10
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


def summarize_cubin(
    buffer: Buffer, start: int = 0, size: int | None = None, fetch: Fetch | None = None
) -> CubinSummary:
    """Read the code sections, functions and debug sections of the cubin at `[start, start+size)`.

    `fetch` (offsets in `buffer`) is asked for bytes before they are read: of an image in
    an object store, only its headers and symbols are fetched, never its code.

    Raises:
        MalformedElf: The image's ELF header or section header table cannot be read.
    """
    size = len(buffer) - start if size is None else size
    view = memoryview(buffer)[start : start + size]
    inner = None if fetch is None else (lambda offset, count: fetch(start + offset, count))
    try:
        return _summarize(view, inner)
    finally:
        view.release()


def _summarize(view: memoryview, fetch: Fetch | None) -> CubinSummary:
    header = read_header(view, fetch=fetch)
    sections = Sections(view, header, fetch=fetch)
    names = [sections.name(index) for index in range(sections.count)]
    functions = _functions(sections, names)
    by_section = {f.section_index: f for f in functions}
    code = []
    flags = sections.flags
    for index in (i for i in range(sections.count) if int(flags[i]) & SHF_EXECINSTR):
        owner = by_section.get(index)
        code.append(
            CodeSection(
                names[index], index, int(sections.addr[index]), int(sections.size[index]),
                owner.name if owner else None, owner.symbol_index if owner else None,
            )
        )  # fmt: skip
    # ABI v8 (CUDA 13) moved the SM number from bits 0-7 of e_flags to bits 8-15.
    abi = header.abi_version
    arch = (header.flags >> 8) & 0xFF if abi >= 8 else header.flags & 0xFF
    debug = tuple(name for name in _DEBUG_SECTIONS if name in names)
    return CubinSummary(abi, arch, tuple(code), functions, debug)


def _functions(sections: Sections, names: list[str]) -> tuple[Function, ...]:
    symtab = sections.find(".symtab", SHT_SYMTAB)
    if symtab is None:
        return ()
    strings = int(sections.link[symtab])
    return tuple(
        Function(
            sections.string_at(strings, symbol.name), n, names[symbol.shndx], symbol.shndx,
            symbol.value, symbol.size, bool(symbol.other & STO_CUDA_ENTRY),
        )
        for n, symbol in enumerate(sections.symbols(symtab))
        # Undefined functions (e.g. __assertfail, resolved by the driver) have no code here.
        if symbol.info & 0xF == STT_FUNC and 0 < symbol.shndx < len(names)
    )  # fmt: skip
