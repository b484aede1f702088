"""The kernel's arguments, read from the grid's parameter memory, and which one the faulting
address most plausibly came from ("fault = arg0 + 0x543000"), with the reasoning.

The culprit is not simply the numerically nearest pointer. An out-of-bounds access lands at
or above the buffer it indexes (past its end, or inside it); one below a buffer is a negative
index only when it is close. An offset that equals an integer argument times the access width
(or times a row of another integer argument's elements) says which count the index reached:
that is the strongest evidence there is, and it decides.
"""

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
# How far below a buffer a negative index plausibly lands (a few rows of a large tensor), and
# how much less plausible than the same distance above it: `out[-1]` beats `in + 100 MiB`, and
# 128 MiB below one buffer loses to 1 GiB past the end of another.
_BELOW_REACH = 1 << 20
_BELOW_PENALTY = 16
# No buffer spans a terabyte: an address further past a base (a garbage index, a pointer
# read from freed memory) is not that argument's.
_ABOVE_REACH = 1 << 40
# A runner-up is shown when its score is within this factor of the culprit's.
_CLOSE_CALL = 8
# Counts an index is compared with: from 2 (a 0 or 1 matches anything) up to 2**31.
_SMALLEST_COUNT = 2
_LARGEST_COUNT = 1 << 31
# A row index read off a floor division must be at least this to count (few tensors have
# 1..7 rows, and small numbers divide too many offsets by chance).
_SMALLEST_ROWS = 8


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
    """The grid's arguments and the pointer the faulting address is attributed to."""

    source: str
    """Where the bytes came from: ".cudbg.param" or "constant bank 0"."""
    layout: str
    """".nv.info" (the cubin's parameter offsets and sizes) or "8-byte slots"."""
    arguments: tuple[KernelArgument, ...]
    culprit: KernelArgument | None
    """The pointer the address most plausibly came from; None when no pointer argument is a
    plausible origin (no address, or every pointer far above it)."""
    reasoning: str | None = None
    """Why the culprit was chosen, in words."""
    gist: str | None = None
    """The reasoning in a few words, for a summary line: ``index = arg2, one past the end?``."""
    runner_up: KernelArgument | None = None
    """The next most plausible pointer, when the call is close."""


def read_arguments(
    core: Coredump,
    grid: Grid,
    cubin: bytes | None,
    kernel: str | None,
    address: int | None,
    width_bytes: int | None = None,
) -> tuple[KernelArguments | None, str | None]:
    """Decode the grid's parameters and attribute `address` (accessed `width_bytes` at a time)
    to one of them; None and the reason when the dump holds no parameter memory."""
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
    return attribute(source, layout, arguments, width_bytes), None


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


def attribute(
    source: str, layout: str, arguments: tuple[KernelArgument, ...], width_bytes: int | None
) -> KernelArguments:
    """The arguments with their culprit chosen (see the module docstring for the rules)."""
    counts = [(a.label, a.value) for a in arguments if _is_count(a)]
    ranked = sorted(
        (
            (_score(a.distance, index), a, index)
            for a in arguments
            if a.distance is not None and _plausible(a.distance)
            for index in (_index_relation(a.distance, counts, width_bytes),)
        ),
        key=lambda entry: entry[0],
    )
    if not ranked:
        return KernelArguments(source, layout, arguments, None)
    (best_score, culprit, index), *rest = ranked
    runner_up = None
    if rest and rest[0][0][0] == best_score[0] and rest[0][0][1] <= _CLOSE_CALL * best_score[1]:
        runner_up = rest[0][1]
    reasoning, gist = _reasoning(culprit, index, runner_up)
    return KernelArguments(
        source, layout, arguments, culprit, reasoning=reasoning, gist=gist, runner_up=runner_up
    )


def _plausible(distance: int) -> bool:
    return -_BELOW_REACH <= distance <= _ABOVE_REACH


def _score(distance: int, index: tuple[str, str] | None) -> tuple[int, int]:
    # An index relation first; then the distance, a distance below the buffer counting more.
    weight = distance if distance >= 0 else -distance * _BELOW_PENALTY
    return (0 if index is not None else 1, weight)


def _is_count(argument: KernelArgument) -> bool:
    return (
        not argument.is_pointer_like
        and argument.size_bytes in (4, 8)
        and _SMALLEST_COUNT <= argument.value < _LARGEST_COUNT
    )


def _index_relation(
    distance: int, counts: Sequence[tuple[str, int]], width_bytes: int | None
) -> tuple[str, str] | None:
    """How an offset past a buffer relates to the count arguments, in words; None if not.
    The element size is not recorded: the access width comes first, then the usual sizes (a
    vector access reads several elements)."""
    if distance <= 0:
        return None
    sizes = [s for s in dict.fromkeys((width_bytes, 4, 2, 8, 1)) if s and distance % s == 0]
    for size in sizes:
        for label, count in counts:
            if distance == count * size:
                return (
                    f"offset = {label} ({count}) x {size} bytes: index {label}, one past the end?",
                    f"index = {label}: one past the end?",
                )
    for size in sizes:
        for first, (label, count) in enumerate(counts):
            for other, per_row in counts[first + 1 :]:
                table = count * per_row * size
                if max(count, per_row) < _SMALLEST_ROWS or not table <= distance < (
                    table + max(count, per_row) * size
                ):
                    continue
                beyond = distance - table
                extra = f" + {beyond} bytes" if beyond else ""
                return (
                    f"offset = {label} ({count}) x {other} ({per_row}) x {size} bytes{extra}: "
                    f"just past the end of {label} x {other} elements?",
                    f"just past {label} x {other} elements?",
                )
    return None


def _reasoning(
    culprit: KernelArgument, index: tuple[str, str] | None, runner_up: KernelArgument | None
) -> tuple[str, str]:
    """Why `culprit` was chosen, in full and in a few words."""
    distance = culprit.distance or 0
    label = culprit.label
    if index is not None:
        why, gist = index
    elif distance < 0:
        why = gist = f"just below {label}: a negative index?"
    elif distance == 0:
        why = gist = f"exactly at {label}"
    else:
        why = f"the closest pointer below: past the end of {label}, or inside it"
        gist = f"past the end of {label}, or inside it"
    if runner_up is not None:
        why += f"; runner-up: {runner_up.relation}"
    return why, gist
