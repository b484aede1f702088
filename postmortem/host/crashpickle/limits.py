"""How far a crash pickle is read: the bounds on every resource the reading takes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CrashPickleLimits:
    """How far a crash pickle is read; past a limit, the summary says which one was hit."""

    max_file_bytes: int = 256 << 20
    """Bytes read from the file at most (the rest is treated as cut off)."""
    max_value_bytes: int = 16 << 20
    """Bytes one string or bytes value may take (a larger one stops the reading)."""
    max_opcodes: int = 5_000_000
    max_seconds: float = 3.0
    max_depth: int = 100_000
    """Stack entries and open marks, each."""
    max_memo: int = 1_000_000
    max_values: int = 500_000
    """Lists, tuples, dicts and objects made (each costs memory however small)."""
    kept_items: int = 512
    """Items kept of a list, at its start and again at its end (the rest are counted)."""
    kept_keys: int = 4096
    """String keys kept per dict (ServerArgs has several hundred)."""
    kept_chars: int = 4096
    """Characters kept per string."""
    kept_chars_total: int = 16_000_000
    """Characters kept of all strings; past it, `kept_chars_past_total` per string."""
    kept_chars_past_total: int = 64
    shown_classes: int = 32


DEFAULT_LIMITS = CrashPickleLimits()
