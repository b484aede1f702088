"""Pure parsers of cuda-gdb output: text in, `Parsed[T]` or `Unparsed` out.

No parser raises, whatever the input: text it does not understand comes back as
`Unparsed(raw, reason)`. The tables are read by their header row (see `table.py`).
Version differences are noted where they are handled, with the transcript that shows them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from postmortem.gdb.model import (
    BlockRow,
    Cell,
    ContextRow,
    DeviceRow,
    Dim3,
    KernelRow,
    LaneRow,
    Parsed,
    SmRow,
    ThreadRow,
    Unparsed,
    WarpRow,
)
from postmortem.gdb.table import Row, read_table

P = ParamSpec("P")
R = TypeVar("R")


def never_raises(parser: Callable[P, Parsed[R] | Unparsed]) -> Callable[P, Parsed[R] | Unparsed]:
    """Turns any exception a parser raises into `Unparsed` (a net under careful code).

    Args:
        parser: A parser whose first argument is the text.

    Returns:
        The parser, wrapped.
    """

    @functools.wraps(parser)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Parsed[R] | Unparsed:
        try:
            return parser(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
            raw = args[0] if args and isinstance(args[0], str) else ""
            return Unparsed(raw, f"parser error: {exc!r}")

    return wrapper


# --- values --------------------------------------------------------------------------------

_DIM3 = re.compile(r"^\((-?\d+),(-?\d+),(-?\d+)\)$")
_ABSENT = frozenset({"", "-", "n/a", "N/A", "None", "none"})


def to_int(text: str | None) -> int | None:
    """Reads a decimal or ``0x`` hexadecimal integer; None for ``-``, ``n/a`` or junk."""
    if text is None or text in _ABSENT:
        return None
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None


def to_dim3(text: str | None) -> Dim3 | None:
    """Reads ``(x,y,z)``; None when absent or malformed."""
    match = _DIM3.match(text or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def _text(value: str | None) -> str | None:
    return None if value is None or value in _ABSENT else value


def _cells(row: Row) -> tuple[Cell, ...]:
    return tuple(Cell(header, text) for header, text in row.cells)


# --- tables --------------------------------------------------------------------------------


def _parse_rows(
    text: str, required: tuple[str, ...], build: Callable[[Row], R]
) -> Parsed[tuple[R, ...]] | Unparsed:
    table = read_table(text)
    if isinstance(table, str):
        return Unparsed(text, table)
    if table.columns:  # no columns: "No CUDA kernels." and the like, an empty answer
        names = {c.name.casefold() for c in table.columns}
        missing = [h for h in required if h.casefold() not in names]
        if missing:
            return Unparsed(text, f"no {missing[0]!r} column")
    return Parsed(tuple(build(row) for row in table.rows), text)


@never_raises
def parse_devices(text: str) -> Parsed[tuple[DeviceRow, ...]] | Unparsed:
    """Parses ``info cuda devices``."""
    return _parse_rows(text, ("Dev",), _device_row)


def _device_row(row: Row) -> DeviceRow:
    return DeviceRow(
        current=row.current,
        device=to_int(row.get("Dev")),
        pci_bus=_text(row.get("PCI Bus/Dev ID")),
        name=_text(row.get("Name")),
        description=_text(row.get("Description")),
        sm_type=_text(row.get("SM Type")),
        sm_count=to_int(row.get("SMs")),
        warps_per_sm=to_int(row.get("Warps/SM")),
        lanes_per_warp=to_int(row.get("Lanes/Warp")),
        max_regs_per_lane=to_int(row.get("Max Regs/Lane")),
        active_sms_mask=to_int(row.get("Active SMs Mask")),
        cells=_cells(row),
    )


@never_raises
def parse_kernels(text: str) -> Parsed[tuple[KernelRow, ...]] | Unparsed:
    """Parses ``info cuda kernels``."""
    return _parse_rows(text, ("Kernel",), _kernel_row)


def _kernel_row(row: Row) -> KernelRow:
    name, args = _text(row.get("Name")), _text(row.get("Args"))
    invocation = _text(row.get("Invocation"))
    # cuda-gdb 11.8 prints one "Invocation" column, "oob_kernel()" (11.8/oob_store__info-
    # cuda-kernels.txt); the manual's samples show "Name" and "Args" (docs-13.4/info-cuda-
    # kernels.txt). Both are read.
    if invocation is not None and name is None:
        name, args = _split_invocation(invocation)
    return KernelRow(
        current=row.current,
        kernel=to_int(row.get("Kernel")),
        parent=to_int(row.get("Parent")),
        device=to_int(row.get("Dev")),
        grid=to_int(row.get("Grid")),
        status=_text(row.get("Status")),
        sms_mask=to_int(row.get("SMs Mask")),
        grid_dim=to_dim3(row.get("GridDim")),
        block_dim=to_dim3(row.get("BlockDim")),
        name=name,
        args=args,
        cells=_cells(row),
    )


def _split_invocation(invocation: str) -> tuple[str, str | None]:
    if not invocation.endswith(")"):
        return invocation, None
    start = _matching_open(invocation, len(invocation) - 1)
    if start is None or start == 0:
        return invocation, None
    return invocation[:start], invocation[start + 1 : -1]


def _matching_open(text: str, close_at: int) -> int | None:
    depth = 0
    for i in range(close_at, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    return None


@never_raises
def parse_contexts(text: str) -> Parsed[tuple[ContextRow, ...]] | Unparsed:
    """Parses ``info cuda contexts``."""
    return _parse_rows(text, ("Context",), _context_row)


def _context_row(row: Row) -> ContextRow:
    return ContextRow(
        current=row.current,
        context=to_int(row.get("Context")),
        device=to_int(row.get("Dev")),
        state=_text(row.get("State")),
        cells=_cells(row),
    )


@never_raises
def parse_blocks(text: str) -> Parsed[tuple[BlockRow, ...]] | Unparsed:
    """Parses ``info cuda blocks`` (coalesced or not)."""
    return _parse_rows(text, ("BlockIdx",), _block_row)


def _block_row(row: Row) -> BlockRow:
    return BlockRow(
        current=row.current,
        kernel=row.group_value("kernel"),
        block_idx=to_dim3(row.get("BlockIdx")),
        to_block_idx=to_dim3(row.get("To BlockIdx")),
        count=to_int(row.get("Count")),
        state=_text(row.get("State")),
        device=to_int(row.get("Dev")),
        sm=to_int(row.get("SM")),
        cells=_cells(row),
    )


@never_raises
def parse_warps(text: str) -> Parsed[tuple[WarpRow, ...]] | Unparsed:
    """Parses ``info cuda warps``."""
    return _parse_rows(text, ("Wp",), _warp_row)


def _warp_row(row: Row) -> WarpRow:
    return WarpRow(
        current=row.current,
        device=row.group_value("device"),
        sm=row.group_value("sm"),
        warp=to_int(row.get("Wp")),
        active_lanes_mask=to_int(row.get("Active Lanes Mask")),
        divergent_lanes_mask=to_int(row.get("Divergent Lanes Mask")),
        # cuda-gdb 11.8 prints "Active Physical PC" (11.8/oob_store__info-cuda-warps.txt);
        # the 2024 sources name the column "Active PC".
        active_pc=to_int(row.get("Active PC", "Active Physical PC")),
        kernel=to_int(row.get("Kernel")),
        block_idx=to_dim3(row.get("BlockIdx")),
        thread_idx=to_dim3(row.get("First Active ThreadIdx")),
        cells=_cells(row),
    )


@never_raises
def parse_lanes(text: str) -> Parsed[tuple[LaneRow, ...]] | Unparsed:
    """Parses ``info cuda lanes``."""
    return _parse_rows(text, ("Ln",), _lane_row)


def _lane_row(row: Row) -> LaneRow:
    return LaneRow(
        current=row.current,
        device=row.group_value("device"),
        sm=row.group_value("sm"),
        warp=row.group_value("warp"),
        lane=to_int(row.get("Ln")),
        state=_text(row.get("State")),
        # "PC" in the 13.4 manual (docs-13.4/info-cuda-lanes.txt); 11.8 prints "Physical PC".
        pc=to_int(row.get("PC", "Physical PC")),
        thread_idx=to_dim3(row.get("ThreadIdx")),
        exception=_text(row.get("Exception")),
        cells=_cells(row),
    )


@never_raises
def parse_threads(text: str) -> Parsed[tuple[ThreadRow, ...]] | Unparsed:
    """Parses ``info cuda threads`` (coalesced or not, with or without a breakpoint filter)."""
    return _parse_rows(text, ("BlockIdx", "ThreadIdx"), _thread_row)


def _thread_row(row: Row) -> ThreadRow:
    line = to_int(row.get("Line"))
    return ThreadRow(
        current=row.current,
        kernel=row.group_value("kernel"),
        block_idx=to_dim3(row.get("BlockIdx")),
        thread_idx=to_dim3(row.get("ThreadIdx")),
        to_block_idx=to_dim3(row.get("To BlockIdx")),
        to_thread_idx=to_dim3(row.get("To ThreadIdx")),
        count=to_int(row.get("Count")),
        # Since cuda-gdb 12.8 at the latest, info cuda threads prints "PC"; before: "Virtual
        # PC" (12.8/nvfp4-gemv-cluster__info-cuda-threads.txt; the manual's samples, docs-12.9/
        # info-cuda-threads-uncoalesced.txt).
        pc=to_int(row.get("PC", "Virtual PC")),
        device=to_int(row.get("Dev")),
        sm=to_int(row.get("SM")),
        warp=to_int(row.get("Wp")),
        lane=to_int(row.get("Ln")),
        filename=_text(row.get("Filename")),
        line=None if line == 0 else line,  # cuda-gdb prints 0 where there is no line info
        cells=_cells(row),
    )


@never_raises
def parse_sms(text: str) -> Parsed[tuple[SmRow, ...]] | Unparsed:
    """Parses ``info cuda sms``."""
    return _parse_rows(text, ("SM", "Active Warps Mask"), _sm_row)


def _sm_row(row: Row) -> SmRow:
    return SmRow(
        current=row.current,
        device=row.group_value("device"),
        sm=to_int(row.get("SM")),
        active_warps_mask=to_int(row.get("Active Warps Mask")),
        cells=_cells(row),
    )


def unwrap(text: str) -> str:
    """Joins the continuation lines of pasted output that a terminal wrapped.

    A line that starts with whitespace continues the line above it (gdb indents the
    continuation of a frame with four spaces); tables are not passed through this.
    """
    out: list[str] = []
    for line in text.splitlines():
        if out and line[:1] in (" ", "\t") and line.strip() and not line.lstrip().startswith("#"):
            out[-1] = out[-1].rstrip() + " " + line.strip()
        else:
            out.append(line.rstrip())
    return "\n".join(out)
