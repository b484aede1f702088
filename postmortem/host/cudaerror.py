"""CUDA errors as the host reported them: Python tracebacks, C++ checks, device asserts.

PyTorch reports a kernel fault at the next call that synchronizes, with a Python traceback
of where that call was made (fixtures/hostlogs/traceback_vllm_blog_graph.txt)::

    Traceback (most recent call last):
      File "core_dump.py", line 76, in <module>
        print(f"Output: {output.sum()}")
    RuntimeError: CUDA error: an illegal memory access was encountered
    CUDA kernel errors might be asynchronously reported at some other API call, so the
    stacktrace below might be incorrect.

A device-side ``assert`` prints, from the GPU, the kernel, block and thread that failed::

    /pytorch/aten/src/ATen/native/cuda/Indexing.cu:1478: indexSelectSmallIndex: block:
    [0,0,0], thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.

A line is a CUDA error report when it holds one of the runtime's error strings
(`cudaGetErrorString`) or error names; servers prefix lines (``[rank0]:``), so every pattern
is searched anywhere in a line.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from postmortem.host.lines import bounded, dim3, numbered
from postmortem.host.model import CudaErrorLog, CudaErrorReport, DeviceAssert, PythonFrame

_KEPT = 8
_KEPT_FRAMES = 16

# The runtime's words (cudaGetErrorString) and the error names, by kind.
_ERRORS: tuple[tuple[str, str], ...] = (
    ("an illegal memory access was encountered", "illegal-address"),
    ("cudaErrorIllegalAddress", "illegal-address"),
    ("CUDA_ERROR_ILLEGAL_ADDRESS", "illegal-address"),
    ("device-side assert triggered", "device-assert"),
    ("cudaErrorAssert", "device-assert"),
    ("CUDA_ERROR_ASSERT", "device-assert"),
    ("misaligned address", "misaligned-address"),
    ("cudaErrorMisalignedAddress", "misaligned-address"),
    ("an illegal instruction was encountered", "illegal-instruction"),
    ("cudaErrorIllegalInstruction", "illegal-instruction"),
    ("operation not supported on global/shared address space", "invalid-address-space"),
    ("invalid program counter", "invalid-pc"),
    ("unspecified launch failure", "launch-failure"),
    ("cudaErrorLaunchFailure", "launch-failure"),
    ("the launch timed out and was terminated", "launch-timeout"),
    ("uncorrectable ECC error encountered", "ecc-error"),
)
_TRACEBACK = "Traceback (most recent call last):"
# The function is the rest of the line, of at most `_FUNCTION_CHARS`: checked after the match,
# since `(.{1,512})$` backtracked over 512 characters at every `File "` of a crafted line.
_FRAME = re.compile(r'File "([^"]{1,1024})", line (\d{1,9}), in (.+)')
_FUNCTION_CHARS = 512
_EXCEPTION_TYPE = re.compile(r"\b([A-Za-z_][\w.]{0,127}(?:Error|Exception)): ")
_ASYNC = "might be asynchronously reported"
_ASSERT_AT = ": block: ["
_ASSERT_SOURCE = re.compile(r":(\d{1,9}): ")
_ASSERT_TAIL = re.compile(
    r"block: (\[[\d,\s]{5,40}\]), thread: (\[[\d,\s]{5,40}\]) Assertion `(.{0,1024})` failed"
)


@dataclass
class _State:
    errors: list[CudaErrorReport] = field(default_factory=list)
    asserts: list[DeviceAssert] = field(default_factory=list)
    errors_seen: int = 0
    asserts_seen: int = 0
    frames: deque[PythonFrame] = field(default_factory=lambda: deque(maxlen=_KEPT_FRAMES))
    pending: tuple[int, str, str] | None = None
    """The last frame read, waiting for the source line under it: (line, prefix, frame)."""


def parse_cuda_errors(lines: Iterable[str]) -> CudaErrorLog | None:
    """The CUDA errors and device asserts the lines report, or None when there are none.

    Never raises; a line it does not understand is skipped.
    """
    state = _State()
    for number, text in numbered(lines):
        _read_line(state, number, text)
    if not state.errors_seen and not state.asserts_seen:
        return None
    return CudaErrorLog(
        tuple(state.errors), tuple(state.asserts), state.errors_seen, state.asserts_seen
    )


def _read_line(state: _State, number: int, text: str) -> None:
    if _TRACEBACK in text or "During handling of the above exception" in text:
        state.frames.clear()
        state.pending = None
        return
    frame = _FRAME.search(text)
    if frame is not None and len(frame.group(3)) <= _FUNCTION_CHARS:
        path, line, function = frame.groups()
        state.frames.append(PythonFrame(path, int(line), function.strip(), None))
        state.pending = (number, text[: frame.start()], path)
        return
    if state.pending is not None:
        _source_line(state, state.pending, number, text)
        state.pending = None
    if _ASYNC in text:
        _mark_asynchronous(state, number)
        return
    found = _device_assert(number, text) if _ASSERT_AT in text else None
    if found is not None:
        state.asserts_seen += 1
        if len(state.asserts) < _KEPT:
            state.asserts.append(found)
        return
    for words, kind in _ERRORS:
        if words in text:
            _error(state, number, text, words, kind)
            return


def _source_line(state: _State, pending: tuple[int, str, str], number: int, text: str) -> None:
    """The line under a frame is its source line, unless it is something else."""
    frame_line, prefix, _ = pending
    if number != frame_line + 1 or not state.frames:
        return
    code = text[len(prefix) :] if prefix.strip() and text.startswith(prefix) else text
    if not code.startswith("    ") or any(words in code for words, _ in _ERRORS):
        return
    state.frames[-1] = replace(state.frames[-1], code=bounded(code, 200))


def _error(state: _State, number: int, text: str, words: str, kind: str) -> None:
    state.errors_seen += 1
    frames = tuple(state.frames)
    state.frames.clear()
    if len(state.errors) >= _KEPT:
        return
    typed = _EXCEPTION_TYPE.search(text)
    state.errors.append(
        CudaErrorReport(
            number,
            bounded(text, 300),
            typed.group(1) if typed else None,
            words,
            kind,
            False,
            frames,
        )  # fmt: skip
    )


def _mark_asynchronous(state: _State, number: int) -> None:
    if state.errors and number - state.errors[-1].line <= 3:
        state.errors[-1] = replace(state.errors[-1], asynchronous=True)


def _device_assert(number: int, text: str) -> DeviceAssert | None:
    """``FILE:LINE: FUNCTION: block: [x,y,z], thread: [x,y,z] Assertion `COND` failed.``"""
    at = text.find(_ASSERT_AT)
    source = _ASSERT_SOURCE.search(text, 0, at)
    tail = _ASSERT_TAIL.match(text, at + 2)
    if source is None or tail is None:
        return None
    block, thread = dim3(tail.group(1), brackets=True), dim3(tail.group(2), brackets=True)
    function = text[source.end() : at].strip()
    if block is None or thread is None or not function:
        return None
    return DeviceAssert(
        number, bounded(text[: source.start()], 512), int(source.group(1)),
        bounded(function, 512), block, thread, bounded(tail.group(3), 300),
    )  # fmt: skip
