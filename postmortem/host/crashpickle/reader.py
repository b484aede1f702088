"""One reading of a pickle: `pickletools.genops`'s opcodes through the stack machine, each
read bounded, within the limits; why it stopped, when it stopped early."""

from __future__ import annotations

import io
import pickletools
import struct
import time
from typing import BinaryIO

from postmortem.host.crashpickle.limits import CrashPickleLimits
from postmortem.host.crashpickle.machine import Machine
from postmortem.host.crashpickle.values import _Capped, _Damaged
from postmortem.spelling import size_text

_IN_MEMORY_BYTES = 32 << 20
"""A file up to this size is read whole (faster); a larger one is streamed."""


class Stream:
    """A file read by genops with its position counted, each read bounded: a length prefix
    of 2**60 must cost an error, not an allocation."""

    __slots__ = ("file", "left", "limit", "position")

    def __init__(self, file: BinaryIO, left: int, limit: int) -> None:
        self.file, self.left, self.limit, self.position = file, left, limit, 0

    def read(self, size: int) -> bytes:
        if size > self.limit:
            raise _Capped(f"a value of {size:,} bytes at byte {self.position:,} is over the "
                         f"{size_text(self.limit)} one value may take")  # fmt: skip
        data = self.file.read(min(size, self.left))
        self.left -= len(data)
        self.position += len(data)
        return data

    def readline(self) -> bytes:
        data = self.file.readline(min(self.limit, self.left))
        if not data.endswith(b"\n") and len(data) == self.limit:
            raise _Capped(f"a line over {size_text(self.limit)} at byte {self.position:,}")
        self.left -= len(data)
        self.position += len(data)
        return data


def open_stream(file: BinaryIO, size: int, limits: CrashPickleLimits) -> Stream:
    """The first `limits.max_file_bytes` of `file` (`size` bytes), read whole if small."""
    left = min(size, limits.max_file_bytes)
    if size <= _IN_MEMORY_BYTES:
        return Stream(io.BytesIO(file.read(left)), left, limits.max_value_bytes)
    return Stream(file, left, limits.max_value_bytes)


class Run:
    """One reading: genops's opcodes through the stack machine, within the limits."""

    def __init__(self, limits: CrashPickleLimits) -> None:
        self.limits = limits
        self.machine = Machine(limits)
        self.opcodes = 0
        self.stopped: str | None = None
        self.caps: list[str] = []
        self.root: object = None

    def read(self, stream: Stream) -> None:
        deadline = time.monotonic() + self.limits.max_seconds
        try:
            for opcode, arg, _ in pickletools.genops(stream):  # type: ignore[arg-type]
                self.opcodes += 1
                if self.opcodes > self.limits.max_opcodes:
                    raise _Capped(f"opcode limit: {self.limits.max_opcodes:,} read")
                if self.opcodes & 1023 == 0 and time.monotonic() > deadline:
                    raise _Capped(f"time limit: {self.limits.max_seconds:g} s")
                self.machine.step(opcode.name, arg)
            self.root = self.machine.result
            return
        except _Capped as capped:
            self.stopped = f"{capped} (at byte {stream.position:,})"
        except _Damaged as damaged:
            self.stopped = f"damaged at byte {stream.position:,}: {damaged}"
        except (ValueError, OverflowError, EOFError, struct.error) as error:
            self.stopped = _genops_problem(error, stream.position)
        self.root = self.machine.salvage()


def _genops_problem(error: Exception, position: int) -> str:
    text = str(error)
    # genops's words for an end too soon: "pickle exhausted before seeing STOP", "expected N
    # bytes in a …, but only M remain", "no newline found when trying to read …".
    if "exhausted" in text or ("only" in text and "remain" in text) or "no newline" in text:
        return f"truncated: the pickle ends at byte {position:,}, before its STOP"
    return f"not a pickle past byte {position:,}: {text[:200]}"
