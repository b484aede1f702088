"""Typed results of parsing cuda-gdb output: frozen data, no I/O.

Every parser returns `Parsed[T]` (the value and the text it came from) or `Unparsed` (the
text and why it was not understood); it never raises. Addresses are ints, dimensions are
`(x, y, z)` tuples, and a value the output did not give (``n/a``, ``-``, a missing column)
is None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

Dim3 = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Parsed(Generic[T]):
    """A parser understood the text."""

    value: T
    """What the text says."""
    raw: str
    """The text it was read from."""


@dataclass(frozen=True, slots=True)
class Unparsed:
    """A parser did not understand the text; the text is kept."""

    raw: str
    """The text as cuda-gdb printed it."""
    reason: str
    """One line: what was expected and not found."""


@dataclass(frozen=True, slots=True)
class FocusCoords:
    """The ``[Current focus set to CUDA kernel 0, grid 7, block (5,0,0), …]`` line."""

    kernel: int | None
    """Kernel id (unique across devices)."""
    grid: int | None
    """Grid id (unique per device)."""
    block: Dim3 | None
    """blockIdx."""
    thread: Dim3 | None
    """threadIdx."""
    device: int | None
    """Device index."""
    sm: int | None
    """SM index."""
    warp: int | None
    """Hardware warp slot on the SM."""
    lane: int | None
    """Lane within the warp."""
    cluster: Dim3 | None = None
    """clusterIdx, printed by newer cuda-gdb for kernels launched with clusters."""


@dataclass(frozen=True, slots=True)
class CudaException:
    """The exception banner cuda-gdb prints when it opens a dump (``target cudacore``)."""

    name: str | None
    """``Warp Illegal Address`` from ``CUDA Exception: Warp Illegal Address``, or from
    ``received signal CUDA_EXCEPTION_14, Warp Illegal Address.`` when that line is missing."""
    assertion_failed: bool
    """True for the ``Assertion failed.`` variant (device-side assert)."""
    error_pc: int | None
    """The PC from ``The exception was triggered at PC 0x…``."""
    file: str | None
    """Source file of the error PC, when the banner names it."""
    line: int | None
    """Source line of the error PC."""
    function: str | None
    """The function holding the error PC, as printed before its location: mangled
    (``_Z10oob_kernelPfif``) or demangled with parameters (``oob_kernel(float*, int, float)``);
    None where only a location is printed (cuda-gdb 11.8)."""
    inlined_from_file: str | None
    """F of ``in X inlined from F:L``: the file of the call site `inline_function` was
    inlined at."""
    inlined_from_line: int | None
    """L of that clause: the line of the call site."""
    focus: FocusCoords | None
    """The focus cuda-gdb chose: the thread that faulted."""
    signal_code: int | None = None
    """N of ``received signal CUDA_EXCEPTION_N`` (live sessions only)."""
    coredump_path: str | None = None
    """The file named by ``Opening GPU coredump: …``."""
    inline_function: str | None = None
    """X of ``(file:line in X inlined from F:L)``: the inlined function whose code is at
    `file`:`line`; None when the location names no inline frame."""


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell of an ``info cuda`` table: the column header and the text under it."""

    header: str
    """The column header as printed, e.g. ``Active Lanes Mask``."""
    text: str
    """The cell's text, stripped."""


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One row of ``info cuda devices``."""

    current: bool
    """Marked with ``*``: the device in focus."""
    device: int | None
    """Device index."""
    pci_bus: str | None
    """``PCI Bus/Dev ID``, e.g. ``06:00.0``."""
    name: str | None
    """Marketing name, e.g. ``NVIDIA H100 80GB HBM3``."""
    description: str | None
    """Chip, e.g. ``GH100``."""
    sm_type: str | None
    """``sm_90``."""
    sm_count: int | None
    """Number of SMs."""
    warps_per_sm: int | None
    """Warp slots per SM."""
    lanes_per_warp: int | None
    """Lanes per warp."""
    max_regs_per_lane: int | None
    """Registers per lane."""
    active_sms_mask: int | None
    """Bit i set: SM i has active warps."""
    cells: tuple[Cell, ...]
    """Every cell of the row, known columns or not."""


@dataclass(frozen=True, slots=True)
class KernelRow:
    """One row of ``info cuda kernels``."""

    current: bool
    """The kernel in focus."""
    kernel: int | None
    """Kernel id."""
    parent: int | None
    """Parent kernel id (dynamic parallelism); None for ``-``."""
    device: int | None
    """Device index."""
    grid: int | None
    """Grid id; negative for grids launched from the device."""
    status: str | None
    """``Active``, ``Terminated``, ``Active (preempted)``, … as printed, whole."""
    sms_mask: int | None
    """SMs the kernel runs on."""
    grid_dim: Dim3 | None
    """gridDim."""
    block_dim: Dim3 | None
    """blockDim."""
    name: str | None
    """Kernel name: the ``Name`` column, or the ``Invocation`` before its ``(``."""
    args: str | None
    """Arguments as printed: the ``Args`` column, or the ``Invocation`` inside ``(…)``."""
    cells: tuple[Cell, ...]
    """Every cell of the row."""


@dataclass(frozen=True, slots=True)
class ContextRow:
    """One row of ``info cuda contexts``."""

    current: bool
    """The context in focus."""
    context: int | None
    """Context handle."""
    device: int | None
    """Device index."""
    state: str | None
    """``active`` or ``inactive``."""
    cells: tuple[Cell, ...]
    """Every cell of the row."""


@dataclass(frozen=True, slots=True)
class BlockRow:
    """One row of ``info cuda blocks`` (coalesced ranges or single blocks)."""

    current: bool
    """Holds the block in focus."""
    kernel: int | None
    """Kernel id from the ``Kernel N`` group line above the row."""
    block_idx: Dim3 | None
    """First (or only) block of the row."""
    to_block_idx: Dim3 | None
    """Last block of a coalesced range; None when not coalesced."""
    count: int | None
    """Number of blocks in the range."""
    state: str | None
    """``running``, as printed."""
    device: int | None
    """Device (uncoalesced output only)."""
    sm: int | None
    """SM (uncoalesced output only)."""
    cells: tuple[Cell, ...]
    """Every cell of the row."""


@dataclass(frozen=True, slots=True)
class WarpRow:
    """One row of ``info cuda warps``."""

    current: bool
    """The warp in focus."""
    device: int | None
    """Device, from the ``Device N SM M`` group line."""
    sm: int | None
    """SM, from the group line."""
    warp: int | None
    """Warp slot."""
    active_lanes_mask: int | None
    """Active lanes."""
    divergent_lanes_mask: int | None
    """Divergent lanes."""
    active_pc: int | None
    """PC of the active lanes as printed; 11.8's ``Active Physical PC`` is an offset into the
    code, not a virtual address."""
    kernel: int | None
    """Kernel id."""
    block_idx: Dim3 | None
    """blockIdx of the warp."""
    thread_idx: Dim3 | None
    """threadIdx of the first active lane."""
    cells: tuple[Cell, ...]
    """Every cell of the row."""


@dataclass(frozen=True, slots=True)
class LaneRow:
    """One row of ``info cuda lanes``."""

    current: bool
    """The lane in focus."""
    device: int | None
    """Device, from the ``Device N SM M Warp W`` group line."""
    sm: int | None
    """SM, from the group line."""
    warp: int | None
    """Warp, from the group line."""
    lane: int | None
    """Lane index."""
    state: str | None
    """``active``, ``inactive``, ``divergent``, as printed."""
    pc: int | None
    """The lane's PC as printed: 11.8's ``Physical PC`` is an offset into the code
    (``0xd0``), not the virtual address of the error PC; newer ``PC`` columns print
    virtual addresses (the 13.4 manual's sample)."""
    thread_idx: Dim3 | None
    """threadIdx."""
    exception: str | None
    """The lane's exception; None when absent or ``None``."""
    cells: tuple[Cell, ...]
    """Every cell of the row."""


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """One row of ``info cuda threads``: a range of threads (coalesced) or one thread."""

    current: bool
    """Holds the thread in focus."""
    kernel: int | None
    """Kernel id from the ``Kernel N`` group line above the row."""
    block_idx: Dim3 | None
    """blockIdx of the first (or only) thread."""
    thread_idx: Dim3 | None
    """threadIdx of the first (or only) thread."""
    to_block_idx: Dim3 | None
    """blockIdx of the last thread of a coalesced range; None when not coalesced."""
    to_thread_idx: Dim3 | None
    """threadIdx of the last thread of the range."""
    count: int | None
    """Number of threads in the range."""
    pc: int | None
    """The threads' virtual PC (``PC``; ``Virtual PC`` in the manual)."""
    device: int | None
    """Device (uncoalesced output only)."""
    sm: int | None
    """SM (uncoalesced output only)."""
    warp: int | None
    """Warp slot (uncoalesced output only)."""
    lane: int | None
    """Lane (uncoalesced output only)."""
    filename: str | None
    """Source file of the PC; None when the cell is empty (no line info)."""
    line: int | None
    """Source line; None for cuda-gdb's ``0`` (no line info)."""
    cells: tuple[Cell, ...]
    """Every cell of the row."""


@dataclass(frozen=True, slots=True)
class SmRow:
    """One row of ``info cuda sms``."""

    current: bool
    """The SM in focus."""
    device: int | None
    """Device, from the ``Device N`` group line."""
    sm: int | None
    """SM index."""
    active_warps_mask: int | None
    """Bit i set: warp slot i of the SM is active."""
    cells: tuple[Cell, ...]
    """Every cell of the row."""


@dataclass(frozen=True, slots=True)
class SymbolInfo:
    """``info symbol ADDR``: ``oob_kernel + 272 in section .text.oob_kernel of FILE``."""

    symbol: str
    """Symbol name as printed (mangled or not)."""
    offset: int
    """Bytes from the symbol's start; 0 when not printed."""
    section: str | None
    """ELF section, e.g. ``.text.oob_kernel``."""
    objfile: str | None
    """The objfile cuda-gdb extracted the cubin to; a temporary path."""


@dataclass(frozen=True, slots=True)
class CodeAddress:
    """An address with its symbolic form, ``0x7f…290 <oob_kernel+272>``."""

    address: int
    """The address."""
    symbol: str | None
    """The symbol, when printed."""
    offset: int | None
    """The offset from the symbol."""


@dataclass(frozen=True, slots=True)
class LineInfo:
    """``info line *ADDR``."""

    has_line_info: bool
    """False for ``No line number information available for address …``."""
    file: str | None
    """Source file."""
    line: int | None
    """Source line."""
    start: CodeAddress | None
    """First address of the line's code range (or the address asked about)."""
    end: CodeAddress | None
    """First address after the range."""
    inlined_function: str | None
    """X of ``inlined from X at line N of F``."""
    inlined_line: int | None
    """N of that clause."""
    inlined_file: str | None
    """F of that clause."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One ``bt`` frame: ``#0  oob_kernel<<<(64,1,1),(256,1,1)>>> () at k.cu:2 in … ``."""

    level: int
    """N of ``#N``."""
    pc: int | None
    """The frame's PC when printed (``0x… in``)."""
    function: str
    """Function name, without the launch configuration."""
    grid_dim: Dim3 | None
    """gridDim from ``<<<(…),(…)>>>`` (device frames of a kernel)."""
    block_dim: Dim3 | None
    """blockDim from the launch configuration."""
    args: str | None
    """The argument list as printed, without the parentheses."""
    file: str | None
    """Source file of the frame's location."""
    line: int | None
    """Source line."""
    inline_function: str | None
    """X of ``in X inlined from F:L``: the function inlined at this location."""
    inlined_from_file: str | None
    """F of that clause."""
    inlined_from_line: int | None
    """L of that clause."""


@dataclass(frozen=True, slots=True)
class Instruction:
    """One line of ``x/Ni ADDR``."""

    address: int
    """Instruction address."""
    symbol: str | None
    """Function symbol from ``<sym+off>``; None for gdb's ``<+off>`` (``disassemble`` of a
    function) and where nothing is printed."""
    offset: int | None
    """Offset from the symbol; for ``<+off>``, from the start of the function the address
    lies in (which can change within one dump: the offsets restart at the next function)."""
    text: str
    """The SASS text, e.g. ``STG.E [R2.64], R5 ;``."""
    is_pc: bool
    """Marked ``=>`` or ``*=>``: the focus warp's PC."""
    is_error_pc: bool
    """Marked ``*>`` or ``*=>``: the instruction that raised the exception."""
