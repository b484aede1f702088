"""How sizes and 3-D coordinates are spelled for people, the same in every layer.

The analysis writes them into its findings' messages and the report into its text, so they
live below both; the report's other spellings are in `postmortem.report.values`.
"""

from __future__ import annotations

from collections.abc import Sequence


def size_text(size: int) -> str:
    """A size in bytes for people: ``812 bytes``, ``4.6 KiB``, ``7.9 MiB``, ``1.2 GiB``."""
    value = float(size)
    for unit in ("bytes", "KiB", "MiB"):
        if value < 1024:
            return f"{size} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def dim3_text(value: Sequence[int | None] | None) -> str:
    """A block, thread or grid coordinate, ``(5,0,0)``; ``(?)`` when the dump does not say,
    and ``?`` for a part it does not hold (``(67,0,?)`` from a row too short for z)."""
    if value is None:
        return "(?)"
    return "({},{},{})".format(*("?" if part is None else part for part in value))


SHOWN_BLOCKS = 4
"""Blocks a finding names before it counts the rest."""


def blocks_text(blocks: Sequence[Sequence[int | None]]) -> str:
    """The blocks a finding is about: ``block (1,0,0)``, or ``3 blocks ((1,0,0), (2,0,0),
    (4,0,0)), each`` (past `SHOWN_BLOCKS`, ``and N more``)."""
    shown = ", ".join(dim3_text(b) for b in blocks[:SHOWN_BLOCKS])
    if len(blocks) == 1:
        return f"block {shown}"
    more = len(blocks) - SHOWN_BLOCKS
    return f"{len(blocks)} blocks ({shown}{f' and {more} more' if more > 0 else ''}), each"
