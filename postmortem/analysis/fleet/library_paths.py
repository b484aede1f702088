"""Library paths: fnmatch patterns that a source path matches whole or by any tail after a ``/``.

A rules file may come from a project's settings, and the paths from a dump, so neither is
trusted to be small or kind. Each pattern is compiled once per set of rules (fnmatch's own
translation, which keeps a match to about the path's length times the pattern's) and tried
once per path, not once per tail: a pattern is cut at its first ``*`` into a fixed-length
head and the rest, and only the first tail whose start the head matches is tried with the
rest. A later tail cannot do better: the ``*`` that begins the rest takes in whatever lies
between.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass

_TAIL_START = r"(?:\A|(?<=/))"  # a tail begins the path or follows a '/'


@dataclass(frozen=True, slots=True)
class _Compiled:
    head: re.Pattern[str]
    """Searches for the first tail start whose text the head (all of a star-free pattern)
    matches."""
    head_chars: int
    """How many characters the head matches."""
    rest: re.Pattern[str] | None
    """The pattern from its first ``*``, matched from the end of the head; None: no ``*``."""


def matches_library(path: str, patterns: tuple[str, ...]) -> bool:
    """True when `path`, or a tail of it after a ``/``, matches one of the fnmatch
    `patterns` (case-sensitive; ``*`` crosses ``/``)."""
    return _matches(path, patterns)


@functools.lru_cache(maxsize=4096)
def _matches(path: str, patterns: tuple[str, ...]) -> bool:
    # Cached: a scan meets the same few hundred paths in every dump.
    for compiled in _compile(patterns):
        found = compiled.head.search(path)
        if found is not None and (
            compiled.rest is None
            or compiled.rest.match(path, found.start() + compiled.head_chars) is not None
        ):
            return True
    return False


@functools.lru_cache(maxsize=8)
def _compile(patterns: tuple[str, ...]) -> tuple[_Compiled, ...]:
    return tuple(_compile_one(p) for p in patterns)


def _compile_one(pattern: str) -> _Compiled:
    star, chars = _first_star(pattern)
    if star is None:
        return _Compiled(re.compile(_TAIL_START + fnmatch.translate(pattern)), chars, None)
    # The head followed by a '*', so that it matches as a prefix of the tail.
    head = re.compile(_TAIL_START + fnmatch.translate(pattern[:star] + "*"))
    return _Compiled(head, chars, re.compile(fnmatch.translate(pattern[star:])))


def _first_star(pattern: str) -> tuple[int | None, int]:
    """Where the first ``*`` outside a bracket expression is (None: there is none), and how
    many characters what comes before it matches; brackets read as fnmatch reads them."""
    i, chars = 0, 0
    while i < len(pattern):
        if pattern[i] == "*":
            return i, chars
        if pattern[i] == "[":
            j = i + 1
            j += pattern[j : j + 1] == "!"
            j += pattern[j : j + 1] == "]"
            end = pattern.find("]", j)
            i = i if end < 0 else end  # no closing ']': a literal '['
        i += 1
        chars += 1
    return None, chars
