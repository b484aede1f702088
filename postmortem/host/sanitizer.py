"""compute-sanitizer's memcheck report (and cuda-memcheck's, its predecessor), as text.

Every line of the report starts with its prefix, ``=========`` unless ``--prefix`` changed
it. One error is a headline and the lines under it
(fixtures/hostlogs/sanitizer_parafrost_issue.txt)::

    ========= Invalid __global__ write of size 4 bytes
    =========     at ParaFROST::cnt_cls_lits(const ParaFROST::CNF *)+0x8b0
    =========     by thread (0,0,0) in block (278,0,0)
    =========     Address 0x7fe71d800958 is out of bounds
    =========     and is 85 bytes after the nearest allocation at 0x7fe71d800900 of size 4 bytes

With line info the ``at`` line ends in ``in FILE:LINE``; since 2025 the address line may read
``Access to 0x… is out of bounds`` (fixtures/hostlogs/sanitizer_pytorch_issue.txt).
cuda-memcheck wrote the offset first, ``at 0x000000c8 in FILE:LINE:KERNEL``
(fixtures/hostlogs/memcheck_pastebin_tegra.txt). A hardware exception memcheck could not
attribute precisely is headed by the exception's name (``Warp Illegal Address``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from postmortem.exceptions import EXCEPTIONS
from postmortem.host.lines import bounded, dim3, hex_int, numbered
from postmortem.host.model import SanitizerError, SanitizerLog

_KEPT = 16
_PREFIX = "========="
_HEADLINE = re.compile(
    r"^Invalid (__\w{1,16}__|\w{1,16}) (\w{1,24}) of size (\d{1,12})(?: bytes?)?\s*$"
)
# An offset of 1 to 16 hex digits, ending the line or followed by the source.
_OFFSET_AT_END = re.compile(r"\+0x([0-9A-Fa-f]{1,16})$")
_OFFSET_IN = re.compile(r"\+0x([0-9A-Fa-f]{1,16}) in ")
_OFFSET_CHARS = 19  # "+0x" and 16 digits
_LINE_NUMBER = re.compile(r":(\d{1,9})$")
_AT_OFFSET = re.compile(r"^at 0x([0-9A-Fa-f]{1,16}) in (.{1,4000})$")
_LINE_AT = re.compile(r":(?=(\d{1,9}):)")
_PIECE_CHARS = 2048
_THREAD = re.compile(r"^by thread (\([\d,\s]{5,40}\)) in block (\([\d,\s]{5,40}\))")
_ADDRESS = re.compile(r"^(?:Address|Access to|Access at) (0x[0-9A-Fa-f]{1,16}) (is .{1,200})$")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d{1,12}) errors?")
_HARDWARE = frozenset(kind.name for kind in EXCEPTIONS if kind.code)


@dataclass
class _State:
    errors: list[SanitizerError] = field(default_factory=list)
    seen: int = 0
    summary: int | None = None
    open: bool = False
    """The last error still takes the lines under it."""


def parse_sanitizer_report(lines: Iterable[str]) -> SanitizerLog | None:
    """The errors of a memcheck text report, or None when the lines hold none.

    Never raises; a line it does not understand is skipped.
    """
    state = _State()
    for number, text in numbered(lines):
        _read_line(state, number, text)
    if not state.seen and state.summary is None:
        return None
    return SanitizerLog(tuple(state.errors), state.seen, state.summary)


def _read_line(state: _State, number: int, text: str) -> None:
    at = text.find(_PREFIX)
    if at < 0:
        state.open = False
        return
    body = text[at + len(_PREFIX) :].lstrip("=").strip()
    summary = _SUMMARY.search(body)
    if summary is not None:
        state.summary = int(summary.group(1))
        state.open = False
        return
    headline = _HEADLINE.match(body)
    if headline is not None or body in _HARDWARE:
        _new_error(state, number, body, headline)
        return
    if not body or body.startswith(("Saved host backtrace", "Host Frame", "Device Frame")):
        state.open = False
        return
    if state.open and len(state.errors) == state.seen:
        state.errors[-1] = _detail(state.errors[-1], body)


def _new_error(state: _State, number: int, body: str, headline: re.Match[str] | None) -> None:
    state.seen += 1
    state.open = len(state.errors) < _KEPT
    if not state.open:
        return
    space = access = None
    size = None
    if headline is not None:
        space = headline.group(1).strip("_")
        access = headline.group(2)
        size = int(headline.group(3))
    state.errors.append(SanitizerError(number, bounded(body, 200), space, access, size))


def _detail(error: SanitizerError, body: str) -> SanitizerError:
    if body.startswith("at "):
        return _location(error, body)
    thread = _THREAD.match(body)
    if thread is not None:
        return replace(error, thread=dim3(thread.group(1)), block=dim3(thread.group(2)))
    address = _ADDRESS.match(body)
    if address is not None:
        note = bounded(address.group(2), 200)
        return replace(error, address=hex_int(address.group(1)), address_note=note)
    if body.startswith("and is ") and error.allocation_note is None:
        return replace(error, allocation_note=bounded(body, 200))
    return error


def _named_location(body: str) -> tuple[str, str, str | None, str | None] | None:
    """``at KERNEL+0xOFFSET[ in PATH:LINE]``: the shortest kernel name followed by an offset
    that ends the line or is followed by the source. Linear in the line's length: a regular
    expression with a lazy name and a lazy path backtracks quadratically on crafted lines.
    Without a line number only an offset that ends the line can do; with one, only an offset
    whose path (1 to 2048 characters) ends at its colon: each is searched where it can be."""
    rest = body[3:]
    # The source's line number can only follow the last colon (digits hold none).
    number = _LINE_NUMBER.search(rest)
    if number is None:
        found = _OFFSET_AT_END.search(rest, max(1, len(rest) - _OFFSET_CHARS))
        if found is None or found.start() > 4000:
            return None
        return rest[: found.start()], found.group(1), None, None
    colon = number.start()
    for found in _OFFSET_IN.finditer(rest, max(1, colon - _PIECE_CHARS - 4 - _OFFSET_CHARS), colon):
        if found.start() > 4000:
            return None
        if 1 <= colon - found.end() <= _PIECE_CHARS:
            return rest[: found.start()], found.group(1), rest[found.end() : colon], number.group(1)
    return None


def _source_and_name(rest: str) -> tuple[str, str, str] | None:
    r"""``PATH:LINE:KERNEL`` split at the first colon that a line number and a colon follow,
    the path and the kernel of 1 to 2048 characters each.

    What ``^(.{1,2048}?):(\d{1,9}):(.{1,2048})$`` finds, in time linear in the line: that
    pattern backtracked over the kernel at every colon of the path (20 s on an 8 MB log of
    crafted lines). A colon further than 2048 characters (and a line number) from the end
    leaves too long a kernel, so the search starts where one cannot.
    """
    first = max(1, len(rest) - _PIECE_CHARS - 11)
    for found in _LINE_AT.finditer(rest, first):
        colon, after = found.start(), found.end(1)
        if colon > _PIECE_CHARS:
            return None
        if 1 <= len(rest) - after - 1 <= _PIECE_CHARS:
            return rest[:colon], found.group(1), rest[after + 1 :]
    return None


def _location(error: SanitizerError, body: str) -> SanitizerError:
    offset_first = _AT_OFFSET.match(body)
    if offset_first is not None:
        offset, rest = hex_int(offset_first.group(1)), offset_first.group(2)
        source = _source_and_name(rest)
        if source is not None and not source[2].startswith(":"):
            return replace(
                error, offset=offset, kernel=bounded(source[2], 2048),
                source_file=bounded(source[0], 1024), source_line=int(source[1]),
            )  # fmt: skip
        return replace(error, offset=offset, kernel=bounded(rest, 2048))
    named = _named_location(body)
    if named is None:
        return error
    kernel, offset_hex, path, line = named
    return replace(
        error, kernel=bounded(kernel, 2048), offset=hex_int(offset_hex),
        source_file=bounded(path, 1024) if path else None,
        source_line=int(line) if line else None,
    )  # fmt: skip
