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
from typing import Any

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.elf import SHT_NOBITS, MappedFile, SectionTable, read_identity
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
            self._children_index: dict[int, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}
            self._rows_cache: dict[int, np.ndarray[Any, Any]] = {}
            self._validate()
            self.devices: tuple[Device, ...] = self._read_devices()
        except BaseException:
            self._file.close()
            raise

    # -- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Release the memory map (and the decompressed copy of a gzip dump)."""
        self._rows_cache.clear()
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

    # -- generic table access -------------------------------------------------------

    def sections_of_type(self, section_type: int) -> np.ndarray[Any, Any]:
        """Indices of every section of `section_type`, in file order."""
        return np.flatnonzero(self.sections.type == section_type)

    def rows(self, section: int, section_type: int) -> np.ndarray[Any, Any]:
        """The decoded rows of a table section, with only the fields its stride holds."""
        cached = self._rows_cache.get(section)
        if cached is not None:
            return cached
        rows = self._decode(section, section_type)
        if len(self._rows_cache) > 4096:
            self._rows_cache.clear()
        self._rows_cache[section] = rows
        return rows

    def _decode(self, section: int, section_type: int) -> np.ndarray[Any, Any]:
        layout = t.LAYOUTS[section_type]
        entsize, size = int(self.sections.entsize[section]), int(self.sections.size[section])
        if entsize < layout.min_size:
            raise CorruptSection(
                self.path, self.sections.label(section), "sh_entsize", entsize,
                f"a {layout.table} row is at least {layout.min_size} bytes",
            )  # fmt: skip
        if size % entsize:
            raise CorruptSection(
                self.path,
                self.sections.label(section),
                "sh_size",
                size,
                f"not a multiple of sh_entsize {entsize}",
            )
        return self.sections.view(section, layout.dtype(entsize), size // entsize)

    def _validate(self) -> None:
        """Check every section's bounds, table stride and parent link, in bulk.

        Done once at open, over the header columns, so that corruption anywhere is
        reported up front rather than only when a report happens to walk past it.
        """
        s, size = self.sections, self.file_size
        in_file = s.type != SHT_NOBITS
        past = in_file & ((s.offset > size) | (s.size > size - np.minimum(s.offset, size)))
        for section in np.flatnonzero(past)[:1]:
            self.sections.data(int(section))  # raises TruncatedDump with the numbers
        rows = np.zeros(s.count, dtype=np.uint64)
        for section_type, layout in t.LAYOUTS.items():
            tables = self.sections_of_type(section_type)
            bad = (s.entsize[tables] < layout.min_size) | (
                s.size[tables] % np.maximum(s.entsize[tables], 1) != 0
            )
            for section in tables[bad][:1]:
                self._decode(int(section), section_type)  # raises CorruptSection
            rows[tables] = s.size[tables] // np.maximum(s.entsize[tables], 1)
        for child_type, parent_type in t.PARENT_TYPE.items():
            members = self.sections_of_type(child_type)
            links, infos = s.link[members], s.info[members]
            wrong = (links >= s.count) | (s.type[np.minimum(links, s.count - 1)] != parent_type)
            wrong |= infos >= rows[np.minimum(links, s.count - 1)]
            for section in members[wrong][:1]:
                self.parent_of(int(section))  # raises CorruptSection naming the link

    def nonzero_rows(self, section_type: int, field: str) -> list[RowRef]:
        """Rows, across every table of `section_type`, whose `field` is non-zero.

        One gather over the mapped file reads just that column of every table, so finding
        the few faulting lanes among 270,000 costs one pass, not a Python object per row.
        Tables whose stride lacks the field are skipped.
        """
        s, column = self.sections, t.LAYOUTS[section_type].field(field)
        tables = self.sections_of_type(section_type)
        tables = tables[s.entsize[tables] >= column.end]
        counts = (s.size[tables] // s.entsize[tables]).astype(np.int64)
        total = int(counts.sum())
        if total == 0:
            return []
        owner = np.repeat(np.arange(len(tables)), counts)
        row = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        start = s.offset[tables].astype(np.int64)[owner] + column.offset
        positions = start + row * s.entsize[tables].astype(np.int64)[owner]
        raw = np.frombuffer(self._file.map, np.uint8)
        values = raw[positions[:, None] + np.arange(column.end - column.offset)]
        del raw  # release the export so the map can close
        return [
            RowRef(int(tables[owner[i]]), int(row[i])) for i in np.flatnonzero(values.any(axis=1))
        ]

    def _children(self, parent: RowRef, child_type: int) -> list[int]:
        """Sections of `child_type` whose sh_link/sh_info name `parent`, in file order."""
        index = self._children_index.get(child_type)
        if index is None:
            members = self.sections_of_type(child_type)
            keys = (self.sections.link[members].astype(np.uint64) << np.uint64(32)) | (
                self.sections.info[members].astype(np.uint64)
            )
            order = np.argsort(keys, kind="stable")
            index = (keys[order], members[order])
            self._children_index[child_type] = index
        keys, members = index
        key = np.uint64((parent.section << 32) | parent.row)
        lo, hi = np.searchsorted(keys, key, "left"), np.searchsorted(keys, key, "right")
        return [int(s) for s in members[lo:hi]]

    def parent_of(self, section: int) -> RowRef:
        """The row a section hangs from, checked: right table type, row in range."""
        section_type = int(self.sections.type[section])
        expected = t.PARENT_TYPE[section_type]
        link, info = int(self.sections.link[section]), int(self.sections.info[section])
        label = self.sections.label(section)
        if link >= self.sections.count or int(self.sections.type[link]) != expected:
            found = "no section" if link >= self.sections.count else self._type_name(link)
            raise CorruptSection(
                self.path, label, "sh_link", link,
                f"must name a {t.SECTION_TYPE_NAMES[expected]}, found {found}",
            )  # fmt: skip
        count = len(self.rows(link, expected))
        if info >= count:
            raise CorruptSection(
                self.path, label, "sh_info", info,
                f"row out of range: {self.sections.label(link)} has {count} rows",
            )  # fmt: skip
        return RowRef(link, info)

    def _type_name(self, section: int) -> str:
        section_type = int(self.sections.type[section])
        return t.SECTION_TYPE_NAMES.get(section_type, f"section type 0x{section_type:x}")

    def _rows_under(self, parent: RowRef, table_type: int) -> Iterator[tuple[RowRef, Any]]:
        """Every row of every table of `table_type` hanging from `parent`, with its ref."""
        for section in self._children(parent, table_type):
            for row, values in enumerate(self.rows(section, table_type)):
                yield RowRef(section, row), values

    def _only_child(self, parent: RowRef, child_type: int) -> int | None:
        children = self._children(parent, child_type)
        return children[0] if children else None

    def _string(self, offset: int, what: str) -> str:
        return self.sections.string(offset, what)

    # -- the hierarchy --------------------------------------------------------------

    def _read_devices(self) -> tuple[Device, ...]:
        devices = []
        for section in self.sections_of_type(t.DEV_TABLE):
            for row, values in enumerate(self.rows(int(section), t.DEV_TABLE)):
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
        for section in self.sections_of_type(t.CTX_TABLE):
            for row, values in enumerate(self.rows(int(section), t.CTX_TABLE)):
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
            for ref, values in self._rows_under(context.ref, t.MOD_TABLE)
        )

    def all_modules(self) -> tuple[Module, ...]:
        """Every module of every context."""
        return tuple(m for c in self.contexts() for m in self.modules(c))

    def _image(self, module: RowRef, image_type: int) -> Image | None:
        section = self._only_child(module, image_type)
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
            for ref, values in self._rows_under(device.ref, t.GRID_TABLE)
        )

    def params(self, grid: Grid) -> bytes | None:
        """The grid's kernel parameter bytes, when the dump holds them."""
        section = self._only_child(grid.ref, t.PARAM_MEM)
        return None if section is None else self.sections.data(section)

    def constbanks(self, grid: Grid) -> tuple[Constbank, ...]:
        """The grid's constant banks (r550+)."""
        return tuple(
            Constbank(int(values["bank_id"]), int(values["addr"]), int(values["size"]))
            for section in self._children(grid.ref, t.CB_TABLE)
            for values in self.rows(section, t.CB_TABLE)
        )

    def sms(self, device: Device) -> tuple[SM, ...]:
        """The SMs of a device that the dump holds."""
        return tuple(
            make_sm(values, device.index, ref, self._string)
            for ref, values in self._rows_under(device.ref, t.SM_TABLE)
        )

    def ctas(self, sm: SM) -> tuple[CTA, ...]:
        """The CTAs resident on an SM."""
        return tuple(
            make_cta(values, sm, ref) for ref, values in self._rows_under(sm.ref, t.CTA_TABLE)
        )

    def warps(self, cta: CTA) -> tuple[Warp, ...]:
        """The warps of a CTA."""
        return tuple(
            make_warp(values, cta, ref, self._string)
            for ref, values in self._rows_under(cta.ref, t.WP_TABLE)
        )

    def lanes(self, warp: Warp) -> tuple[Lane, ...]:
        """The lanes (threads) of a warp."""
        return tuple(
            make_lane(values, warp, ref) for ref, values in self._rows_under(warp.ref, t.LN_TABLE)
        )

    def iter_warps(self, device: Device) -> Iterator[Warp]:
        """Every warp of a device, SM by SM."""
        for sm in self.sms(device):
            for cta in self.ctas(sm):
                yield from self.warps(cta)

    # -- per-lane and per-warp data ---------------------------------------------------

    def _words(self, parent: RowRef, section_type: int) -> tuple[int, ...] | None:
        section = self._only_child(parent, section_type)
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
        section = self._only_child(lane.ref, t.BT)
        if section is None:
            return ()
        return tuple(
            BacktraceFrame(
                int(v["level"]), int(v["return_address"]), int(v["virtual_return_address"])
            )
            for v in self.rows(section, t.BT)
        )

    def local_memory(self, lane: Lane) -> bytes | None:
        """The lane's local memory, when captured."""
        section = self._only_child(lane.ref, t.LOCAL_MEM)
        return None if section is None else self.sections.data(section)

    def shared_memory(self, cta: CTA) -> bytes | None:
        """The CTA's shared memory, when captured."""
        section = self._only_child(cta.ref, t.SHARED_MEM)
        return None if section is None else self.sections.data(section)

    # -- whole-dump facts -----------------------------------------------------------

    @property
    def metadata(self) -> Metadata | None:
        """The metadata row (r565+), or None."""
        for section in self.sections_of_type(t.META_DATA):
            rows = self.rows(int(section), t.META_DATA)
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
            for section in self.sections_of_type(section_type)
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
            for section in self.sections_of_type(section_type)[:1]:
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
