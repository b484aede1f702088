"""Facts read from a coredump, as frozen values with no I/O.

A field that the dump's row layout does not hold (an older driver wrote it) is None.
Addresses are ints; only presentation formats them. Navigation from one level to the
next (a device's SMs, a warp's lanes) goes through the open `Coredump`, which decodes
each level only when asked, so a 270,000-lane dump costs only what a report shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from postmortem.exceptions import describe_exception

GENERATION_FLAGS: dict[int, str] = {
    1: "skip_nonrelocated_elf_images",
    2: "skip_global_memory",
    4: "skip_shared_memory",
    8: "skip_local_memory",
    16: "skip_abort",
    32: "skip_constbank_memory",
    64: "gzip_compress",
    128: "faulted_contexts_only",
    1 << 30: "no_errbar_at_exit",
    1 << 31: "log_only",
}


LOST_EXCEPTION = "an exception whose code was lost with the warp's lane rows"
"""What a fault is called when its warp's lane rows are lost and no SM row names a code."""


def describe_flags(flags: int) -> tuple[str, ...]:
    """The generation flags by name; bits we do not know stay as numbers."""
    names = [name for bit, name in GENERATION_FLAGS.items() if flags & bit]
    unknown = flags & ~sum(GENERATION_FLAGS)
    if unknown:
        names.append(f"0x{unknown:x}")
    return tuple(names)


@dataclass(frozen=True, slots=True)
class RowRef:
    """Where a row lives: its table section and its index in that table."""

    section: int
    """Index of the table's section."""
    row: int
    """Row number inside the table."""


Dim3 = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU (a device-table row)."""

    index: int
    """Row number in the device table (what contexts' `device_index` refers to)."""
    dev_id: int | None
    """The driver's device ordinal."""
    name: str | None
    """Marketing name, e.g. "NVIDIA H100 80GB HBM3"."""
    type: str | None
    """Chip, e.g. "GH100"."""
    sm_type: str | None
    """SM architecture, e.g. "sm_90"."""
    pci_bus_id: int | None
    pci_dev_id: int | None
    num_sms: int | None
    num_warps_per_sm: int | None
    num_lanes_per_warp: int | None
    num_regs_per_lane: int | None
    num_predicates_per_lane: int | None
    sm_major: int | None
    sm_minor: int | None
    instruction_size: int | None
    """Bytes per SASS instruction (16 on Volta and later)."""
    status: int | None
    num_uniform_regs_per_warp: int | None
    """Since r400."""
    num_uniform_predicates_per_warp: int | None
    """Since r400."""
    num_convergence_barriers_per_warp: int | None
    """Since r575."""
    ref: RowRef = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Context:
    """A CUDA context on a device."""

    context_id: int | None
    shared_window_base: int | None
    local_window_base: int | None
    global_window_base: int | None
    device_index: int
    """Row of the device table this context lives on."""
    host_tid: int | None
    """Host thread that created the context."""
    ref: RowRef = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Image:
    """A cubin stored in the dump (its bytes are read on demand)."""

    section: int
    """Section holding the cubin."""
    size_bytes: int
    relocated: bool
    """True for `.cudbg.relfimg` (addresses are load addresses), False for `.cudbg.elfimg`."""


@dataclass(frozen=True, slots=True)
class Module:
    """A loaded module (one cubin) of a context."""

    module_handle: int | None
    context_id: int | None
    device_index: int | None
    relocated_image: Image | None
    """None when the dump holds no relocated image for this module."""
    unrelocated_image: Image | None
    """None when written with `skip_nonrelocated_elf_images` (the usual setting)."""
    ref: RowRef = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Constbank:
    """A constant bank of a grid (r550+)."""

    bank_id: int
    addr: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Grid:
    """A kernel launch (a grid-table row)."""

    grid_id: int | None
    context_id: int | None
    device_index: int
    function: int | None
    """The driver's function handle."""
    function_entry: int | None
    """Absolute address of the kernel's first instruction."""
    module_handle: int | None
    parent_grid_id: int | None
    params_offset: int | None
    kernel_type: int | None
    origin: int | None
    """0: launched from the CPU, 1: from the GPU (dynamic parallelism)."""
    grid_status: int | None
    num_regs: int | None
    grid_dim: Dim3 | None
    block_dim: Dim3 | None
    attr_launch_blocking: int | None
    attr_host_tid: int | None
    cluster_dim: Dim3 | None
    """Since r525."""
    preferred_cluster_dim: Dim3 | None
    """Since r565."""
    ref: RowRef = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class SM:
    """A streaming multiprocessor (an SM-table row)."""

    sm_id: int | None
    device_index: int
    exception: int | None
    """SM-level exception code (r555+); None when the layout lacks it."""
    error_pc: int | None
    """Set (r555+) when `error_pc_valid`: lets a reader find a fault whose warps exited."""
    cluster_target_block_idx: Dim3 | None
    """The cluster exception's target block (r565+), when valid."""
    exception_string: str | None
    """The driver's extra words about the exception (r580+)."""
    ref: RowRef = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class CTA:
    """A thread block resident on an SM."""

    grid_id: int | None
    block_idx: Dim3 | None
    device_index: int
    sm_id: int | None
    cluster_idx: Dim3 | None
    """Since r525."""
    cluster_dim: Dim3 | None
    """Since r565."""
    ref: RowRef = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Warp:
    """A warp of a CTA."""

    warp_id: int | None
    device_index: int
    sm_id: int | None
    grid_id: int | None
    block_idx: Dim3 | None
    error_pc: int | None
    """Absolute PC of the warp's exception, when the row marks it valid."""
    valid_lanes_mask: int | None
    active_lanes_mask: int | None
    is_broken: bool | None
    num_regs: int | None
    """Registers per lane (r525+)."""
    shared_mem_size: int | None
    """Shared memory of the CTA in bytes (r570+)."""
    in_syscall_lanes_mask: int | None
    cbu_active_lanes_mask: int | None
    cbu_exited_lanes_mask: int | None
    cbu_collective_lanes_mask: int | None
    barrier_scope: int | None
    """Since r590."""
    additional_barrier_info: str | None
    """Since r590."""
    ref: RowRef = field(repr=False, compare=False)

    def holds_lane(self, lane: int | None) -> bool:
        """True when lane id `lane` is a thread of this warp: its bit is set in the
        valid-lanes mask (as LLDB's reader counts threads). A row whose lane id or mask the
        dump does not give is kept."""
        mask = self.valid_lanes_mask
        if mask is None or lane is None:
            return True
        return 0 <= lane < 32 and bool(mask >> lane & 1)


@dataclass(frozen=True, slots=True)
class Lane:
    """A thread of a warp."""

    lane: int | None
    """Lane id inside the warp (the row's `ln`)."""
    device_index: int
    sm_id: int | None
    grid_id: int | None
    block_idx: Dim3 | None
    warp_id: int | None
    thread_idx: Dim3 | None
    virtual_pc: int | None
    """Absolute PC."""
    function_offset: int | None
    """PC relative to the start of the executing function (the row's `physPC`)."""
    exception: int | None
    call_depth: int | None
    syscall_call_depth: int | None
    cc_register: int | None
    cbu_thread_state: int | None
    """Since r575."""
    return_pc: int | None
    """The return-PC register (r615+)."""
    ref: RowRef = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class BacktraceFrame:
    """One row of a lane's device call stack."""

    level: int
    return_address: int
    """Offset in the caller function."""
    virtual_return_address: int
    """Absolute address."""


@dataclass(frozen=True, slots=True)
class Metadata:
    """The dump's metadata row (r565+)."""

    generator_name: str | None
    driver_version: tuple[int, int] | None
    cuda_driver_version: tuple[int, int] | None
    flags: int | None
    """Generation flags the dump was written with."""
    timestamp: int | None
    """Unix seconds when the dump was written."""

    @property
    def flag_names(self) -> tuple[str, ...]:
        return () if self.flags is None else describe_flags(self.flags)


@dataclass(frozen=True, slots=True)
class MemorySegment:
    """A captured range of device memory (the bytes stay in the file)."""

    kind: str
    """"global", "managed", "shared" or "local"."""
    address: int
    size_bytes: int
    section: int


@dataclass(frozen=True, slots=True)
class TableLayout:
    """The row size one table kind uses in this dump, and the driver generation it means."""

    table: str
    row_size: int
    generation: str


class TextEnum(str, Enum):
    """An enum whose members are their text: equal to it, printed and written as JSON as it
    (Python 3.10 has no StrEnum)."""

    def __str__(self) -> str:
        return str(self.value)


class TimeSource(TextEnum):
    """Where a dump's write time came from, best first."""

    METADATA = "metadata"
    """The metadata section's timestamp (r565+)."""
    NAME = "name"
    """The file name's %t (`CUDA_COREDUMP_FILE`)."""
    MTIME = "mtime"
    """The file's modification time."""


class FaultSource(Enum):
    """Which part of the dump reported a fault."""

    LANE = "lane"
    WARP = "warp"
    SM = "sm"
    TRAP = "trap"
    """A warp stopped at a trap or breakpoint (`isWarpBroken`), with no exception."""


@dataclass(frozen=True, slots=True)
class CodeLocation:
    """Where a PC falls among the dump's loaded code."""

    module: Module
    """The module whose relocated image holds the PC (handles may repeat across devices,
    be 0, or be unknown for a root-level image: the module itself is the key)."""
    section_name: str
    """The executable section, e.g. `.text._Z10oob_kernelPfif`."""
    section_address: int
    offset: int
    """PC minus the section start: what nvdisasm prints as `/*0110*/`."""
    function: str | None
    """The mangled name of the function symbol of that section, when there is one."""

    @property
    def module_handle(self) -> int | None:
        """The module's handle; None for a root-level image."""
        return self.module.module_handle


@dataclass(frozen=True, slots=True)
class Fault:
    """An exception found in the dump, with where it happened."""

    source: FaultSource
    exception: int | None
    """The exception code; None when only a warp's error PC says something went wrong."""
    error_pc: int | None
    device_index: int
    sm_id: int | None
    grid_id: int | None
    """None for an SM-level fault (the warp that faulted is gone)."""
    block_idx: Dim3 | None
    warp_id: int | None
    lane: int | None
    thread_idx: Dim3 | None
    function_offset: int | None
    """The lane's own function-relative PC, to check against the code location."""
    location: CodeLocation | None
    """None when no relocated image in the dump holds the PC."""
    detail: str | None = None
    """The driver's own words about the exception (the SM row's string, r580+)."""
    warp_record: Warp | None = field(default=None, repr=False, compare=False)
    """The faulting warp's row (None for an SM-level fault): its registers are read from it."""
    lane_record: Lane | None = field(default=None, repr=False, compare=False)
    """The faulting lane's row, for a lane fault."""
    lane_chosen: bool = False
    """True when `lane` and `thread_idx` are not a faulting lane the dump records but the
    warp's first valid lane (the lowest bit of its valid-lanes mask), named for a warp-row
    fault as cuda-gdb and LLDB name it; the fault's source stays `WARP`."""
    lanes_lost: bool = False
    """True when the warp's lane rows, which hold the exception code, are lost (their table
    set aside or zero-filled): `exception` is then the SM row's, or None."""

    @property
    def exception_name(self) -> str:
        if self.source is FaultSource.TRAP:
            return "Stopped at a trap"
        if self.exception is None and self.lanes_lost:
            return LOST_EXCEPTION
        if self.exception is None:
            return "an exception the dump does not name"
        return describe_exception(self.exception)
