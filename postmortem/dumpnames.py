"""What a dump's file name says: host, process id and time, when a `CUDA_COREDUMP_FILE`
pattern made it, and whether the name is meant for a dump at all.

`CUDA_COREDUMP_FILE` may hold ``%h`` (host name), ``%p`` (process id) and ``%t`` (time of the
dump, Unix seconds). Without it the driver picks the name; NVIDIA's manuals have given two
defaults, ``core_%t_%h_%p.nvcudmp`` (cuda-gdb's) and ``core.cuda.%h.%p`` (the driver API's
`CU_COREDUMP_FILE`). The patterns tried, first match wins: the user's own
(``--name-pattern``), then `DEFAULT_PATTERNS`, the more specific first. A ``.gz`` suffix is
ignored. These are facets of a scan's group, never part of a signature, and tell whether two
dumps are of one process (`postmortem.analysis.hang.pairing`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

DEFAULT_PATTERNS = (
    "core.cuda.%t.%p",
    "core_%h.%p.%t.nvcudmp",
    "core_%h.%p.%t",
    "core_%t_%h_%p.nvcudmp",
    "core.cuda.%h.%p",
    "%h.%p.%t.nvcudmp",
    "%h.%p.%t",
    "%h_%p_%t",
)
"""SGLang's crash folder (``core.cuda.%t.%p``), `postmortem capture`'s ``core_%h.%p.%t``,
cuda-gdb's and the driver API's defaults, then two generic forms."""
# %t must be a plausible Unix time: 2001-09-09 .. 2286-11-20 (ten digits)
_FIELDS = {"h": r"(?P<host>[^/]+?)", "p": r"(?P<pid>\d{1,10})", "t": r"(?P<time>\d{10})"}


@dataclass(frozen=True, slots=True)
class NameFacts:
    """What a dump's file name says about where and when it was written."""

    host: str | None
    pid: int | None
    time: int | None
    """Unix seconds from ``%t``."""
    pattern: str | None
    """The pattern that matched; None when none did."""


@lru_cache(maxsize=64)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A `CUDA_COREDUMP_FILE` pattern as a regular expression over a file name.

    ``%h``, ``%p``, ``%t`` capture; ``%%`` is a literal ``%``; a directory part is ignored.
    Raises ValueError on another ``%`` specifier or a field used twice.
    """
    name = pattern.rsplit("/", 1)[-1]
    parts: list[str] = []
    used: set[str] = set()
    index = 0
    while index < len(name):
        char = name[index]
        if char != "%":
            parts.append(re.escape(char))
            index += 1
            continue
        spec = name[index + 1 : index + 2]
        if spec == "%":
            parts.append("%")
        elif spec in _FIELDS and spec not in used:
            parts.append(_FIELDS[spec])
            used.add(spec)
        else:
            raise ValueError(f"name pattern {pattern!r}: %{spec} is not %h, %p, %t or %%")
        index += 2
    return re.compile("".join(parts))


def parse_name(name: str, patterns: Sequence[str] = DEFAULT_PATTERNS) -> NameFacts:
    """Host, pid and time from the file name `name` (a folder or URL before it is ignored),
    by the first pattern that matches it."""
    bare = name.rsplit("/", 1)[-1].removesuffix(".gz")
    for pattern in patterns:
        match = compile_pattern(pattern).fullmatch(bare)
        if match is None:
            continue
        fields = match.groupdict()
        pid = fields.get("pid")
        time = fields.get("time")
        return NameFacts(
            fields.get("host"),
            int(pid) if pid is not None else None,
            int(time) if time is not None else None,
            pattern,
        )
    return NameFacts(None, None, None, None)


_DUMP_NAME_HINTS = (".nvcudmp", "cudacore", "cuda_core", "core.cuda.")
"""Parts of a name that say a file is meant to be a dump (cuda-gdb's default, the driver's
`core.cuda.%h.%p`, SGLang's crash folder's `core.cuda.%t.%p`)."""


def named_like_a_dump(name: str) -> bool:
    """True when `name` says its file is a dump: such a file is scanned even when its content
    is not one (empty, cut short, overwritten), and the analysis says why in an error row."""
    lowered = name.lower()
    return any(hint in lowered for hint in _DUMP_NAME_HINTS)
