"""Read the tables of ``info cuda …`` by their header row.

cuda-gdb prints these tables with gdb's ui-out: most columns are right-aligned, each as wide
as the widest of its header and its cells, one space apart; the first column (header " ")
holds ``*`` on the row in focus, and group lines such as ``Device 0 SM 3`` or ``Kernel 1``
sit between the rows. Columns differ between versions (11.8's ``Active Physical PC`` is
``Active PC`` in later sources; the manual shows ``Name`` and ``Args`` where 11.8 prints
``Invocation``), so cells are addressed by header text, never by position.

Pasted output can hold gdb's pager prompt between rows (dropped here) and lines a terminal
wrapped at its width and continued at column 0 of the next line. Those are joined back where
that is unambiguous: a header continued by lines of header words only; a row with fewer cells
than the header, or one followed by a piece that cannot be a row of its own, when the next
line does not start a row (``*``, or a first cell ending where the first column ends) and the
joined line has exactly the header's cells. Otherwise the pieces stay apart and the table is
refused.

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
# takes the words left over, and in aligned output they may be empty (12.8's threads print
# an empty Filename where there is no line info). Exception: an exception name.
FREE_TEXT_HEADERS = frozenset(
    {"Invocation", "Args", "Name", "Description", "Filename", "Exception"}
)
# Status: "Active (preempted)" (cuda-gdb's status_string_preempted), one cell of two words.
MULTI_WORD_HEADERS = FREE_TEXT_HEADERS | {"Status", "State"}
# Every word cuda-gdb prints in a table header: where a wrapped header was cut between two
# non-blank characters, the words there decide between "one word cut" and "a space lost".
HEADER_WORDS = frozenset(
    (
        *" ".join(KNOWN_HEADERS).split(),
        *("Dev", "Name", "Description", "SMs", "Warps/SM", "Lanes/Warp", "Wp", "Kernel"),
        *("BlockIdx", "ThreadIdx", "Ln", "State", "Exception", "Parent", "Grid", "Status"),
        *("GridDim", "BlockDim", "Invocation", "Args", "Context", "Count", "Filename", "Line"),
        *("SM", "Lvl", "ClusterIdx"),
    )
)
# A word in parentheses qualifies the cell before it: "Active (preempted)".
_QUALIFIER = re.compile(r"^\([a-z][a-z ]*\)$")
# gdb's pager prompt, left in pasted output between two rows (12.8/nvfp4-gemv-cluster__info-
# cuda-threads.txt); what the user typed after it ("c") may follow on the same line.
_PAGER = re.compile(r"^--Type <RET> for more, q to quit, c to continue without paging--")
_HEADER_PIECE = re.compile(r"^[A-Za-z/ ]+$")
_MAX_PIECES = 8

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
    # Trailing spaces are kept until wrapped lines are joined: a terminal cuts at its width.
    lines = [line for line in text.splitlines() if line.strip() and not _PAGER.match(line)]
    if len(lines) == 1 and _EMPTY_MESSAGE.match(lines[0]):
        return Table((), ())
    header_at = next((i for i, line in enumerate(lines) if not _GROUP_LINE.match(line)), None)
    if header_at is None:
        return "no header row"
    header, body_at = _rejoin_header(lines, header_at)
    columns = split_header(header)
    if not columns or not any(c.name[0].isalpha() for c in columns):
        return "no header row"
    rows: list[Row] = []
    group: dict[str, int] = {}
    body = _rejoin_rows(lines[body_at:], columns)
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


def _rejoin_header(lines: list[str], at: int) -> tuple[str, int]:
    # A header longer than the terminal continues on the next lines, with header words only
    # (11.8's devices header is 168 columns wide).
    header, end = lines[at], at + 1
    while end < len(lines) and end - at < _MAX_PIECES:
        piece = lines[end]
        if _GROUP_LINE.match(piece) or not _HEADER_PIECE.match(piece):
            break
        joined = _join_header(header, piece)
        if joined is None:
            break
        header, end = joined, end + 1
    return header.rstrip(), end


def _join_header(header: str, piece: str) -> str | None:
    # The cut falls inside a word ("Lanes" + "/Warp") or between words, where a paste may have
    # dropped the space: take the reading that makes header words, or none.
    if header[-1:].isspace() or piece[:1].isspace():
        return header + piece
    left, right = header.split()[-1], piece.split()[0]
    if left + right in HEADER_WORDS:
        return header + piece
    if left in HEADER_WORDS and right in HEADER_WORDS:
        return f"{header} {piece}"
    return None


def _rejoin_rows(body: list[str], columns: list[Column]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(body):
        line, end = body[i], i + 1
        joined, k = line, i + 1
        while (
            not _GROUP_LINE.match(line)
            and k < len(body)
            and k - i < _MAX_PIECES
            and _continues(body[k], columns)
            # a complete row followed by a line that is a row of its own: two rows
            and not (_fits(joined, columns) and _fits(body[k], columns))
        ):
            joined, k = _join_row(joined, body[k], columns), k + 1
            if _fits_joined(joined, columns):
                line, end = joined, k
        out.append(line.rstrip())
        i = end
    return out


def _join_row(line: str, piece: str, columns: list[Column]) -> str:
    # The terminal cut at its width, inside a cell or between cells; if pasting dropped the
    # trailing spaces of the cut line, gluing the pieces loses a cell, and a space puts it back.
    glued = line + piece
    if _fits_joined(glued, columns):
        return glued
    spaced = line.rstrip() + " " + piece
    return spaced if _fits_joined(spaced, columns) else glued


def _continues(line: str, columns: list[Column]) -> bool:
    # A new row starts with the focus "*" or has its first cell end where the first column
    # ends (right-aligned); anything else after an incomplete row is its continuation.
    if _GROUP_LINE.match(line):
        return False
    current, tokens = _tokens(line)
    return not current and bool(tokens) and tokens[0][2] != columns[0].end


def _fits(line: str, columns: list[Column]) -> bool:
    _, tokens = _tokens(line)
    return _fits_aligned(tokens, columns) or not isinstance(_cells_collapsed(tokens, columns), str)


def _fits_joined(line: str, columns: list[Column]) -> bool:
    # A joined line must be a row for sure: aligned, one word per column, or extra words only
    # in a last free-text column (where a cut piece lands), never in a middle one.
    _, tokens = _tokens(line)
    if _fits_aligned(tokens, columns) or len(tokens) == len(columns):
        return True
    return columns[-1].name in FREE_TEXT_HEADERS and _fits(line, columns)


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
    tokens: list[tuple[str, int, int]] = []
    for m in re.finditer(r"\S+", line):
        if tokens and _QUALIFIER.match(m.group()) and m.start() == tokens[-1][2] + 1:
            tokens[-1] = (f"{tokens[-1][0]} {m.group()}", tokens[-1][1], m.end())
        else:
            tokens.append((m.group(), m.start(), m.end()))
    return current, tokens


def _is_aligned(columns: list[Column], body: list[str]) -> bool:
    # Right-aligned output ends every row exactly where the last header ends.
    data = [line for line in body if not _GROUP_LINE.match(line)]
    return all(_fits_aligned(_tokens(line)[1], columns) for line in data)


def _fits_aligned(tokens: list[tuple[str, int, int]], columns: list[Column]) -> bool:
    # Reading by header ends gives every column a cell, one word long unless free text, and
    # empty only in a free-text column.
    if not tokens or tokens[-1][2] != columns[-1].end:
        return False
    cells = _cells_aligned(tokens, columns)
    if isinstance(cells, str):
        return False
    for name, text in cells:
        words = len(text.split())
        if (words == 0 and name not in FREE_TEXT_HEADERS) or (
            words > 1 and name not in MULTI_WORD_HEADERS
        ):
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
