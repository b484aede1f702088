"""The native coredump reader: `open_coredump(path)` and the `Coredump` handle.

Opening reads the ELF header, the section headers (in bulk) and the device table.
Everything else is decoded when asked: the SMs of a device, the lanes of a warp, the
registers of a lane. The hierarchy is followed through `sh_link` (the parent table's
section) and `sh_info` (the row in it), and every link is checked against the section
type it must name, so a corrupt or cyclic link is reported, never followed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.elf import MappedFile, SectionTable, read_identity
from postmortem.coredump.index import TableIndex
from postmortem.coredump.rows import (
    make_context,
    make_cta,
    make_device,
    make_grid,
    make_lane,
    make_metadata,
    make_sm,
    make_warp,
)
from postmortem.errors import CorruptSection
from postmortem.model import (
    CTA,
    SM,
    BacktraceFrame,
    Constbank,
    Context,
    Device,
    Grid,
    Image,
    Lane,
    MemorySegment,
    Metadata,
    Module,
    RowRef,
    TableLayout,
    Warp,
)

_MEMORY_KINDS = {
    t.GLOBAL_MEM: "global",
    t.MANAGED_MEM: "managed",
}


def open_coredump(path: str | Path) -> Coredump:
    """Open a CUDA GPU coredump (plain or gzip-compressed) for reading.

    Args:
        path: the `.nvcudmp` file.

    Returns:
        An open `Coredump`; use it as a context manager or call `close()`.

    Raises:
        PostmortemError: the file is unreadable, not a CUDA coredump, truncated or corrupt.
    """
    return Coredump(Path(path))


class Coredump:
    """An open coredump. Decodes tables on demand; never writes to the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = MappedFile(path)
        try:
            self.identity = read_identity(self._file)
            self.sections = SectionTable(self._file, self.identity)
            self.tables = TableIndex(self._file, self.sections)
            self.devices: tuple[Device, ...] = self._read_devices()
        except BaseException:
            self._file.close()
            raise

    # -- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Release the memory map (and the decompressed copy of a gzip dump)."""
        self.tables.clear()
        self._file.close()

    def __enter__(self) -> Coredump:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def compressed(self) -> bool:
        """True when the file was gzip-compressed (and was decompressed privately)."""
        return self._file.compressed

    @property
    def file_size(self) -> int:
        """Size in bytes of the (decompressed) dump."""
        return self._file.size

    def _string(self, offset: int, what: str) -> str:
        return self.sections.string(offset, what)

    # -- the hierarchy --------------------------------------------------------------

    def _read_devices(self) -> tuple[Device, ...]:
        devices = []
        for section in self.tables.of_type(t.DEV_TABLE):
            for row, values in enumerate(self.tables.rows(int(section), t.DEV_TABLE)):
                devices.append(make_device(values, RowRef(int(section), row), self._string))
        return tuple(devices)

    def device(self, index: int) -> Device:
        """The device of device-table row `index`."""
        for device in self.devices:
            if device.index == index:
                return device
        raise CorruptSection(self.path, ".cudbg.devtbl", "device index", index, "no such row")

    def contexts(self) -> tuple[Context, ...]:
        """Every context of every device."""
        found = []
        for section in self.tables.of_type(t.CTX_TABLE):
            for row, values in enumerate(self.tables.rows(int(section), t.CTX_TABLE)):
                found.append(make_context(values, RowRef(int(section), row)))
        return tuple(found)

    def modules(self, context: Context) -> tuple[Module, ...]:
        """The modules loaded in a context, with their images."""
        return tuple(
            Module(
                int(values["module_handle"]),
                context.context_id,
                context.device_index,
                self._image(ref, t.RELF_IMG),
                self._image(ref, t.ELF_IMG),
                ref,
            )
            for ref, values in self.tables.rows_under(context.ref, t.MOD_TABLE)
        )

    def all_modules(self) -> tuple[Module, ...]:
        """Every module of every context."""
        return tuple(m for c in self.contexts() for m in self.modules(c))

    def _image(self, module: RowRef, image_type: int) -> Image | None:
        section = self.tables.only_child(module, image_type)
        if section is None:
            return None
        return Image(section, int(self.sections.size[section]), image_type == t.RELF_IMG)

    def image_bytes(self, image: Image) -> bytes:
        """The cubin bytes of a module image."""
        return self.sections.data(image.section)

    def grids(self, device: Device) -> tuple[Grid, ...]:
        """The grids (kernel launches) present on a device."""
        return tuple(
            make_grid(values, device.index, ref)
            for ref, values in self.tables.rows_under(device.ref, t.GRID_TABLE)
        )

    def find_grid(self, device_index: int, grid_id: int) -> Grid | None:
        """The grid with `grid_id` on a device (how a CTA or a fault names its launch)."""
        device = self.device(device_index)
        return next((g for g in self.grids(device) if g.grid_id == grid_id), None)

    def params(self, grid: Grid) -> bytes | None:
        """The grid's kernel parameter bytes, when the dump holds them."""
        section = self.tables.only_child(grid.ref, t.PARAM_MEM)
        return None if section is None else self.sections.data(section)

    def constbanks(self, grid: Grid) -> tuple[Constbank, ...]:
        """The grid's constant banks (r550+)."""
        return tuple(
            Constbank(int(values["bank_id"]), int(values["addr"]), int(values["size"]))
            for section in self.tables.children(grid.ref, t.CB_TABLE)
            for values in self.tables.rows(section, t.CB_TABLE)
        )

    def sms(self, device: Device) -> tuple[SM, ...]:
        """The SMs of a device that the dump holds."""
        return tuple(
            make_sm(values, device.index, ref, self._string)
            for ref, values in self.tables.rows_under(device.ref, t.SM_TABLE)
        )

    def ctas(self, sm: SM) -> tuple[CTA, ...]:
        """The CTAs resident on an SM."""
        return tuple(
            make_cta(values, sm, ref) for ref, values in self.tables.rows_under(sm.ref, t.CTA_TABLE)
        )

    def warps(self, cta: CTA) -> tuple[Warp, ...]:
        """The warps of a CTA."""
        return tuple(
            make_warp(values, cta, ref, self._string)
            for ref, values in self.tables.rows_under(cta.ref, t.WP_TABLE)
        )

    def lanes(self, warp: Warp) -> tuple[Lane, ...]:
        """The lanes (threads) of a warp."""
        return tuple(
            make_lane(values, warp, ref)
            for ref, values in self.tables.rows_under(warp.ref, t.LN_TABLE)
        )

    def iter_warps(self, device: Device) -> Iterator[Warp]:
        """Every warp of a device, SM by SM."""
        for sm in self.sms(device):
            for cta in self.ctas(sm):
                yield from self.warps(cta)

    # -- per-lane and per-warp data ---------------------------------------------------

    def _words(self, parent: RowRef, section_type: int) -> tuple[int, ...] | None:
        section = self.tables.only_child(parent, section_type)
        if section is None:
            return None
        data = self.sections.data(section)
        return tuple(np.frombuffer(data, "<u4", len(data) // 4).tolist())

    def registers(self, lane: Lane) -> tuple[int, ...] | None:
        """R0..Rn of a lane as uint32, or None when the dump holds none."""
        return self._words(lane.ref, t.DEV_REGS)

    def predicates(self, lane: Lane) -> tuple[int, ...] | None:
        """P0..Pn of a lane, or None."""
        return self._words(lane.ref, t.DEV_PRED)

    def uniform_registers(self, warp: Warp) -> tuple[int, ...] | None:
        """UR0..URn of a warp (r400+), or None."""
        return self._words(warp.ref, t.DEV_UREGS)

    def uniform_predicates(self, warp: Warp) -> tuple[int, ...] | None:
        """UP0..UPn of a warp (r400+), or None."""
        return self._words(warp.ref, t.DEV_UPRED)

    def convergence_barriers(self, warp: Warp) -> tuple[int, ...] | None:
        """The warp's convergence-barrier lane masks (r575+), or None."""
        return self._words(warp.ref, t.CBU_BAR)

    def backtrace(self, lane: Lane) -> tuple[BacktraceFrame, ...]:
        """The lane's device call stack, outermost call last; empty when absent."""
        section = self.tables.only_child(lane.ref, t.BT)
        if section is None:
            return ()
        return tuple(
            BacktraceFrame(
                int(v["level"]), int(v["return_address"]), int(v["virtual_return_address"])
            )
            for v in self.tables.rows(section, t.BT)
        )

    def local_memory(self, lane: Lane) -> bytes | None:
        """The lane's local memory, when captured."""
        section = self.tables.only_child(lane.ref, t.LOCAL_MEM)
        return None if section is None else self.sections.data(section)

    def shared_memory(self, cta: CTA | Warp) -> bytes | None:
        """The CTA's shared memory (for a warp: its own CTA's), when captured."""
        ref = cta.ref if isinstance(cta, CTA) else self.tables.parent_of(cta.ref.section)
        section = self.tables.only_child(ref, t.SHARED_MEM)
        return None if section is None else self.sections.data(section)

    # -- whole-dump facts -----------------------------------------------------------

    @property
    def metadata(self) -> Metadata | None:
        """The metadata row (r565+), or None."""
        for section in self.tables.of_type(t.META_DATA):
            rows = self.tables.rows(int(section), t.META_DATA)
            if len(rows):
                return make_metadata(rows[0], self._string)
        return None

    def memory_segments(self) -> tuple[MemorySegment, ...]:
        """Captured global and managed memory, by address (the bytes stay in the file)."""
        found = [
            MemorySegment(
                kind,
                int(self.sections.addr[section]),
                int(self.sections.size[section]),
                int(section),
            )
            for section_type, kind in _MEMORY_KINDS.items()
            for section in self.tables.of_type(section_type)
        ]
        return tuple(sorted(found, key=lambda s: s.address))

    def read_memory(self, address: int, size: int) -> bytes | None:
        """Bytes of captured global/managed memory, or None when not captured."""
        for segment in self.memory_segments():
            if (
                segment.address <= address
                and address + size <= segment.address + segment.size_bytes
            ):
                data_offset = int(self.sections.offset[segment.section]) + address - segment.address
                return self._file.read(data_offset, size, f"section {segment.section}")
        return None

    def table_layouts(self) -> tuple[TableLayout, ...]:
        """The row size of each table kind in this dump, and the generation it implies."""
        found: dict[str, TableLayout] = {}
        for section_type, layout in t.LAYOUTS.items():
            for section in self.tables.of_type(section_type)[:1]:
                entsize = int(self.sections.entsize[section])
                found[layout.table] = TableLayout(layout.table, entsize, layout.generation(entsize))
        return tuple(found.values())

    @property
    def layout_generation(self) -> str:
        """The newest driver generation any table's row size shows (the dump's writer)."""
        generations = [layout.generation for layout in self.table_layouts()] or ["r346"]
        return max(generations, key=t.generation_rank)

    def section_counts(self) -> dict[str, int]:
        """How many sections of each known type the dump holds."""
        types, counts = np.unique(self.sections.type, return_counts=True)
        return {
            t.SECTION_TYPE_NAMES[int(k)]: int(n)
            for k, n in zip(types, counts, strict=True)
            if int(k) in t.SECTION_TYPE_NAMES
        }

    @property
    def file(self) -> MappedFile:
        """The mapped file (for readers of embedded images)."""
        return self._file
