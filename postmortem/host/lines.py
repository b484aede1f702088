r"""Lines of a host log as every parser walks them: numbered, bounded, header skipped.

A parser sees each line at most `MAX_LINE_CHARS` long, so a multi-megabyte line without a
newline costs no more than a short one. Within a line, every parser runs in time linear in
its length: no pattern has a repeat next to another that can match the same characters
(``\s*(.{0,N})$``, ``(.{1,N}?)\.?\s*$``), which backtracks over the rest of the line at
every start. A piece between two markers is cut with `between`, a name that ends the line
with `ending_name`.
A recorded excerpt may start with ``# source:`` / ``# note:`` lines saying where it came
from; they are not log text and no parser reads them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

MAX_LINE_CHARS = 4096
"""How much of one line a parser reads."""

_HEADER = ("# source:", "# note:", "# tool-version:")
_DIM3 = re.compile(r"\(\s*(\d{1,10})\s*,\s*(\d{1,10})\s*,\s*(\d{1,10})\s*\)")
_DIM3_BRACKETS = re.compile(r"\[\s*(\d{1,10})\s*,\s*(\d{1,10})\s*,\s*(\d{1,10})\s*\]")


def numbered(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for every line after a leading ``# source:`` header,
    each cut to `MAX_LINE_CHARS` and stripped of its line ending."""
    in_header = True
    for number, line in enumerate(lines, start=1):
        text = line[:MAX_LINE_CHARS].rstrip("\r\n")
        if in_header and text.startswith(_HEADER):
            continue
        in_header = False
        yield number, text


def between(
    text: str, before: re.Pattern[str], after: str, limit: int, *, longest: bool = False
) -> str | None:
    """The 1 to `limit` characters between the first match of `before` and the first `after`
    past them (with `longest`, the last `after` within `limit`); None when there is none.

    Like ``before(.{1,limit}?)after`` (``before(.{1,limit})after`` with `longest`), but at
    the first `before` only, and in time linear in the line: such a pattern backtracks over
    `limit` characters at each of the line's `before`s.
    """
    found = before.search(text)
    if found is None:
        return None
    start = found.end()
    find = text.rfind if longest else text.find
    end = find(after, start + 1, start + limit + len(after))
    return text[start:end] if end >= 0 else None


def ending_name(text: str, limit: int) -> str | None:
    r"""The name that `text` (the rest of a line) holds, without the blanks around it and one
    full stop at its end (``Warp Illegal Address.``): empty when `text` is blank, None when
    `text` is empty or the name is over `limit` characters before its leading blanks go.

    What ``(.{1,limit}?)\.?\s*$`` finds, stripped, in time linear in the line (that pattern
    tries every length of the name against the rest of the line).
    """
    name = text.rstrip()
    if len(name) > 1:
        name = name.removesuffix(".")
    if not name:
        return "" if text else None
    return name.strip() if len(name) <= limit else None


def dim3(text: str | None, *, brackets: bool = False) -> tuple[int, int, int] | None:
    """``(5,0,0)`` (or ``[5,0,0]``) as a tuple, or None."""
    if text is None:
        return None
    found = (_DIM3_BRACKETS if brackets else _DIM3).search(text)
    if found is None:
        return None
    x, y, z = (int(v) for v in found.groups())
    return x, y, z


def hex_int(text: str | None) -> int | None:
    """``0x7f12_34560000`` (underscores allowed, as the driver groups digits) as an int."""
    if not text:
        return None
    digits = text.lower().removeprefix("0x").replace("_", "")
    if not digits or len(digits) > 16:
        return None
    try:
        return int(digits, 16)
    except ValueError:
        return None


def bounded(text: str, limit: int = 240) -> str:
    """`text` cut to `limit` characters, with an ellipsis when cut."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
