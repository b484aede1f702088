"""Where code is in a dump: PC → module, section and function, over its relocated images.

It sits above the reader (`coredump/`) and the cubin layer (`cubin/`): it reads each
module's relocated image with the cubin inspector, and hands the reader a `locate`
function, so that faults come back located. Modules are its keys: a module is its
device, context, handle and images, so two devices' modules that share a handle value,
a handle of 0, or a root-level image with no handle at all, are told apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from postmortem.coredump.faults import read_faults
from postmortem.coredump.reader import MAX_IMAGE_BYTES, Coredump
from postmortem.cubin.elfimage import ElfImage
from postmortem.cubin.inspect import CubinSummary, summarize_cubin
from postmortem.errors import MalformedElf, NvInfoError
from postmortem.model import CodeLocation, Fault, Module

if TYPE_CHECKING:
    from postmortem.cubin.dwarfinfo import InlineTree
    from postmortem.cubin.lines import LineTable
    from postmortem.cubin.nvinfo import ToolkitInfo

# The decoders of notes, line tables and .debug_info are imported where they are used:
# `info` and a scan's first look need none of them (they are a fifth of `info`'s start-up).

__all__ = ["CodeMap", "LoadedModule", "find_faults"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LoadedModule:
    """A module with a relocated image, and what that image holds."""

    module: Module
    summary: CubinSummary


class CodeMap:
    """PC → module, section and function, over the relocated images of a dump.

    An image that is not a readable cubin is set aside (`unreadable`), not fatal: the
    rest of the dump's code still maps.
    """

    def __init__(self, core: Coredump) -> None:
        self._core = core
        self._loaded: list[LoadedModule] | None = None
        self._by_module: dict[Module, LoadedModule] | None = None
        self._toolkits: dict[Module, ToolkitInfo | None] = {}
        self._line_tables: dict[Module, LineTable | None] = {}
        self._inline_trees: dict[Module, InlineTree | None] = {}
        self._elf_images: dict[Module, ElfImage | None] = {}
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
                    summary = self._summarize(image.section)
                except MalformedElf as error:
                    self.unreadable.append((module, str(error)))
                    continue
                self._loaded.append(LoadedModule(module, summary))
        return self._loaded

    def _summarize(self, section: int) -> CubinSummary:
        core = self._core
        offset, size = int(core.sections.offset[section]), int(core.tables.survey.size[section])
        fetch = core.file.ensure if core.file.sparse else None
        return summarize_cubin(core.file.map, offset, size, fetch)

    def find(self, module: Module) -> LoadedModule | None:
        """The loaded module, if the dump holds a readable relocated image for it."""
        if self._by_module is None:
            self._by_module = {loaded.module: loaded for loaded in self.modules()}
        return self._by_module.get(module)

    def summary(self, module: Module) -> CubinSummary | None:
        """What the module's relocated image holds."""
        loaded = self.find(module)
        return loaded.summary if loaded else None

    def image_bytes(self, module: Module) -> bytes:
        """The module's relocated cubin (empty when the dump holds none)."""
        image = module.relocated_image
        return self._core.image_bytes(image) if image and self.find(module) else b""

    def toolkit(self, module: Module) -> ToolkitInfo | None:
        """How the module's image was built (its tkinfo/cuinfo notes), read once; None when
        it has none or they cannot be read."""
        if module not in self._toolkits:
            from postmortem.cubin.nvinfo import read_toolkit_info

            image = self.image_bytes(module)
            try:
                self._toolkits[module] = read_toolkit_info(image) if image else None
            except NvInfoError:
                self._toolkits[module] = None
        return self._toolkits[module]

    def line_table(self, module: Module) -> LineTable | None:
        """The module's decoded `.debug_line` (with NVIDIA's inline contexts), read once;
        None without line info, or when it cannot be decoded (`unreadable_lines` says why)."""
        if module not in self._line_tables:
            from postmortem.cubin.lines import read_line_table

            self._line_tables[module] = self._debug(module, read_line_table)
        return self._line_tables[module]

    def inline_tree(self, module: Module) -> InlineTree | None:
        """The inlined calls of the module's `.debug_info` (a `-G` build), read once; None
        without them, or when they cannot be read (`unreadable_lines` says why)."""
        if module not in self._inline_trees:
            from postmortem.cubin.dwarfinfo import read_inline_tree

            self._inline_trees[module] = self._debug(module, read_inline_tree)
        return self._inline_trees[module]

    def elf_image(self, module: Module) -> ElfImage | None:
        """The module's relocated image as sections and symbols, read once; None when the
        dump holds none.

        Raises:
            MalformedElf: The image's section table cannot be read.
        """
        if module not in self._elf_images:
            image = self.image_bytes(module)
            self._elf_images[module] = ElfImage(image) if image else None
        return self._elf_images[module]

    def _debug(self, module: Module, read: Callable[[ElfImage], T | None]) -> T | None:
        # One ElfImage of the image serves the line table, the inline tree and the strings.
        try:
            elf = self.elf_image(module)
            return read(elf) if elf is not None else None
        except MalformedElf as error:
            self.unreadable_lines.setdefault(module, str(error))
            return None

    def locate(self, device_index: int, pc: int | None) -> CodeLocation | None:
        """The executable section (and its function) holding `pc` on a device; a root-level
        image, whose device is unknown, serves every device."""
        if pc is None:
            return None
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
