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
        """The name as written in the source: a clone's is its callee's."""
        return function_name(self.name)

    @property
    def clone_in(self) -> str | None:
        """For a clone ptxas made of a called function, the mangled kernel it lives in."""
        parts = clone_parts(self.name)
        return parts[0] if parts else None

    def contains(self, pc: int) -> bool:
        return self.address <= pc < self.address + self.size_bytes


def clone_parts(name: str) -> tuple[str, str] | None:
    """(kernel, callee) of `$<kernel>$<callee>`, the local copy ptxas makes of a device
    function a kernel calls (CALL.REL.NOINC) without inlining it; None for other names."""
    if not name.startswith("$"):
        return None
    kernel, dollar, callee = name[1:].partition("$")
    return (kernel, callee) if dollar and kernel and callee else None


def function_name(name: str) -> str:
    """A function symbol demangled; a clone named as its callee (cuda-gdb adds
    `[clone <kernel>]`, which a call stack shows beside the name instead)."""
    parts = clone_parts(name)
    return demangle(parts[1] if parts else name)


def function_label(name: str) -> str:
    """A function symbol as cuda-gdb names it: a clone as `callee [clone kernel]`."""
    parts = clone_parts(name)
    if parts is None:
        return demangle(name)
    return f"{demangle(parts[1])} [clone {demangle(parts[0])}]"


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
        """The innermost function whose symbol range holds `pc`: a kernel's symbol spans the
        clones of the functions it calls, so the smallest range is the function itself."""
        holding = [f for f in self.functions if f.contains(pc)]
        return min(holding, key=lambda f: f.size_bytes) if holding else None

    def find_entry(self, pc: int) -> Function | None:
        """The function that owns the code section holding `pc`: the kernel, for a PC in
        a clone of a function it calls."""
        code = self.find_code(pc)
        if code is None or code.symbol_index is None:
            return self.find_function(pc)
        return next((f for f in self.functions if f.symbol_index == code.symbol_index), None)


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
    # A section's owner is its kernel, else the function at its start: clones of called
    # functions share the kernel's section.
    by_section: dict[int, Function] = {}
    for f in functions:
        held = by_section.get(f.section_index)
        if held is None or _owns_before(f, held, int(sections.addr[f.section_index])):
            by_section[f.section_index] = f
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


def _owns_before(candidate: Function, held: Function, start: int) -> bool:
    def rank(f: Function) -> tuple[bool, bool, int]:
        return (f.is_kernel, f.address == start, f.size_bytes)

    return rank(candidate) > rank(held)


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
