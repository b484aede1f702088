"""A named pipe a test reads, with a rescue if the code under test waits on it forever."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def rescued(fifo: Path, seconds: float = 5.0) -> Iterator[None]:
    """Run the block; if it is still inside after `seconds`, a writer opens the FIFO and
    closes it, which frees a reader stuck opening it: the test then fails instead of hanging."""

    def open_and_close() -> None:
        with contextlib.suppress(OSError):  # no reader stuck: nothing to free
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(seconds, open_and_close)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
