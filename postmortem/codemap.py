"""Where code is in a dump: PC → module, section and function, over its relocated images.

It sits above the reader (`coredump/`) and the cubin layer (`cubin/`): it reads each
module's relocated image with the cubin inspector, and hands the reader a `locate`
function, so that faults come back located. Modules are its keys: a module is its
device, context, handle and images, so two devices' modules that share a handle value,
a handle of 0, or a root-level image with no handle at all, are told apart.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from postmortem.coredump.faults import read_faults
from postmortem.coredump.reader import MAX_IMAGE_BYTES, Coredump
from postmortem.cubin.inspect import CubinSummary, summarize_cubin
from postmortem.errors import MalformedElf, NvInfoError
from postmortem.model import CodeLocation, Fault, Image, Module

if TYPE_CHECKING:
    from postmortem.cubin.dwarfinfo import InlineTree
    from postmortem.cubin.elfimage import ElfImage
    from postmortem.cubin.lines import LineTable
    from postmortem.cubin.nvinfo import ToolkitInfo

# The decoders of notes, line tables and .debug_info, and the ELF image's sections and
# symbols, are imported where they are used: `info` and a scan's first look need none of
# them (they are a fifth of `info`'s start-up).

__all__ = ["CodeMap", "CubinFacts", "CubinMemo", "LoadedModule", "find_faults"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LoadedModule:
    """A module with a relocated image, and what that image holds."""

    module: Module
    summary: CubinSummary


class CubinFacts:
    """What one cubin holds, each part decoded on first use: its summary (functions, code
    sections), its sections and symbols, its line table with the inline contexts, its
    inline tree and its toolkit notes. They depend on the image's bytes alone, so one
    `CubinFacts` serves every module whose image has the same content (`CubinMemo`).

    With a `memo`, the parts past the summary are the memo's, looked up by the image's
    content when first asked for (an image too large to hash up front).
    """

    def __init__(
        self,
        summary: CubinSummary,
        image: bytes | Callable[[], bytes],
        memo: CubinMemo | None = None,
    ) -> None:
        self.summary = summary
        self._image = image
        self._memo = memo
        self._shared: CubinFacts | None = None
        self._elf: ElfImage | None = None
        self._elf_error: MalformedElf | None = None
        self._elf_read = False
        self._lines: tuple[LineTable | None, str | None] | None = None
        self._inlines: tuple[InlineTree | None, str | None] | None = None
        self._toolkit: tuple[ToolkitInfo | None] | None = None

    def _content(self) -> CubinFacts:
        # The facts of this content the memo holds; these when there is no memo, or when
        # the memo cannot read the image (it then reads as if it had none).
        if self._memo is None:
            return self
        if self._shared is None:
            try:
                self._shared = self._memo.facts(self.image())
            except MalformedElf:
                self._shared = self
        return self._shared

    def image(self) -> bytes:
        """The image's bytes (of a dump's image, copied from the dump at each call)."""
        return self._image if isinstance(self._image, bytes) else self._image()

    def elf_image(self) -> ElfImage | None:
        """The image as sections and symbols; None for an empty image.

        Raises:
            MalformedElf: The image's section table cannot be read.
        """
        if self._content() is not self:
            return self._content().elf_image()
        if not self._elf_read:
            from postmortem.cubin.elfimage import ElfImage

            image = self.image()
            try:
                self._elf = ElfImage(image) if image else None
            except MalformedElf as error:
                self._elf_error = error
            self._elf_read = True
        if self._elf_error is not None:
            raise self._elf_error.with_traceback(None)
        return self._elf

    def line_table(self) -> tuple[LineTable | None, str | None]:
        """The decoded `.debug_line`, or None and why it could not be read (None: absent)."""
        if self._content() is not self:
            return self._content().line_table()
        if self._lines is None:
            from postmortem.cubin.lines import read_line_table

            self._lines = self._debug(read_line_table)
        return self._lines

    def inline_tree(self) -> tuple[InlineTree | None, str | None]:
        """The inlined calls of `.debug_info`, or None and why they could not be read."""
        if self._content() is not self:
            return self._content().inline_tree()
        if self._inlines is None:
            from postmortem.cubin.dwarfinfo import read_inline_tree

            self._inlines = self._debug(read_inline_tree)
        return self._inlines

    def toolkit(self) -> ToolkitInfo | None:
        """The tkinfo/cuinfo notes; None when there are none or they cannot be read."""
        if self._content() is not self:
            return self._content().toolkit()
        if self._toolkit is None:
            from postmortem.cubin.nvinfo import read_toolkit_info

            image = self.image()
            try:
                self._toolkit = (read_toolkit_info(image) if image else None,)
            except NvInfoError:
                self._toolkit = (None,)
        return self._toolkit[0]

    def _debug(self, read: Callable[[ElfImage], T | None]) -> tuple[T | None, str | None]:
        # One ElfImage of the image serves the line table, the inline tree and the strings.
        try:
            elf = self.elf_image()
            return (read(elf) if elf is not None else None), None
        except MalformedElf as error:
            return None, str(error)


class CubinMemo:
    """`CubinFacts` by the content of their image, for every dump a process reads (a scan
    worker's): a fleet of dumps of a few builds decodes each cubin once. Bounded in entries
    and in image bytes, the least recently used going first."""

    def __init__(
        self, max_entries: int = 32, max_bytes: int = 128 << 20, eager_bytes: int = 4 << 20
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.eager_bytes = eager_bytes
        """Images up to this size are hashed when the code map reads them, their summary
        shared too; a larger one is summarized from the dump (its headers and symbols
        only), and hashed only when more of it is asked for."""
        self._entries: OrderedDict[bytes, CubinFacts] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        """Images found already decoded."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """The image bytes the memo holds."""
        return self._bytes

    def facts(self, image: bytes) -> CubinFacts:
        """The facts of the cubin `image`, decoded now unless an image of the same content was.

        Raises:
            MalformedElf: The image's ELF header or section header table cannot be read
                (nothing is remembered of it).
        """
        import hashlib  # here: `info` never hashes, and hashlib loads OpenSSL

        key = hashlib.blake2b(image, digest_size=32).digest()
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return found
        facts = CubinFacts(summarize_cubin(image), image)
        if len(image) <= self.max_bytes:
            self._entries[key] = facts
            self._bytes += len(image)
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= len(dropped.image())
        return facts


class CodeMap:
    """PC → module, section and function, over the relocated images of a dump.

    An image that is not a readable cubin is set aside (`unreadable`), not fatal: the
    rest of the dump's code still maps. With a `memo`, each image's facts are looked up by
    its content (a dump in an object store excepted: that would fetch its code).
    """

    def __init__(self, core: Coredump, memo: CubinMemo | None = None) -> None:
        self._core = core
        self._memo = memo
        self._loaded: list[LoadedModule] | None = None
        self._by_module: dict[Module, LoadedModule] | None = None
        self._facts: dict[Module, CubinFacts] = {}
        self._located: dict[tuple[int, int], CodeLocation | None] = {}
        self.unreadable_lines: dict[Module, str] = {}
        """Modules whose `.debug_line` could not be decoded, and why."""
        self.unreadable: list[tuple[Module, str]] = []
        """Modules whose relocated image could not be read, and why."""

    def modules(self) -> list[LoadedModule]:
        if self._loaded is None:
            self._loaded = []
            for module in self._core.all_modules():
                image = module.relocated_image
                if image is None:
                    continue
                if image.size_bytes > MAX_IMAGE_BYTES:
                    why = f"an image of {image.size_bytes:,} bytes, larger than any cubin"
                    self.unreadable.append((module, why))
                    continue
                try:
                    facts = self._read(image)
                except MalformedElf as error:
                    self.unreadable.append((module, str(error)))
                    continue
                self._facts[module] = facts
                self._loaded.append(LoadedModule(module, facts.summary))
        return self._loaded

    def _read(self, image: Image) -> CubinFacts:
        core = self._core
        memo = None if core.file.sparse else self._memo
        if memo is not None and image.size_bytes <= memo.eager_bytes:
            return memo.facts(core.image_bytes(image))
        offset, size = int(core.sections.offset[image.section]), image.size_bytes
        fetch = core.file.ensure if core.file.sparse else None
        summary = summarize_cubin(core.file.map, offset, size, fetch)
        return CubinFacts(summary, lambda: core.image_bytes(image), memo)

    def find(self, module: Module) -> LoadedModule | None:
        """The loaded module, if the dump holds a readable relocated image for it."""
        if self._by_module is None:
            self._by_module = {loaded.module: loaded for loaded in self.modules()}
        return self._by_module.get(module)

    def summary(self, module: Module) -> CubinSummary | None:
        """What the module's relocated image holds."""
        loaded = self.find(module)
        return loaded.summary if loaded else None

    def facts(self, module: Module) -> CubinFacts | None:
        """All that the module's relocated image holds, if the dump holds a readable one."""
        return self._facts.get(module) if self.find(module) else None

    def image_bytes(self, module: Module) -> bytes:
        """The module's relocated cubin (empty when the dump holds none)."""
        facts = self.facts(module)
        return facts.image() if facts else b""

    def toolkit(self, module: Module) -> ToolkitInfo | None:
        """How the module's image was built (its tkinfo/cuinfo notes), read once; None when
        it has none or they cannot be read."""
        facts = self.facts(module)
        return facts.toolkit() if facts else None

    def line_table(self, module: Module) -> LineTable | None:
        """The module's decoded `.debug_line` (with NVIDIA's inline contexts), read once;
        None without line info, or when it cannot be decoded (`unreadable_lines` says why)."""
        facts = self.facts(module)
        return self._noted(module, facts.line_table()) if facts else None

    def inline_tree(self, module: Module) -> InlineTree | None:
        """The inlined calls of the module's `.debug_info` (a `-G` build), read once; None
        without them, or when they cannot be read (`unreadable_lines` says why)."""
        facts = self.facts(module)
        return self._noted(module, facts.inline_tree()) if facts else None

    def elf_image(self, module: Module) -> ElfImage | None:
        """The module's relocated image as sections and symbols, read once; None when the
        dump holds none.

        Raises:
            MalformedElf: The image's section table cannot be read.
        """
        facts = self.facts(module)
        return facts.elf_image() if facts else None

    def _noted(self, module: Module, found: tuple[T | None, str | None]) -> T | None:
        value, why = found
        if why is not None:
            self.unreadable_lines.setdefault(module, why)
        return value

    def locate(self, device_index: int, pc: int | None) -> CodeLocation | None:
        """The executable section (and its function) holding `pc` on a device; a root-level
        image, whose device is unknown, serves every device."""
        if pc is None:
            return None
        # Remembered per PC: a dump's faulting lanes share a few PCs, and a lane row of
        # every lane can record one (thousands of lookups over every module's sections).
        key = (device_index, pc)
        if key not in self._located:
            self._located[key] = self._find(device_index, pc)
        return self._located[key]

    def _find(self, device_index: int, pc: int) -> CodeLocation | None:
        for loaded in self.modules():
            if loaded.module.device_index not in (device_index, None):
                continue
            code = loaded.summary.find_code(pc)
            if code is not None:
                return CodeLocation(
                    loaded.module,
                    code.name,
                    code.address,
                    pc - code.address,
                    code.function,
                )
        return None


def find_faults(core: Coredump, code_map: CodeMap | None = None) -> tuple[Fault, ...]:
    """Every fault the dump records, each located in the dump's code when an image holds it.

    Args:
        core: An open dump.
        code_map: Its code map, when the caller has one already (images are read once).
    """
    return read_faults(core, (code_map or CodeMap(core)).locate)
