r"""Python reprs as a log prints them, read without evaluating them: items at one level.

A tool that logs its state as ``Name(a=1, b=[…], c='x')`` (vLLM's engine dump,
`postmortem.host.vllm`) is read one nesting level at a time: `split_items` finds the commas
of one level, jumping from bracket to bracket and over quoted strings with one regular
expression that cannot backtrack (a run of brackets is one step), and `named_values` turns
``name=value`` items into the spans of their values. Nothing is evaluated, and the work is
bounded twice: by the text given (the caller cuts it) and by `Repr.steps`, the steps every
scan of one text may take in all, so that a crafted text costs a bounded time whatever its
shape (a line of ``a=(),`` is three steps every five characters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from postmortem.host.lines import bounded

Span = tuple[int, int]
"""[start, end) in `Repr.text`."""

_TOP = re.compile(r"[(\[{]+|[)\]}]+|['\",]")
"""What matters at the level being split: brackets, quotes, and the commas between items."""
_DEEP = re.compile(r"[(\[{]+|[)\]}]+|['\"]")
"""What matters below it: brackets and quotes only."""
_NAME = re.compile(r"\s{0,16}([A-Za-z_]\w{0,63})=")
_OBJECT = re.compile(r"[A-Za-z_]\w{0,63}\(")
_NONBLANK = re.compile(r"\S")
_OPENS_STRING = frozenset("=([{,: \t\n")
"""What comes before a quote that opens a string (else it is an apostrophe in a word)."""


@dataclass(slots=True)
class Repr:
    """A repr being read, and the scanning steps left to every read of it."""

    text: str
    steps: int
    """Brackets, quotes and commas the scans may still step on; at 0, a scan stops where it
    is, as if the text ended there."""


def split_items(
    text: Repr, start: int, keep: int, stop: int | None = None
) -> tuple[list[Span], int, int | None]:
    """The items from `start` to the bracket that closes the one before it (reading no
    further than `stop`): the spans of the first `keep` items that are not blank, how many
    such items there are, and where the closing bracket is (None: the text, or its steps,
    ended first). Items at deeper levels are skipped whole."""
    source = text.text
    stop = len(source) if stop is None else stop
    spans: list[Span] = []
    count = depth = 0
    item = at = start
    end, close = stop, None
    while text.steps > 0 and (found := (_DEEP if depth else _TOP).search(source, at, stop)):
        text.steps -= 1
        char, at = source[found.start()], found.end()
        if char in "'\"":
            after = _string_end(source, found.start(), stop)
            if after is None:
                break
            at = after
        elif char in "([{":
            depth += at - found.start()
        elif char in ")]}":
            if at - found.start() > depth:  # this run closes the level being split
                end = close = found.start() + depth
                break
            depth -= at - found.start()
        else:
            count += _kept(source, spans, (item, found.start()), keep)
            item = at
    if close is None and text.steps <= 0:
        end = at  # out of steps: what was read is all there is
    count += _kept(source, spans, (item, end), keep)
    return spans, count, close


def named_values(text: str, spans: list[Span], *, join_loose: bool = False) -> dict[str, Span]:
    """``name=value`` items as name → the span of the value (the first item of a name).

    With `join_loose`, an item that is not ``name=…`` joins the value before it (a value
    printed unquoted with a comma in it); without, it is left out.
    """
    values: dict[str, Span] = {}
    last: str | None = None
    for start, end in spans:
        found = _NAME.match(text, start, end)
        if found is not None:
            last = found.group(1)
            values.setdefault(last, (found.end(), end))
        elif join_loose and last is not None and values[last][1] == start - 1:
            values[last] = (values[last][0], end)
    return values


def object_fields(text: Repr, span: Span | None) -> dict[str, Span]:
    """The fields of the ``Name(a=…, b=…)`` at `span`; empty when it is not one."""
    if span is None:
        return {}
    found = _OBJECT.match(text.text, skip_blanks(text.text, span[0]), span[1])
    if found is None:
        return {}
    spans, _, _ = split_items(text, found.end(), keep=64, stop=span[1])
    return named_values(text.text, spans)


def find_object(text: Repr, start: int, within: int) -> int | None:
    """Where the fields of the first ``Name(`` within `within` characters of `start` begin."""
    found = _OBJECT.search(text.text, start, start + within)
    return found.end() if found is not None else None


def collection_items(text: Repr, span: Span | None, keep: int) -> tuple[list[Span], int | None]:
    """The first `keep` items of the list, tuple, set or dict at `span` (``[…]``, ``(…)``,
    ``{…}``, ``set()``) and how many there are; None for the count when it is not one."""
    if span is None:
        return [], None
    start = skip_blanks(text.text, span[0])
    if text.text.startswith("set()", start):
        return [], 0
    if start >= span[1] or text.text[start] not in "[({":
        return [], None
    spans, count, _ = split_items(text, start + 1, keep, stop=span[1])
    return spans, count


def count_items(text: Repr, span: Span | None) -> int | None:
    """How many items the collection at `span` holds; None when it is not one."""
    return collection_items(text, span, 0)[1]


def value_text(text: str, span: Span | None, limit: int) -> str | None:
    """The value at `span`, stripped and unquoted, cut to `limit`; None when there is none."""
    if span is None:
        return None
    value = text[span[0] : min(span[1], span[0] + limit * 2)].strip()
    return bounded(unquoted(value), limit) if value else None


def unquoted(value: str) -> str:
    """`value` without the quotes around it, when it has them."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def skip_blanks(text: str, at: int) -> int:
    """The first character at or after `at` that is not blank (within 64)."""
    found = _NONBLANK.search(text, at, at + 64)
    return found.start() if found else at


def _kept(text: str, spans: list[Span], span: Span, keep: int) -> int:
    """1 when `span` holds more than blanks (kept among the first `keep`), else 0."""
    if _NONBLANK.search(text, span[0], span[1]) is None:
        return 0
    if len(spans) < keep:
        spans.append(span)
    return 1


def _string_end(text: str, start: int, stop: int) -> int | None:
    """Past the closing quote of the string the quote at `start` opens; past the quote itself
    when it opens none (an apostrophe inside a word); None when the text does not close it."""
    quote = text[start]
    before = start - 1
    while before >= 0 and start - before <= 8 and text[before] in " \t":
        before -= 1
    if before >= 0 and text[before] not in _OPENS_STRING:
        return start + 1
    at = start + 1
    while (end := text.find(quote, at, stop)) >= 0:
        # Each run of backslashes is counted once: by the quote that ends it.
        escapes = 0
        while text[end - 1 - escapes] == "\\":
            escapes += 1
        if escapes % 2 == 0:
            return end + 1
        at = end + 1
    return None
