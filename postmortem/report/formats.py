"""The output formats of each command, and the format an output file's name asks for.

Kept apart from `render.py` (jinja2) so that the command line can offer the choices
without importing the renderer.
"""

from __future__ import annotations

from pathlib import Path

ANALYZE_FORMATS = ("text", "md", "html", "json")
"""What `analyze` (and a scan's per-dump reports) can write."""
SCAN_FORMATS = ("text", "md", "html", "json")
"""What `scan` can write its index as (json: JSON lines)."""

# The one table of formats and file suffixes: the suffix a report of each format is written
# with (capture's report beside a dump, a scan's per-dump reports), and the suffixes that
# ask for it when `-o NAME` is given without --format (the first is the one written).
_SUFFIXES = {
    "html": (".html", ".htm"), "md": (".md", ".markdown"), "json": (".json", ".jsonl"),
    "text": (".txt", ".text"),
}  # fmt: skip
_BY_SUFFIX = {suffix: fmt for fmt, suffixes in _SUFFIXES.items() for suffix in suffixes}


def format_of(path: Path | str) -> str | None:
    """The format a file name asks for by its suffix (``report.html`` → html); None when
    the suffix says nothing."""
    return _BY_SUFFIX.get(Path(path).suffix.lower())


def suffix_of(fmt: str) -> str:
    """The suffix a file of format `fmt` is written with (``md`` → ``.md``, ``text`` →
    ``.txt``)."""
    return _SUFFIXES[fmt][0]
