"""The driver's words in a host log: ``NVRM: Xid`` lines, coredump progress, CUDA exceptions.

The kernel log (``dmesg``, ``journalctl -k``) holds one line per Xid event, e.g. an MMU
fault (fixtures/hostlogs/xid31_pytorch_issue.txt)::

    NVRM: Xid (PCI:0000:db:00): 31, pid=13641, Ch 00000008, intr 00000000. MMU Fault:
    ENGINE GRAPHICS GPCCLIENT_T1_10 faulted @ 0x7fd7_90743000. Fault is of type FAULT_PDE
    ACCESS_TYPE_VIRT_READ

Since driver 5xx the channel reads ``channel 0x0000000c`` and a process's ``name=`` follows its
``pid=`` (``pid='<unknown>', name=<unknown>`` when the driver cannot tell). With
``CUDA_COREDUMP_SHOW_PROGRESS=1`` the driver narrates the dump it writes
(fixtures/hostlogs/coredump_progress_vllm_blog.txt)::

    [00:40:46.611453] coredump: Detected an exception of type
                      CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS (14)
    [00:40:46.611458] coredump:   - Device: 0
    [00:40:46.611465] coredump:   - PC 0x7f31abb9f6d0
    [00:40:46.806153] coredump: Writing ELF file to /tmp/cuda_coredump_xxx.1799919.1754898045

and a run under cuda-gdb prints ``CUDA Exception: Warp Illegal Address``, ``The exception
was triggered at PC 0x… kernel`` and its ``[Current focus set to CUDA kernel 0, grid 1,
block (0,0,0), thread (0,0,0), device 0, sm 124, warp 0, lane 0]`` line.

A process run with ``CUDA_DEVICE_WAITS_ON_EXCEPTION=1`` beside
``CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1`` gets neither a dump nor the wait: the driver says
``CUDA coredump is not supported with CUDA attach on exception`` (read in any case, after any
prefix, with or without a full stop; fixtures/hostlogs/driver_attach_conflict_standin.txt).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from postmortem.exceptions import EXCEPTIONS
from postmortem.host.lines import between, bounded, dim3, ending_name, hex_int, numbered
from postmortem.host.model import CoredumpWritten, CudaException, DriverLog, XidEvent

_KEPT = 32
_NEAR = 6
"""Lines within which a PC or focus line belongs to the exception before (or after) it."""

XID_PREFIX = r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]{4,20})\): "
"""The start of the driver's Xid line, up to its code: the GPU's PCI address is group 1. The
one spelling of it: `postmortem.scan.fleet.xid` searches whole logs for it as bytes."""
_XID = re.compile(XID_PREFIX + r"(\d{1,5})(?:,\s*(.*))?$")
_PID = re.compile(r"\bpid=(\d{1,10})")
_NAME = re.compile(r"\bname=")
_CHANNEL = re.compile(r"\b(?:Ch ([0-9A-Fa-f]{1,8})\b|channel 0x([0-9A-Fa-f]{1,8})\b)")
_FAULT_AT = re.compile(r"faulted @ (0x[0-9A-Fa-f_]{1,24})")
_ENGINE = re.compile(r"MMU Fault: ENGINE ")
_FAULT_TYPE = re.compile(r"Fault is of type (\S{1,64})(?: (\S{1,64}))?")

_DETECTED = re.compile(r"coredump: Detected an exception of type (\S{1,96}) \((\d{1,10})\)")
_DETAIL = re.compile(r"coredump:\s+- (Device|SM|Warp|Lane|PC|Block|Thread|Grid):? (.+)")
# Greedy to the end, then stripped: a lazy path before `\s*$` would cost the square of a
# line's length (capture reads lines of 64 KiB).
_WRITING = re.compile(r"coredump: Writing ELF file to (.+)$")
# Each pattern takes the rest of the line whole, cut and checked in Python (`ending_name`,
# `between`): `(.{1,96}?)\.?\s*$` or `\s*(.{0,2048})$` backtracked over the rest of the line
# at every start, 51 s on an 8 MB log of crafted lines (tests/unit/test_host_linear.py).
_GDB_BANNER = re.compile(r"CUDA Exception: (.*)")
_NAME_CHARS = 96
_MARKER_CHARS = 36  # the longest marker: "received signal CUDA_EXCEPTION_999, "
_GDB_SIGNAL = re.compile(r"received signal CUDA_EXCEPTION_(\d{1,3}), (.*)")
_GDB_PC = re.compile(r"The exception was triggered at PC (0x[0-9A-Fa-f]{1,16})(.*)")
_GDB_FOCUS = re.compile(r"\[(?:Current focus set to|Switching focus to) CUDA kernel ")
_FOCUS_FIELD = re.compile(r"\b(device|sm) (\d{1,6})")

# The driver's words when both variables are set. A literal, each blank a bounded run: one
# pass over the line.
_ATTACH_CONFLICT = re.compile(
    r"core ?dump\s{1,8}is\s{1,8}not\s{1,8}supported\s{1,8}with\s{1,8}cuda\s{1,8}attach"
    r"\s{1,8}on\s{1,8}exception",
    re.IGNORECASE,
)

_CODES = {kind.name.lower(): kind.code for kind in EXCEPTIONS}

XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception (an SM fault)",
    31: "GPU memory page fault (MMU fault)",
    32: "invalid or corrupted push buffer stream",
    43: "GPU stopped processing (the context's channel was reset)",
    45: "preemptive cleanup after an earlier error",
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
}
"""What the Xids seen next to GPU crashes mean, in the words of NVIDIA's Xid catalog."""


@dataclass
class _State:
    xids: list[XidEvent] = field(default_factory=list)
    xids_seen: int = 0
    exceptions: list[CudaException] = field(default_factory=list)
    written: list[CoredumpWritten] = field(default_factory=list)
    attach_conflicts: list[int] = field(default_factory=list)
    focus: tuple[int, str] | None = None
    """The last cuda-gdb focus line, for an exception printed after it."""


def written_path(text: str) -> str | None:
    """The path a driver's ``coredump: Writing ELF file to PATH`` line names, stripped; None
    for any other line."""
    found = _WRITING.search(text)
    path = found.group(1).strip() if found is not None else ""
    return path or None


def parse_driver_log(lines: Iterable[str]) -> DriverLog | None:
    """The Xid events, CUDA exceptions and written dumps the lines report, or None.

    Never raises; a line it does not understand is skipped.
    """
    state = _State()
    for number, text in numbered(lines):
        _read_line(state, number, text)
    if not (state.xids_seen or state.exceptions or state.written or state.attach_conflicts):
        return None
    return DriverLog(
        tuple(state.xids),
        tuple(state.exceptions),
        tuple(state.written),
        state.xids_seen,
        tuple(state.attach_conflicts),
    )


def _read_line(state: _State, number: int, text: str) -> None:
    if ("ttach" in text or "TTACH" in text) and _ATTACH_CONFLICT.search(text):
        if len(state.attach_conflicts) < _KEPT:
            state.attach_conflicts.append(number)
        return
    if "NVRM: Xid" in text:
        xid = _xid(number, text)
        if xid is not None:
            state.xids_seen += 1
            if len(state.xids) < _KEPT:
                state.xids.append(xid)
        return
    if "coredump:" in text:
        _progress(state, number, text)
        return
    _cuda_gdb(state, number, text)


def _xid(number: int, text: str) -> XidEvent | None:
    found = _XID.search(text)
    if found is None:
        return None
    pci, code, rest = found.group(1), int(found.group(2)), found.group(3) or ""
    pid, channel = _PID.search(rest), _CHANNEL.search(rest)
    fault_at, fault_type = _FAULT_AT.search(rest), _FAULT_TYPE.search(rest)
    name = between(rest, _NAME, ",", 128)
    process = name.strip() if name and "," not in name else None  # `name=` then no comma
    return XidEvent(
        line=number,
        pci=pci,
        xid=code,
        pid=int(pid.group(1)) if pid else None,
        process=None if process in (None, "<unknown>") else process,
        channel=hex_int(channel.group(1) or channel.group(2)) if channel else None,
        fault_address=hex_int(fault_at.group(1)) if fault_at else None,
        fault_type=fault_type.group(1) if fault_type else None,
        access_type=fault_type.group(2) if fault_type else None,
        engine=between(rest, _ENGINE, " faulted @", 128),
        detail=bounded(rest, 300),
    )


def _progress(state: _State, number: int, text: str) -> None:
    detected = _DETECTED.search(text)
    if detected is not None:
        name, code = detected.group(1), int(detected.group(2))
        if len(state.exceptions) < _KEPT:
            state.exceptions.append(CudaException(number, "coredump-progress", code, name))
        return
    written = written_path(text)
    if written is not None:
        if len(state.written) < _KEPT:
            state.written.append(CoredumpWritten(number, bounded(written, 4096)))
        return
    detail = _DETAIL.search(text)
    last = state.exceptions[-1] if state.exceptions else None
    if detail is None or len(detail.group(2)) > 256:
        return
    if last is None or last.source != "coredump-progress":
        return
    key, value = detail.group(1), detail.group(2).strip()
    state.exceptions[-1] = _with_detail(last, key, value)


def _with_detail(exception: CudaException, key: str, value: str) -> CudaException:
    if key == "Device" and value.isascii() and value.isdigit():
        return replace(exception, device=int(value))
    if key == "SM" and value.isascii() and value.isdigit():
        return replace(exception, sm=int(value))
    if key == "Warp":
        return replace(exception, warp=bounded(value, 120))
    if key == "PC":
        return replace(exception, pc=hex_int(value.split()[0]) if value else None)
    if key == "Block":
        return replace(exception, block=dim3(value))
    if key == "Thread":
        return replace(exception, thread=dim3(value))
    return exception


def _cuda_gdb(state: _State, number: int, text: str) -> None:
    focus = between(text, _GDB_FOCUS, "]", 512, longest=True)
    if focus is not None:
        last = _recent_gdb(state, number)
        if last is not None:
            state.exceptions[-1] = _with_focus(last, focus)
        else:
            state.focus = (number, focus)
        return
    signal = _ending(_GDB_SIGNAL, text)
    if signal is not None:
        _gdb_exception(state, number, int(signal[0].group(1)), signal[1])
        return
    banner = _ending(_GDB_BANNER, text)
    if banner is not None:
        _gdb_exception(state, number, _CODES.get(banner[1].lower()), banner[1])
        return
    pc = _GDB_PC.search(text)
    last = _recent_gdb(state, number)
    if pc is not None and last is not None:
        function = pc.group(2).strip() or None
        state.exceptions[-1] = replace(
            last, pc=hex_int(pc.group(1)), function=bounded(function, 2048) if function else None
        )


def _ending(pattern: re.Pattern[str], text: str) -> tuple[re.Match[str], str] | None:
    """The first match of `pattern` (a marker, then the rest of the line) whose rest holds a
    name that ends the line (`ending_name`), and that name. Only a marker within
    `_NAME_CHARS` of the end can be followed by one: the search starts there."""
    end = len(text.rstrip())
    found = pattern.search(text, max(0, end - _NAME_CHARS - _MARKER_CHARS - 1))
    while found is not None:
        name = ending_name(found.group(found.lastindex or 0), _NAME_CHARS)
        if name is not None:
            return found, name
        found = pattern.search(text, found.start() + 1)
    return None


def _gdb_exception(state: _State, number: int, code: int | None, name: str) -> None:
    last = _recent_gdb(state, number)
    if last is not None and (last.code == code or last.name.lower() == name.lower()):
        return  # the signal line and the banner of one exception
    exception = CudaException(number, "cuda-gdb", code, name)
    if state.focus is not None and number - state.focus[0] <= _NEAR:
        exception = _with_focus(exception, state.focus[1])
    state.focus = None
    if len(state.exceptions) < _KEPT:
        state.exceptions.append(exception)


def _recent_gdb(state: _State, number: int) -> CudaException | None:
    last = state.exceptions[-1] if state.exceptions else None
    if last is None or last.source != "cuda-gdb" or number - last.line > _NEAR:
        return None
    return last


def _with_focus(exception: CudaException, focus: str) -> CudaException:
    fields = dict(_FOCUS_FIELD.findall(focus))
    block_at, thread_at = focus.find("block "), focus.find("thread ")
    return replace(
        exception,
        device=int(fields["device"]) if "device" in fields else exception.device,
        sm=int(fields["sm"]) if "sm" in fields else exception.sm,
        block=dim3(focus[block_at:]) if block_at >= 0 else exception.block,
        thread=dim3(focus[thread_at:]) if thread_at >= 0 else exception.thread,
    )
