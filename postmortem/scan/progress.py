"""A one-line progress bar for a terminal: dumps done, errors, rate and time left."""

from __future__ import annotations

import time
from typing import TextIO

_WIDTH = 24
_EVERY_S = 0.1


class ProgressBar:
    """Redraws one line of `stream` (a terminal) at most ten times a second."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._started = time.monotonic()
        self._drawn = 0.0
        self._shown = False

    def __call__(self, done: int, errors: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._drawn < _EVERY_S:
            return
        self._drawn = now
        self._stream.write("\r" + render_progress(done, errors, total, now - self._started))
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the line, so what follows starts on a fresh one."""
        if self._shown:
            self._stream.write("\n")
            self._stream.flush()


def render_progress(done: int, errors: int, total: int, elapsed_s: float) -> str:
    """``[#####.....]  120/1000 dumps, 3 errors, 41.2/s, ETA 21s``."""
    filled = _WIDTH * done // total if total else _WIDTH
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    eta = f"ETA {_duration((total - done) / rate)}" if rate > 0 and done < total else "done"
    if done >= total:
        eta = f"done in {_duration(elapsed_s)}"
    bar = "#" * filled + "." * (_WIDTH - filled)
    plural = "" if errors == 1 else "s"
    return f"[{bar}] {done}/{total} dumps, {errors} error{plural}, {rate:.1f}/s, {eta}  "


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
