"""Read the tables of ``info cuda …`` by their header row.

cuda-gdb prints these tables with gdb's ui-out: most columns are right-aligned, each as wide
as the widest of its header and its cells, one space apart; the first column (header " ")
holds ``*`` on the row in focus, and group lines such as ``Device 0 SM 3`` or ``Kernel 1``
sit between the rows. Columns differ between versions (11.8's ``Active Physical PC`` is
``Active PC`` in later sources; the manual shows ``Name`` and ``Args`` where 11.8 prints
``Invocation``), so cells are addressed by header text, never by position.

Two layouts are read:
* aligned (what cuda-gdb prints): a token belongs to the first column whose header ends at
  or after the token's end. This keeps multi-word cells (``NVIDIA H100 80GB HBM3``) whole.
* collapsed (published copies whose spaces were squeezed, and tables with a centred or
  left-aligned column, such as 11.8's lanes ``Exception`` and kernels ``Invocation``): one
  word per column, except that the one free-text column (``Invocation``, ``Args``,
  ``Exception`` …) takes what is left over. A row this cannot split is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Header names cuda-gdb has printed (cuda-gdb sources and recorded transcripts). Multi-word
# names are matched before single words, so "Active Lanes Mask" is one column.
KNOWN_HEADERS: tuple[str, ...] = (
    "Active Lanes Mask",
    "Divergent Lanes Mask",
    "Active Physical PC",
    "Active PC",
    "First Active ThreadIdx",
    "Active Warps Mask",
    "Active SMs Mask",
    "PCI Bus/Dev ID",
    "Max Regs/Lane",
    "SM Type",
    "SMs Mask",
    "Physical PC",
    "Virtual PC",
    "To BlockIdx",
    "To ThreadIdx",
)
# Columns whose cells may be several words; in collapsed output the one of them present
# takes the words left over. Status: "Active (preempted)"; Exception: an exception name.
FREE_TEXT_HEADERS = frozenset(
    {"Invocation", "Args", "Name", "Description", "Filename", "Exception"}
)
MULTI_WORD_HEADERS = FREE_TEXT_HEADERS | {"Status", "State"}

_GROUP_LINE = re.compile(
    r"^\s*(?:Device (?P<device>\d+)(?: SM (?P<sm>\d+))?(?: Warp (?P<warp>\d+))?"
    r"|Kernel (?P<kernel>-?\d+))\s*$"
)
_EMPTY_MESSAGE = re.compile(r"^\s*No CUDA [\w ]+\.?\s*$")


@dataclass(frozen=True, slots=True)
class Column:
    """A column header and where its text sits on the header line."""

    name: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Row:
    """One data row: the focus marker, the group it sits in and its cells by header."""

    current: bool
    group: tuple[tuple[str, int], ...]
    cells: tuple[tuple[str, str], ...]

    def get(self, *headers: str) -> str | None:
        """Returns the first cell under one of `headers`, or None."""
        wanted = {h.casefold() for h in headers}
        for header, text in self.cells:
            if header.casefold() in wanted:
                return text
        return None

    def group_value(self, key: str) -> int | None:
        """Returns N of the ``Device N``/``SM N``/``Warp N``/``Kernel N`` group line."""
        for name, value in self.group:
            if name == key:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Table:
    """A parsed table: its columns and its rows (none for ``No CUDA kernels.``)."""

    columns: tuple[Column, ...]
    rows: tuple[Row, ...]


def read_table(text: str) -> Table | str:
    """Reads an ``info cuda`` table.

    Args:
        text: What cuda-gdb printed for the command.

    Returns:
        The table, or a one-line reason why the text is not one.
    """
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and _EMPTY_MESSAGE.match(lines[0]):
        return Table((), ())
    header_at = next((i for i, line in enumerate(lines) if not _GROUP_LINE.match(line)), None)
    if header_at is None:
        return "no header row"
    columns = split_header(lines[header_at])
    if not columns or not any(c.name[0].isalpha() for c in columns):
        return "no header row"
    rows: list[Row] = []
    group: dict[str, int] = {}
    body = lines[header_at + 1 :]
    aligned = _is_aligned(columns, body)
    for line in body:
        match = _GROUP_LINE.match(line)
        if match:
            group = _update_group(group, match)
            continue
        row = _read_row(line, columns, group, aligned=aligned)
        if isinstance(row, str):
            return row
        rows.append(row)
    return Table(tuple(columns), tuple(rows))


def split_header(line: str) -> list[Column]:
    """Splits a header line into columns, joining the words of known multi-word headers.

    Args:
        line: The header line.

    Returns:
        The columns in order.
    """
    words = [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", line)]
    columns: list[Column] = []
    i = 0
    while i < len(words):
        taken = _match_known(words, i)
        first, last = words[i], words[i + taken - 1]
        name = " ".join(w[0] for w in words[i : i + taken])
        columns.append(Column(name, first[1], last[2]))
        i += taken
    return columns


def _match_known(words: list[tuple[str, int, int]], i: int) -> int:
    for known in KNOWN_HEADERS:
        parts = known.split(" ")
        candidate = words[i : i + len(parts)]
        if len(candidate) == len(parts) and all(
            w[0] == p for w, p in zip(candidate, parts, strict=True)
        ):
            return len(parts)
    return 1


def _update_group(group: dict[str, int], match: re.Match[str]) -> dict[str, int]:
    found = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "kernel" in found:
        return {**group, **found}
    return found


def _tokens(line: str) -> tuple[bool, list[tuple[str, int, int]]]:
    current = line.lstrip().startswith("*")
    if current:
        star = line.index("*")
        line = line[:star] + " " + line[star + 1 :]
    return current, [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", line)]


def _is_aligned(columns: list[Column], body: list[str]) -> bool:
    # Right-aligned output ends every row exactly where the last header ends, and reading
    # it by header ends gives every column a cell, one word long unless free text.
    data = [line for line in body if not _GROUP_LINE.match(line)]
    for line in data:
        _, tokens = _tokens(line)
        if not tokens or tokens[-1][2] != columns[-1].end:
            return False
        cells = _cells_aligned(tokens, columns)
        if isinstance(cells, str):
            return False
        for name, text in cells:
            words = len(text.split())
            if words == 0 or (words > 1 and name not in MULTI_WORD_HEADERS):
                return False
    return True


def _read_row(
    line: str, columns: list[Column], group: dict[str, int], *, aligned: bool
) -> Row | str:
    current, tokens = _tokens(line)
    if not tokens:
        return f"empty row: {line!r}"
    cells = _cells_aligned(tokens, columns) if aligned else _cells_collapsed(tokens, columns)
    if isinstance(cells, str):
        return f"{cells}: {line.strip()!r}"
    return Row(current, tuple(sorted(group.items(), key=_group_order)), cells)


def _group_order(item: tuple[str, int]) -> int:
    return ("device", "sm", "warp", "kernel").index(item[0])


def _cells_aligned(
    tokens: list[tuple[str, int, int]], columns: list[Column]
) -> tuple[tuple[str, str], ...] | str:
    parts: list[list[str]] = [[] for _ in columns]
    for text, _start, end in tokens:
        index = next((i for i, c in enumerate(columns) if c.end >= end), None)
        if index is None:
            return "a cell lies right of the last column"
        parts[index].append(text)
    return tuple((c.name, " ".join(p)) for c, p in zip(columns, parts, strict=True))


def _cells_collapsed(
    tokens: list[tuple[str, int, int]], columns: list[Column]
) -> tuple[tuple[str, str], ...] | str:
    texts = [t[0] for t in tokens]
    names = [c.name for c in columns]
    if len(texts) == len(names):
        return tuple(zip(names, texts, strict=True))
    free = [i for i, name in enumerate(names) if name in FREE_TEXT_HEADERS]
    if len(texts) < len(names) or len(free) != 1:
        return f"{len(texts)} cells for {len(names)} columns"
    at = free[0]
    after = len(names) - at - 1
    middle = texts[at : len(texts) - after]
    values = texts[:at] + [" ".join(middle)] + texts[len(texts) - after :]
    return tuple(zip(names, values, strict=True))
