"""Row layouts of the coredump tables, per driver generation, as data.

A table's row stride is its section's `sh_entsize`. Newer drivers append fields, so a
row is decoded by keeping exactly the fields that fit inside the stride: the others are
absent (None), never guessed. The offsets and sizes follow coredump-format.md, field by
field; the generation that introduced a field is recorded so a report can say which
driver layout a dump was written with.

Each kind also has a most-rows bound (`max_rows`), per parent row: a lane table holds one
warp's lanes (32), a warp table one block's warps (at most 32), a CTA table the blocks
resident on one SM (32 on Hopper and Blackwell), an SM table one GPU's SMs (148 on B200),
a grid table the launches alive on a device, a module table the modules of a context
(thousands in a Triton-heavy process). The bounds leave room above what hardware holds, and
keep a table that claims gigabytes of a sparse hole from costing more than that.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from functools import lru_cache

# Section types (sh_type), SHT_LOUSER + n.
SHT_LOUSER = 0x80000000
MANAGED_MEM = SHT_LOUSER + 1
GLOBAL_MEM = SHT_LOUSER + 2
LOCAL_MEM = SHT_LOUSER + 3
SHARED_MEM = SHT_LOUSER + 4
DEV_REGS = SHT_LOUSER + 5
ELF_IMG = SHT_LOUSER + 6
RELF_IMG = SHT_LOUSER + 7
BT = SHT_LOUSER + 8
DEV_TABLE = SHT_LOUSER + 9
CTX_TABLE = SHT_LOUSER + 10
SM_TABLE = SHT_LOUSER + 11
GRID_TABLE = SHT_LOUSER + 12
CTA_TABLE = SHT_LOUSER + 13
WP_TABLE = SHT_LOUSER + 14
LN_TABLE = SHT_LOUSER + 15
MOD_TABLE = SHT_LOUSER + 16
DEV_PRED = SHT_LOUSER + 17
PARAM_MEM = SHT_LOUSER + 18
DEV_UREGS = SHT_LOUSER + 19
DEV_UPRED = SHT_LOUSER + 20
CB_TABLE = SHT_LOUSER + 21
META_DATA = SHT_LOUSER + 22
CBU_BAR = SHT_LOUSER + 23

KIND_COUNT = CBU_BAR - SHT_LOUSER + 1
"""How many kind codes there are: 0 for a type not ours, then `sh_type - SHT_LOUSER`."""


def kind_code(section_type: int) -> int:
    """A section type as a small code (`sh_type - SHT_LOUSER` for ours, 0 for any other)."""
    code = section_type - SHT_LOUSER
    return code if 0 < code < KIND_COUNT else 0


SECTION_TYPE_NAMES: dict[int, str] = {
    MANAGED_MEM: "managed memory",
    GLOBAL_MEM: "global memory",
    LOCAL_MEM: "local memory",
    SHARED_MEM: "shared memory",
    DEV_REGS: "registers",
    ELF_IMG: "non-relocated image",
    RELF_IMG: "relocated image",
    BT: "backtrace",
    DEV_TABLE: "device table",
    CTX_TABLE: "context table",
    SM_TABLE: "SM table",
    GRID_TABLE: "grid table",
    CTA_TABLE: "CTA table",
    WP_TABLE: "warp table",
    LN_TABLE: "lane table",
    MOD_TABLE: "module table",
    DEV_PRED: "predicates",
    PARAM_MEM: "parameter memory",
    DEV_UREGS: "uniform registers",
    DEV_UPRED: "uniform predicates",
    CB_TABLE: "constbank table",
    META_DATA: "metadata",
    CBU_BAR: "convergence barriers",
}

# Which table a section's sh_link must name, per section type (the hierarchy).
PARENT_TYPE: dict[int, int] = {
    CTX_TABLE: DEV_TABLE,
    SM_TABLE: DEV_TABLE,
    GRID_TABLE: DEV_TABLE,
    MOD_TABLE: CTX_TABLE,
    CTA_TABLE: SM_TABLE,
    WP_TABLE: CTA_TABLE,
    LN_TABLE: WP_TABLE,
    ELF_IMG: MOD_TABLE,
    RELF_IMG: MOD_TABLE,
    LOCAL_MEM: LN_TABLE,
    DEV_REGS: LN_TABLE,
    DEV_PRED: LN_TABLE,
    BT: LN_TABLE,
    SHARED_MEM: CTA_TABLE,
    PARAM_MEM: GRID_TABLE,
    CB_TABLE: GRID_TABLE,
    DEV_UREGS: WP_TABLE,
    DEV_UPRED: WP_TABLE,
    CBU_BAR: WP_TABLE,
}


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a table row."""

    name: str
    """Our name for it (snake_case of the header's name)."""
    offset: int
    """Byte offset inside the row."""
    fmt: str
    """Its width: 'u8' (uint64), 'u4' (uint32), little-endian."""
    since: str
    """Driver generation that introduced it (e.g. "r346")."""

    @property
    def end(self) -> int:
        return self.offset + int(self.fmt[1])


@dataclass(frozen=True, slots=True)
class Layout:
    """The row layout of one table kind across every generation we know."""

    table: str
    """Human name of the table ("warp table")."""
    fields: tuple[Field, ...]
    """Every field of the newest known layout, in offset order."""
    sizes: tuple[tuple[int, str], ...]
    """Known row sizes and the generation that writes each, oldest first."""
    max_rows: int
    """The most rows one table of this kind can mean (per parent row): more is corruption,
    and only this many are read, so work stays bounded whatever `sh_size` claims."""

    @property
    def min_size(self) -> int:
        return self.sizes[0][0]

    def generation(self, entsize: int) -> str:
        """What rows of `entsize` bytes are, named by what they hold: the generation that
        writes that size ("r575"), "newer than r615", "r346 + 8 bytes" between two known
        sizes, or "short rows (8 of 104 bytes)" below the first release's size."""
        if entsize < self.min_size:
            return f"short rows ({entsize} of {self.min_size} bytes)"
        size, label = max(s for s in self.sizes if s[0] <= entsize)
        if entsize == size:
            return label
        if size == self.sizes[-1][0]:
            return f"newer than {label}"
        return f"{label} + {entsize - size} bytes"

    def present(self, entsize: int) -> tuple[Field, ...]:
        """The fields that fit inside a row of `entsize` bytes."""
        return tuple(f for f in self.fields if f.end <= entsize)

    def row_format(self, entsize: int) -> RowFormat:
        """How rows of `entsize` bytes decode: the fields present, by name."""
        return _row_format(self, entsize)

    def field(self, name: str) -> Field:
        """The field called `name`."""
        return next(f for f in self.fields if f.name == name)


@dataclass(frozen=True, slots=True)
class RowFormat:
    """The fields a row of one stride holds, and the struct that unpacks them."""

    names: tuple[str, ...]
    """The fields present, in offset order."""
    record: struct.Struct
    """Unpacks one row (its size is the stride) into the values of `names`."""


@lru_cache(maxsize=256)
def _row_format(layout: Layout, entsize: int) -> RowFormat:
    fields = layout.present(entsize)
    codes, at = ["<"], 0
    for field in fields:  # in offset order, never overlapping: pad bytes between them
        codes.append(f"{field.offset - at}x{'Q' if field.fmt == 'u8' else 'I'}")
        at = field.end
    codes.append(f"{entsize - at}x")
    return RowFormat(tuple(f.name for f in fields), struct.Struct("".join(codes)))


def generation_rank(generation: str) -> float:
    """Order of a generation label ("short rows …" < "r346" < "r346 + 8 bytes" < "r575" <
    "newer than r615")."""
    numbers = re.findall(r"r(\d+)", generation)
    if not numbers:
        return 0.0
    number = float(numbers[0])
    return number + 0.5 if generation.startswith("newer") or "+" in generation else number


def _layout(
    table: str, sizes: tuple[tuple[int, str], ...], max_rows: int, *spec: tuple[str, int, str, str]
) -> Layout:
    return Layout(table, tuple(Field(*s) for s in spec), sizes, max_rows)


DEVICE = _layout(
    "device table",
    ((72, "r346"), (80, "r400"), (88, "r575")),
    256,
    ("dev_name", 0, "u8", "r346"),
    ("dev_type", 8, "u8", "r346"),
    ("sm_type", 16, "u8", "r346"),
    ("dev_id", 24, "u4", "r346"),
    ("pci_bus_id", 28, "u4", "r346"),
    ("pci_dev_id", 32, "u4", "r346"),
    ("num_sms", 36, "u4", "r346"),
    ("num_warps_per_sm", 40, "u4", "r346"),
    ("num_lanes_per_warp", 44, "u4", "r346"),
    ("num_regs_per_lane", 48, "u4", "r346"),
    ("num_predicates_per_lane", 52, "u4", "r346"),
    ("sm_major", 56, "u4", "r346"),
    ("sm_minor", 60, "u4", "r346"),
    ("instruction_size", 64, "u4", "r346"),
    ("status", 68, "u4", "r346"),
    ("num_uniform_regs_per_warp", 72, "u4", "r400"),
    ("num_uniform_predicates_per_warp", 76, "u4", "r400"),
    ("num_convergence_barriers_per_warp", 80, "u4", "r575"),
)

CONTEXT = _layout(
    "context table",
    ((40, "r346"),),
    1024,
    ("context_id", 0, "u8", "r346"),
    ("shared_window_base", 8, "u8", "r346"),
    ("local_window_base", 16, "u8", "r346"),
    ("global_window_base", 24, "u8", "r346"),
    ("device_index", 32, "u4", "r346"),
    ("host_tid", 36, "u4", "r346"),
)

MODULE = _layout("module table", ((8, "r346"),), 1 << 16, ("module_handle", 0, "u8", "r346"))

GRID = _layout(
    "grid table",
    ((104, "r346"), (120, "r525"), (136, "r565")),
    4096,
    ("grid_id", 0, "u8", "r346"),
    ("context_id", 8, "u8", "r346"),
    ("function", 16, "u8", "r346"),
    ("function_entry", 24, "u8", "r346"),
    ("module_handle", 32, "u8", "r346"),
    ("parent_grid_id", 40, "u8", "r346"),
    ("params_offset", 48, "u8", "r346"),
    ("kernel_type", 56, "u4", "r346"),
    ("origin", 60, "u4", "r346"),
    ("grid_status", 64, "u4", "r346"),
    ("num_regs", 68, "u4", "r346"),
    ("grid_dim_x", 72, "u4", "r346"),
    ("grid_dim_y", 76, "u4", "r346"),
    ("grid_dim_z", 80, "u4", "r346"),
    ("block_dim_x", 84, "u4", "r346"),
    ("block_dim_y", 88, "u4", "r346"),
    ("block_dim_z", 92, "u4", "r346"),
    ("attr_launch_blocking", 96, "u4", "r346"),
    ("attr_host_tid", 100, "u4", "r346"),
    ("cluster_dim_x", 104, "u4", "r525"),
    ("cluster_dim_y", 108, "u4", "r525"),
    ("cluster_dim_z", 112, "u4", "r525"),
    ("preferred_cluster_dim_x", 120, "u4", "r565"),
    ("preferred_cluster_dim_y", 124, "u4", "r565"),
    ("preferred_cluster_dim_z", 128, "u4", "r565"),
)

CONSTBANK = _layout(
    "constbank table",
    ((16, "r550"),),
    256,
    ("addr", 0, "u8", "r550"),
    ("size", 8, "u4", "r550"),
    ("bank_id", 12, "u4", "r550"),
)

SM = _layout(
    "SM table",
    ((8, "r346"), (24, "r555"), (40, "r565"), (48, "r580")),
    1024,
    ("sm_id", 0, "u4", "r346"),
    ("exception", 8, "u4", "r555"),
    ("error_pc_valid", 12, "u4", "r555"),
    ("error_pc", 16, "u8", "r555"),
    ("cluster_target_valid", 24, "u4", "r565"),
    ("cluster_target_x", 28, "u4", "r565"),
    ("cluster_target_y", 32, "u4", "r565"),
    ("cluster_target_z", 36, "u4", "r565"),
    ("exception_string", 40, "u8", "r580"),
)

CTA = _layout(
    "CTA table",
    ((24, "r346"), (40, "r525"), (56, "r565")),
    64,
    ("grid_id", 0, "u8", "r346"),
    ("block_idx_x", 8, "u4", "r346"),
    ("block_idx_y", 12, "u4", "r346"),
    ("block_idx_z", 16, "u4", "r346"),
    ("cluster_idx_x", 24, "u4", "r525"),
    ("cluster_idx_y", 28, "u4", "r525"),
    ("cluster_idx_z", 32, "u4", "r525"),
    ("cluster_dim_x", 40, "u4", "r565"),
    ("cluster_dim_y", 44, "u4", "r565"),
    ("cluster_dim_z", 48, "u4", "r565"),
)

WARP = _layout(
    "warp table",
    ((32, "r346"), (40, "r525"), (48, "r570"), (64, "r575"), (80, "r590")),
    64,
    ("error_pc", 0, "u8", "r346"),
    ("warp_id", 8, "u4", "r346"),
    ("valid_lanes_mask", 12, "u4", "r346"),
    ("active_lanes_mask", 16, "u4", "r346"),
    ("is_warp_broken", 20, "u4", "r346"),
    ("error_pc_valid", 24, "u4", "r346"),
    ("num_regs", 32, "u4", "r525"),
    ("shared_mem_size", 40, "u4", "r570"),
    ("in_syscall_lanes_mask", 48, "u4", "r575"),
    ("cbu_active_lanes_mask", 52, "u4", "r575"),
    ("cbu_exited_lanes_mask", 56, "u4", "r575"),
    ("cbu_collective_lanes_mask", 60, "u4", "r575"),
    ("barrier_scope", 64, "u4", "r590"),
    ("additional_barrier_info", 72, "u8", "r590"),
)

LANE = _layout(
    "lane table",
    ((48, "r346"), (56, "r575"), (64, "r615")),
    64,
    ("virtual_pc", 0, "u8", "r346"),
    ("phys_pc", 8, "u8", "r346"),
    ("ln", 16, "u4", "r346"),
    ("thread_idx_x", 20, "u4", "r346"),
    ("thread_idx_y", 24, "u4", "r346"),
    ("thread_idx_z", 28, "u4", "r346"),
    ("exception", 32, "u4", "r346"),
    ("call_depth", 36, "u4", "r346"),
    ("syscall_call_depth", 40, "u4", "r346"),
    ("cc_register", 44, "u4", "r346"),
    ("cbu_thread_state", 48, "u4", "r575"),
    ("rpc_lo", 56, "u4", "r615"),
    ("rpc_hi", 60, "u4", "r615"),
)

BACKTRACE = _layout(
    "backtrace",
    ((24, "r346"),),
    4096,
    ("return_address", 0, "u8", "r346"),
    ("virtual_return_address", 8, "u8", "r346"),
    ("level", 16, "u4", "r346"),
)

METADATA = _layout(
    "metadata",
    ((32, "r565"),),
    16,
    ("generator_name", 0, "u8", "r565"),
    ("driver_version_major", 8, "u4", "r565"),
    ("driver_version_minor", 12, "u4", "r565"),
    ("cuda_driver_version_major", 16, "u4", "r565"),
    ("cuda_driver_version_minor", 20, "u4", "r565"),
    ("flags", 24, "u4", "r565"),
    ("timestamp", 28, "u4", "r565"),
)

LAYOUTS: dict[int, Layout] = {
    DEV_TABLE: DEVICE,
    CTX_TABLE: CONTEXT,
    MOD_TABLE: MODULE,
    GRID_TABLE: GRID,
    CB_TABLE: CONSTBANK,
    SM_TABLE: SM,
    CTA_TABLE: CTA,
    WP_TABLE: WARP,
    LN_TABLE: LANE,
    BT: BACKTRACE,
    META_DATA: METADATA,
}
