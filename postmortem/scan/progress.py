"""The scan's progress on a terminal: click's progress bar, one line at any width.

click sizes the bar to the terminal each time it draws (`width=0`), so the line never wraps,
even in a 50-column terminal; it draws nothing when its stream is not a terminal.
"""

from __future__ import annotations

from typing import Any, TextIO

import click


class ProgressBar:
    """Dumps done out of found, and the errors so far."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._bar: Any = None
        self._done = 0

    def __call__(self, done: int, errors: int, total: int) -> None:
        if self._bar is None:
            self._bar = click.progressbar(
                length=max(total, 1), label="scan", file=self._stream, width=0,
                show_percent=False, show_pos=True, show_eta=True,
                item_show_func=lambda item: item,
            )  # fmt: skip
            self._bar.__enter__()
        if self._bar.length != max(total, 1):
            self._bar.length = max(total, 1)  # more dumps found while scanning
        self._bar.update(done - self._done, current_item=_errors(errors))
        self._done = done

    def close(self) -> None:
        """End the line, so what follows starts on a fresh one."""
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


def _errors(count: int) -> str:
    return f"{count} error{'' if count == 1 else 's'}"
