"""Prose that quotes C++ names, made short: a headline such as ``Warp Illegal Address in
cutlass::device_kernel<…> at cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<…
3,000 characters …> >+0x100`` as a table cell or a summary line shows each long name in its
short form (`postmortem.demangle.short_name`), so that thirty ranks of one CUTLASS fault fit an
issue; the reports keep the whole text once, one click away.
"""

from __future__ import annotations

import re

from postmortem.demangle import HEADING_FULL_NAME, short_name

# Where a templated name starts: an identifier (maybe qualified) right before its `<`.
_NAME_START = re.compile(r"[A-Za-z_~][\w:~]*<")
_OPENING = "<([{"
_CLOSING = ">)]}"
_CONTINUES = re.compile(r"::~?\w+")


def brief_text(text: str, limit: int = HEADING_FULL_NAME) -> str:
    """`text` with each templated name longer than `limit` in its short form; the rest as it
    is. A name whose brackets do not pair up is left whole. Linear in the text's length:
    the brackets are paired in one pass (a kernel's name comes from the dump)."""
    if len(text) <= limit:
        return text
    closing = _pairs(text)
    out, done = [], 0
    for start in _NAME_START.finditer(text):
        if start.start() < done:
            continue
        end = _name_end(text, start.end() - 1, closing)
        if end is None or end - start.start() <= limit:
            continue
        out += [text[done : start.start()], short_name(text[start.start() : end])]
        done = end
    return "".join([*out, text[done:]])


def _pairs(text: str) -> dict[int, int]:
    """Each opening bracket's index to its closing one's, any kind closing any (as a
    demangled name nests them); an opening never closed has no entry."""
    pairs: dict[int, int] = {}
    open_at: list[int] = []
    for index, char in enumerate(text):
        if char in _OPENING:
            open_at.append(index)
        elif char in _CLOSING and open_at:
            pairs[open_at.pop()] = index
    return pairs


def _name_end(text: str, opening: int, closing: dict[int, int]) -> int | None:
    # The end of the name whose template argument list opens at `opening`: past its closing
    # `>`, any `::member<…>` after it, and a parameter list right after; None if unpaired.
    position = opening
    while True:
        closed = closing.get(position)
        if closed is None:
            return None
        position = closed + 1
        more = _CONTINUES.match(text, position)
        if more is not None:
            position = more.end()
        if position < len(text) and text[position] in "<(":
            continue
        return position
