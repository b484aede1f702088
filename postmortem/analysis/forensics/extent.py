"""Whether a faulting address is the first element past the end of a pointer's buffer, as
the kernel's count arguments size it: the strongest evidence of an out-of-bounds index, and
the easiest to find by coincidence, so it is said only under strict rules and as a
hypothesis with its numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from postmortem.analysis.forensics.argument import KernelArgument
from postmortem.analysis.forensics.paramtypes import pointee

# Both counts of a product must be at least this (few tensors have 1..7 rows, and small
# numbers multiply into too many offsets by chance).
_SMALLEST_ROWS = 8
# A product of two counts is tried only among this many counts (28 pairs): the chance that
# some pair lands on an offset by coincidence grows with the square of their number.
_MOST_COUNTS_FOR_PRODUCTS = 8

# An extent a pointer's elements may end at: the counts multiplied, and the element size.
_Extent = tuple[tuple[KernelArgument, ...], int]


def index_relation(
    pointer: KernelArgument, counts: Sequence[KernelArgument], width_bytes: int | None
) -> tuple[str, str] | None:
    """The address as the first element past the end of `pointer`'s count × element size
    elements, in full and in a few words; None unless one extent alone says so. The element
    size is the pointee's when its type says it, else the access width, else a usual size.
    One count may end up to one element before the address; a product of two (each at least
    `_SMALLEST_ROWS`) must end exactly at it. An offset two extents explain is no evidence."""
    distance = pointer.distance
    if distance is None or distance <= 0:
        return None
    element = pointee(pointer.type_name)
    if element is not None:
        tiers: list[list[int]] = [[element[1]]]
    else:
        widths = [width_bytes] if width_bytes else []
        tiers = [widths, [s for s in (4, 2, 8, 1) if s not in widths]]
    for find in (_one_count, _two_counts):
        for sizes in tiers:
            found = find(distance, counts, sizes)
            if len(found) > 1:
                return None
            if found:
                return _hint(pointer, found[0], element)
    return None


def _one_count(distance: int, counts: Sequence[KernelArgument], sizes: list[int]) -> list[_Extent]:
    found: dict[tuple[int, int], _Extent] = {}
    for size in sizes:
        for count in counts:
            if count.value * size <= distance < (count.value + 1) * size:
                found.setdefault((count.value, size), ((count,), size))
    return list(found.values())


def _two_counts(distance: int, counts: Sequence[KernelArgument], sizes: list[int]) -> list[_Extent]:
    if len(counts) > _MOST_COUNTS_FOR_PRODUCTS:
        return []
    found: dict[tuple[int, int, int], _Extent] = {}
    for size in sizes:
        for first, rows in enumerate(counts):
            for per_row in counts[first + 1 :]:
                low, high = sorted((rows.value, per_row.value))
                if low >= _SMALLEST_ROWS and low * high * size == distance:
                    found.setdefault((low, high, size), ((rows, per_row), size))
    return list(found.values())


def _hint(
    pointer: KernelArgument, extent: _Extent, element: tuple[str, int] | None
) -> tuple[str, str]:
    # The hypothesis with its evidence: which counts, their values, and what they multiply to.
    counts, size = extent
    distance = pointer.distance or 0
    end = size * math.prod(c.value for c in counts)
    held = " × ".join(c.name for c in counts)
    elements = f"{element[0]} elements" if element else f"elements of {size} bytes"
    beyond = distance - end
    where = f"{beyond} bytes into " if beyond else ""
    why = (
        f"the address is 0x{distance:x} bytes past {pointer.label}; "
        f"{' and '.join(f'{c.label} is {c.value}' for c in counts)}, and "
        f"{' × '.join(str(c.value) for c in counts)} × {size} bytes = 0x{end:x}: "
        f"if {pointer.name} holds {held} {elements}, this is {where}the first element past "
        "its end"
    )
    return why, f"index = {held}: one past the end?"
