"""The native coredump reader: `open_coredump(path)` and the `Coredump` handle.

Opening reads the ELF header, the section headers (in bulk) and the device table.
Everything else is decoded when asked: the SMs of a device, the lanes of a warp, the
registers of a lane. The hierarchy is followed through `sh_link` (the parent table's
section) and `sh_info` (the row in it), and every link is checked against the section
type it must name, so a corrupt or cyclic link is reported, never followed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

from postmortem.coredump import tables as t
from postmortem.coredump.elf import DumpFile, SectionTable, open_dump_file, read_identity
from postmortem.coredump.index import TableIndex
from postmortem.coredump.rows import (
    Row,
    make_context,
    make_cta,
    make_device,
    make_grid,
    make_lane,
    make_metadata,
    make_sm,
    make_warp,
)
from postmortem.coredump.survey import Damage
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
from postmortem.urls import as_dump_path

# Register-like sections are read up to this many 32-bit words: R0-R255 and more, whatever
# size a header claims.
_MAX_WORDS = 1024
# Kernel parameters are at most 32,764 bytes (CUDA 12.1's limit).
_MAX_PARAM_BYTES = 1 << 16
_MEMORY_KINDS = {
    t.GLOBAL_MEM: "global",
    t.MANAGED_MEM: "managed",
}


def _whole(row: Row, *names: str) -> tuple[int, ...] | None:
    """The fields `names` of a row, or None when the row is too short to hold them all."""
    found = tuple(row.get(name) for name in names)
    return None if None in found else found  # type: ignore[return-value]


MAX_IMAGE_BYTES = 256 << 20
"""The largest module image read: PyTorch's biggest sm_90 cubin is 10 MiB, NCCL's 106 MiB."""


def open_coredump(path: str | Path) -> Coredump:
    """Open a CUDA GPU coredump (plain or compressed) for reading.

    Args:
        path: the `.nvcudmp` file, or its URL in an object store (`s3://bucket/core.nvcudmp`,
            any fsspec URL; needs the `remote` extra): then only the byte ranges the
            reading needs are fetched.

    Returns:
        An open `Coredump`; use it as a context manager or call `close()`.

    Raises:
        PostmortemError: the file is unreadable, not a CUDA coredump, truncated or corrupt.
    """
    return Coredump(as_dump_path(path))


class Coredump:
    """An open coredump. Decodes tables on demand; never writes to the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open_dump_file(path)
        self._bad_strings: list[str] = []
        self._all_modules: tuple[Module, ...] | None = None
        self._image_index: dict[int, dict[tuple[int, int], int]] = {}
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
        """True when the file was compressed (and was decompressed privately)."""
        return self._file.compressed

    @property
    def codec(self) -> str | None:
        """ "gzip", "zstd" or "xz" for a compressed file; None for a plain one."""
        return self._file.codec

    @property
    def file_size(self) -> int:
        """Size in bytes of the (decompressed) dump."""
        return self._file.size

    def string(self, offset: int, what: str) -> str | None:
        # A bad offset costs one name, not the dump.
        try:
            return self.sections.string(offset, what)
        except CorruptSection as error:
            self._bad_strings.append(f"{what} {error.reason}")
            return None

    @property
    def damage(self) -> tuple[Damage, ...]:
        """What the reader set aside or read only in part, and what that cost."""
        return self.tables.survey.damage

    @property
    def string_problems(self) -> tuple[str, ...]:
        """Names whose `.strtab` offsets could not be read (so they are unknown)."""
        return tuple(dict.fromkeys(self._bad_strings))

    # -- the hierarchy --------------------------------------------------------------

    def _read_devices(self) -> tuple[Device, ...]:
        devices = []
        for section in self.tables.of_type(t.DEV_TABLE):
            for row, values in enumerate(self.tables.rows(int(section), t.DEV_TABLE)):
                devices.append(make_device(values, RowRef(int(section), row), self.string))
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
            device = self.tables.parent_of(int(section))
            for row, values in enumerate(self.tables.rows(int(section), t.CTX_TABLE)):
                found.append(make_context(values, RowRef(int(section), row), device.row))
        return tuple(found)

    def modules(self, context: Context) -> tuple[Module, ...]:
        """The modules loaded in a context, with their images."""
        return tuple(
            Module(
                values.get("module_handle"),
                context.context_id,
                context.device_index,
                self._image(ref, t.RELF_IMG),
                self._image(ref, t.ELF_IMG),
                ref,
            )
            for ref, values in self.tables.rows_under(context.ref, t.MOD_TABLE)
        )

    def root_modules(self) -> tuple[Module, ...]:
        """Images at the root of the dump (no module row names them): modules of unknown
        handle, context and device, as other producers write them."""
        return tuple(
            Module(
                None, None, None,
                Image(section, int(self.tables.survey.size[section]), True)
                if int(self.sections.type[section]) == t.RELF_IMG else None,
                Image(section, int(self.tables.survey.size[section]), False)
                if int(self.sections.type[section]) == t.ELF_IMG else None,
                RowRef(section, 0),
            )
            for section in sorted(self.tables.survey.root_images)
        )  # fmt: skip

    def all_modules(self) -> tuple[Module, ...]:
        """Every module of every context, then the root-level images (read once)."""
        if self._all_modules is None:
            found = tuple(m for c in self.contexts() for m in self.modules(c))
            self._all_modules = found + self.root_modules()
        return self._all_modules

    def _image(self, module: RowRef, image_type: int) -> Image | None:
        # A module table may hold thousands of rows: one dict per image type, not a search
        # per row.
        index = self._image_index.get(image_type)
        if index is None:
            link, info = self.sections.link, self.sections.info
            index = {}
            for section in map(int, self.tables.attached(image_type)):
                # The first in file order.
                index.setdefault((int(link[section]), int(info[section])), section)
            self._image_index[image_type] = index
        found = index.get((module.section, module.row))
        if found is None:
            return None
        return Image(found, int(self.tables.survey.size[found]), image_type == t.RELF_IMG)

    def image_bytes(self, image: Image) -> bytes:
        """The cubin bytes of a module image.

        Raises:
            CorruptSection: the image is larger than any cubin (`MAX_IMAGE_BYTES`): a header
                pointing into a hole of zeros, whose bytes would be copied into memory.
        """
        if image.size_bytes > MAX_IMAGE_BYTES:
            raise CorruptSection(
                self.path, self.sections.label(image.section), "sh_size", image.size_bytes,
                f"larger than any cubin (at most {MAX_IMAGE_BYTES >> 20} MiB of an image are read)",
            )  # fmt: skip
        return self.tables.data(image.section)

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
        return None if section is None else self.tables.data(section, _MAX_PARAM_BYTES)

    def constbanks(self, grid: Grid) -> tuple[Constbank, ...]:
        """The grid's constant banks (r550+); rows too short to say all three are skipped."""
        found = (
            _whole(values, "bank_id", "addr", "size")
            for section in self.tables.children(grid.ref, t.CB_TABLE)
            for values in self.tables.rows(section, t.CB_TABLE)
        )
        return tuple(Constbank(*fields) for fields in found if fields is not None)

    def sms(self, device: Device) -> tuple[SM, ...]:
        """The SMs of a device that the dump holds."""
        return tuple(
            make_sm(values, device.index, ref, self.string)
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
            make_warp(values, cta, ref, self.string)
            for ref, values in self.tables.rows_under(cta.ref, t.WP_TABLE)
        )

    def lanes(self, warp: Warp) -> tuple[Lane, ...]:
        """The lanes (threads) of a warp: rows whose lane id the valid-lanes mask holds."""
        found = (
            make_lane(values, warp, ref)
            for ref, values in self.tables.rows_under(warp.ref, t.LN_TABLE)
        )
        return tuple(lane for lane in found if warp.holds_lane(lane.lane))

    def find_lane_at(self, warp: Warp, pc: int) -> Lane | None:
        """The first lane of a warp whose PC is `pc`: one row made, not the warp's 32."""
        for ref, values in self.tables.rows_under(warp.ref, t.LN_TABLE):
            if values.get("virtual_pc") != pc:
                continue
            lane = make_lane(values, warp, ref)
            if warp.holds_lane(lane.lane):
                return lane
        return None

    def iter_warps(self, device: Device) -> Iterator[Warp]:
        """Every warp of a device, SM by SM."""
        for sm in self.sms(device):
            for cta in self.ctas(sm):
                yield from self.warps(cta)

    # -- per-lane and per-warp data ---------------------------------------------------

    def _words(self, parent: RowRef, section_type: int) -> tuple[int, ...] | None:
        section = self.tables.only_child(parent, section_type)
        return None if section is None else _uint32s(self.tables.data(section, _MAX_WORDS * 4))

    def registers(self, lane: Lane) -> tuple[int, ...] | None:
        """R0..Rn of a lane as uint32, or None when the dump holds none."""
        return self._words(lane.ref, t.DEV_REGS)

    def registers_of(
        self, lanes: Sequence[Lane], count: int = _MAX_WORDS
    ) -> list[tuple[int, ...] | None]:
        """`registers` of each lane, their tables found in one query; only R0..R(count-1) (an
        address needs two of a lane's 255, and a grid-wide fault has 270,000 lanes)."""
        sections = self.tables.first_children([lane.ref for lane in lanes], t.DEV_REGS)
        found = self.tables.data_of(sections, 4 * min(count, _MAX_WORDS))
        return [None if data is None else _uint32s(data) for data in found]

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
        found = (
            _whole(values, "level", "return_address", "virtual_return_address")
            for values in self.tables.rows(section, t.BT)
        )
        return tuple(BacktraceFrame(*fields) for fields in found if fields is not None)

    def local_memory(self, lane: Lane) -> bytes | None:
        """The lane's local memory, when captured."""
        section = self.tables.only_child(lane.ref, t.LOCAL_MEM)
        return None if section is None else self.tables.data(section)

    def shared_memory(self, cta: CTA | Warp) -> bytes | None:
        """The CTA's shared memory (for a warp: its own CTA's), when captured."""
        ref = cta.ref if isinstance(cta, CTA) else self.tables.parent_of(cta.ref.section)
        section = self.tables.only_child(ref, t.SHARED_MEM)
        return None if section is None else self.tables.data(section)

    # -- whole-dump facts -----------------------------------------------------------

    @property
    def has_gpu_state(self) -> bool:
        """True when the dump holds a warp, or an SM row that reports an exception."""
        if self.tables.row_count(t.WP_TABLE):
            return True
        return bool(self.tables.nonzero_rows(t.SM_TABLE, "exception"))

    @property
    def metadata(self) -> Metadata | None:
        """The metadata row (r565+), or None."""
        for section in self.tables.of_type(t.META_DATA):
            rows = self.tables.rows(int(section), t.META_DATA)
            if len(rows):
                return make_metadata(rows[0], self.string)
        return None

    def memory_segments(self) -> tuple[MemorySegment, ...]:
        """Captured global and managed memory, by address (the bytes stay in the file)."""
        found = [
            MemorySegment(
                kind,
                self.sections.header_field(int(section), "addr"),
                int(self.tables.survey.size[section]),
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
                self._file.ensure(data_offset, size)
                return bytes(self._file.map[data_offset : data_offset + size])
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
        layouts = self.table_layouts()
        generations = [x.generation for x in layouts if not x.generation.startswith("short")]
        newest = max(generations or ["r346"], key=t.generation_rank)
        short = [x.table for x in layouts if x.generation.startswith("short")]
        if not short:
            return newest
        tables = ", ".join(short[:-1]) + " and " + short[-1] if len(short) > 1 else short[0]
        return f"{newest} (short rows in the {tables})"

    def section_counts(self) -> dict[str, int]:
        """How many sections of each known type the dump holds."""
        counts = self.tables.survey.kind_counts()
        return {
            t.SECTION_TYPE_NAMES[t.SHT_LOUSER + code]: n
            for code, n in enumerate(counts)
            if n and t.SHT_LOUSER + code in t.SECTION_TYPE_NAMES
        }

    @property
    def file(self) -> DumpFile:
        """The mapped file (for readers of embedded images)."""
        return self._file


def _uint32s(data: bytes) -> tuple[int, ...]:
    """The little-endian uint32 words of `data` (a trailing part word is left out)."""
    return struct.unpack_from(f"<{len(data) // 4}I", data)
