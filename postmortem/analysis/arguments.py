"""The kernel's arguments, read from the grid's parameter memory, and which one the faulting
address belongs to ("fault = arg0 + 0x543000")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from postmortem.coredump import Coredump
from postmortem.cubin.nvinfo import KernelInfo, read_kernel_info
from postmortem.errors import NvInfoError
from postmortem.model import Grid

# Device pointers are user-space virtual addresses above 4 GiB (the driver maps device
# memory high) and below the 57-bit limit of 5-level paging. Anything else in an 8-byte slot
# is a count, a size, a float pair or a flag.
_LOWEST_POINTER = 1 << 32
_HIGHEST_POINTER = 1 << 57
# Without the cubin's parameter layout, the slots shown: parameters beyond this are rare,
# and constant bank 0 goes on for 64 KiB.
_UNLAID_SLOTS = 64


@dataclass(frozen=True, slots=True)
class KernelArgument:
    """One parameter (from `.nv.info`) or one 8-byte slot of the parameter memory."""

    ordinal: int | None
    """Its position in the kernel's signature; None when the layout is unknown (a slot)."""
    offset: int
    """Byte offset in the parameter memory."""
    size_bytes: int
    value: int
    """Little-endian value of its first 8 bytes (or fewer, for a smaller parameter)."""
    is_pointer_like: bool
    distance: int | None
    """Faulting address minus `value`, for a pointer-like argument."""

    @property
    def label(self) -> str:
        """``arg0`` (its ordinal), or ``slot 3`` when the layout is unknown."""
        return f"arg{self.ordinal}" if self.ordinal is not None else f"slot {self.offset // 8}"

    @property
    def relation(self) -> str | None:
        """The faulting address in terms of this argument, ``arg0 + 0x543000``; None when
        it is no pointer the address was measured from."""
        if self.distance is None:
            return None
        sign = "-" if self.distance < 0 else "+"
        return f"{self.label} {sign} 0x{abs(self.distance):x}"


@dataclass(frozen=True, slots=True)
class KernelArguments:
    """The grid's arguments and the one nearest below the faulting address."""

    source: str
    """Where the bytes came from: ".cudbg.param" or "constant bank 0"."""
    layout: str
    """".nv.info" (the cubin's parameter offsets and sizes) or "8-byte slots"."""
    arguments: tuple[KernelArgument, ...]
    nearest: KernelArgument | None
    """The pointer the address is attributed to: the closest one, above or below."""


def read_arguments(
    core: Coredump, grid: Grid, cubin: bytes | None, kernel: str | None, address: int | None
) -> tuple[KernelArguments | None, str | None]:
    """Decode the grid's parameters; None and the reason when the dump holds none."""
    data, source = _parameter_bytes(core, grid)
    if data is None:
        return None, (
            "the dump holds no parameter memory for the grid (no .cudbg.param section, and "
            "constant bank 0 was not captured)"
        )
    info = _kernel_info(cubin, kernel)
    spans: list[tuple[int | None, int, int]]
    if info is not None and info.params:
        spans = [(p.ordinal, p.offset, p.size_bytes) for p in info.params]
        layout = ".nv.info"
    else:
        usable = min(len(data) - len(data) % 8, 8 * _UNLAID_SLOTS)
        spans = [(None, offset, 8) for offset in range(0, usable, 8)]
        layout = "8-byte slots"
    arguments = tuple(_argument(data, span, address) for span in spans if span[1] < len(data))
    return KernelArguments(source, layout, arguments, _nearest(arguments)), None


def _parameter_bytes(core: Coredump, grid: Grid) -> tuple[bytes | None, str]:
    data = core.params(grid)
    if data is not None:
        return data, ".cudbg.param"
    offset = grid.params_offset
    for bank in core.constbanks(grid):
        if offset is not None and bank.bank_id == 0 and bank.size_bytes > offset:
            size = bank.size_bytes - offset
            captured = core.read_memory(bank.addr + offset, size)
            if captured is not None:
                return captured, "constant bank 0"
    return None, ""


def _kernel_info(cubin: bytes | None, kernel: str | None) -> KernelInfo | None:
    if cubin is None or kernel is None:
        return None
    try:
        return read_kernel_info(cubin, kernel)
    except NvInfoError:
        return None


def _argument(
    data: bytes, span: tuple[int | None, int, int], address: int | None
) -> KernelArgument:
    ordinal, offset, size = span
    raw = data[offset : offset + min(size, 8)]
    value = int.from_bytes(raw, "little")
    pointer_like = len(raw) == 8 and _LOWEST_POINTER <= value < _HIGHEST_POINTER
    distance = address - value if pointer_like and address is not None else None
    return KernelArgument(ordinal, offset, size, value, pointer_like, distance)


def _nearest(arguments: Sequence[KernelArgument]) -> KernelArgument | None:
    # The closest pointer either way: `out[-1]` lies just below `out`, not far above
    # whichever buffer happens to start lower.
    pointers = [a for a in arguments if a.distance is not None]
    return min(pointers, key=lambda a: (abs(a.distance or 0), -(a.distance or 0)), default=None)
