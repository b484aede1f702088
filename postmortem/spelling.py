"""How sizes are spelled for people, the same in every layer.

The analysis writes them into its findings' messages and the report into its text, so they
live below both; the report's other spellings are in `postmortem.report.values`.
"""

from __future__ import annotations


def size_text(size: int) -> str:
    """A size in bytes for people: ``812 bytes``, ``4.6 KiB``, ``7.9 MiB``, ``1.2 GiB``."""
    value = float(size)
    for unit in ("bytes", "KiB", "MiB"):
        if value < 1024:
            return f"{size} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
