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

_BY_SUFFIX = {
    ".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json",
    ".jsonl": "json", ".txt": "text", ".text": "text",
}  # fmt: skip


def format_of(path: Path | str) -> str | None:
    """The format a file name asks for by its suffix (``report.html`` → html); None when
    the suffix says nothing."""
    return _BY_SUFFIX.get(Path(path).suffix.lower())
