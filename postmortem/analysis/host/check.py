"""A fact a host log states, compared with the dump's: what every kind of log is checked as.

Every comparison is a `HostCheck`: the host's value and the dump's, whether they agree and
how that was decided. A fact the dump does not hold (no computed address without nvdisasm,
no exception in a hang dump) is not compared: `agrees` is None, with the reason in `how`.
The kernel a tool names and the block and thread it names are checked alike for every kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.forensics.address import LaneAddress
from postmortem.analysis.host.match import match_kernel
from postmortem.demangle import demangle
from postmortem.spelling import dim3_text


@dataclass(frozen=True, slots=True)
class DumpFacts:
    """What the dump says, as host logs are compared with it."""

    path: Path
    sites: tuple[FaultSite, ...]
    kernels: tuple[str, ...]
    """Mangled: the faulting kernels, else the kernels the grids run."""
    lanes: tuple[LaneAddress, ...]
    """The faulting lanes whose address is virtual (global, generic), not a window offset."""
    access_kinds: tuple[str, ...]
    """What the faulting instructions do with memory: ``load``, ``store``…"""
    pci: tuple[tuple[int, int], ...] = ()
    """(bus, device) of each GPU in the dump whose PCI address it records."""


@dataclass(frozen=True, slots=True)
class HostCheck:
    """One fact a host log states, compared with the dump."""

    path: Path
    line: int
    """Where the log states it (1-based, in the part of the log read)."""
    source: str
    """Which part of the log: "Xid 31", "coredump progress", "cuda-gdb", "compute-sanitizer",
    "CUDA error", "device assert"."""
    fact: str
    """"kernel", "exception", "fault address", "block and thread"…"""
    host: str
    """The host's value, in words."""
    dump: str | None
    """The dump's, in words; None when the dump does not hold it."""
    agrees: bool | None
    """None: not compared (`how` says why)."""
    how: str
    """How it was compared: ``same 4 KiB page``, ``same base name``…"""


def kernel_check(
    path: Path, line: int, source: str, name: str, kernels: Sequence[str]
) -> HostCheck:
    """Whether `name`, as a tool printed it, is one of the dump's `kernels` (mangled)."""
    if not kernels:
        return HostCheck(path, line, source, "kernel", name, None, None, "the dump names none")
    for kernel in kernels:
        how = match_kernel(name, kernel)
        if how is not None:
            return HostCheck(path, line, source, "kernel", name, demangle(kernel), True, how)
    shown = ", ".join(demangle(k) for k in kernels)
    return HostCheck(path, line, source, "kernel", name, shown, False, "another kernel")


def coordinates_check(
    path: Path,
    line: int,
    source: str,
    block: tuple[int, int, int],
    thread: tuple[int, int, int],
    sites: Sequence[FaultSite],
) -> HostCheck:
    """Whether a faulting lane of the dump ran (block, thread)."""
    host = f"block {dim3_text(block)} thread {dim3_text(thread)}"
    faults = [f for s in sites for f in s.faults if f.block_idx is not None]
    if not faults:
        return HostCheck(
            path,
            line,
            source,
            "block and thread",
            host,
            None,
            None,
            "the dump records no faulting thread",
        )
    same = any(f.block_idx == block and f.thread_idx == thread for f in faults)
    first = faults[0]
    dump = f"block {dim3_text(first.block_idx)} thread {dim3_text(first.thread_idx)}"
    if len(faults) > 1:
        dump += f" and {len(faults) - 1} more"
    how = "a faulting thread" if same else "no faulting thread there"
    return HostCheck(path, line, source, "block and thread", host, dump, same, how)
