"""Facts the driver and compute-sanitizer printed, compared one by one with the dump's.

Every comparison is a `HostCheck`: the host's value and the dump's, whether they agree and
how that was decided. A fact the dump does not hold (no computed address without nvdisasm,
no exception in a hang dump) is not compared: `agrees` is None, with the reason in `how`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.forensics.address import LaneAddress
from postmortem.analysis.host.match import compare_address, lane_words, match_kernel
from postmortem.demangle import demangle
from postmortem.host.model import CudaException, DriverLog, SanitizerError, SanitizerLog
from postmortem.model import describe_exception
from postmortem.spelling import dim3_text

_CHECKED = 4
"""Events of one kind compared per log (the first ones)."""
# An MMU fault's ACCESS_TYPE_VIRT_* word, as the dump's instruction kinds (cubin/operands.py).
_ACCESS_KINDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("ATOMIC", frozenset({"atomic", "reduction"})),
    ("PREFETCH", frozenset({"prefetch"})),
    ("READ", frozenset({"load", "bulk-copy"})),
    ("WRITE", frozenset({"store", "bulk-copy"})),
)


_SOURCES = {"coredump-progress": "coredump progress", "cuda-gdb": "cuda-gdb"}


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


def driver_checks(path: Path, log: DriverLog, dump: DumpFacts) -> list[HostCheck]:
    """The Xid fault addresses, the CUDA exceptions and the written dumps of a driver log."""
    checks: list[HostCheck] = []
    faults = [x for x in log.xids if x.fault_address is not None][:_CHECKED]
    for xid in faults:
        source = f"Xid {xid.xid}"
        gpu = _gpu_check(path, xid.line, source, xid.pci, dump.pci) if dump.pci else None
        if gpu is not None:
            checks.append(gpu)
        if gpu is not None and gpu.agrees is False:
            continue  # another GPU's fault: its address says nothing of this dump
        checks += _fault_checks(path, xid.line, source, xid.fault_address or 0, xid.access_type,
                                dump)  # fmt: skip
    for exception in log.exceptions[:_CHECKED]:
        checks += _exception_checks(path, exception, dump.sites, dump.kernels)
    dump_path = dump.path
    for written in log.dumps_written[:_CHECKED]:
        name = Path(written.path).name
        same = dump_path.name == name or dump_path.name.startswith(name + ".")
        how = "the run wrote this dump" if same else "the run wrote another dump"
        checks.append(
            HostCheck(
                path,
                written.line,
                "coredump progress",
                "dump file",
                written.path,
                dump_path.name,
                same,
                how,
            )
        )
    return checks


def _fault_checks(
    path: Path, line: int, source: str, address: int, access: str | None, dump: DumpFacts
) -> list[HostCheck]:
    """An MMU fault's address and access type against the faulting lanes'."""
    agrees, how, lane = compare_address(address, dump.lanes)
    shown = lane_words(lane) if lane is not None else None
    checks = [HostCheck(path, line, source, "fault address", f"0x{address:x}", shown, agrees, how)]
    if access:
        checks.append(_access_check(path, line, source, access, dump))
    return checks


def _gpu_check(
    path: Path, line: int, source: str, pci: str, devices: Sequence[tuple[int, int]]
) -> HostCheck:
    """Whether an Xid's GPU (``0000:3b:00``, domain:bus:device) is one of the dump's."""
    shown = ", ".join(f"{bus:02x}:{device:02x}" for bus, device in devices)
    address = pci_address(pci)
    if address is None:
        return HostCheck(path, line, source, "GPU (PCI)", pci, shown, None, "not a PCI address")
    same = address in devices
    how = "the dump's GPU" if same else "another GPU than the dump's"
    return HostCheck(path, line, source, "GPU (PCI)", pci, shown, same, how)


def pci_address(pci: str) -> tuple[int, int] | None:
    """(bus, device) of ``0000:3b:00`` (domain:bus:device, an optional ``.function``)."""
    fields = pci.split(".")[0].split(":")
    if len(fields) < 2:
        return None
    try:
        return int(fields[-2], 16), int(fields[-1], 16)
    except ValueError:
        return None


def _access_check(path: Path, line: int, source: str, access: str, dump: DumpFacts) -> HostCheck:
    """An MMU fault's access type against what the faulting instructions do."""
    expected = next((kinds for word, kinds in _ACCESS_KINDS if word in access), None)
    kinds = ", ".join(dump.access_kinds) or None
    if expected is None or not dump.access_kinds:
        why = "the dump's instruction is not decoded" if expected else "an access type not known"
        return HostCheck(path, line, source, "access", access, kinds, None, why)
    same = any(kind in expected for kind in dump.access_kinds)
    how = "the instruction's kind of access" if same else "another kind of access"
    return HostCheck(path, line, source, "access", access, kinds, same, how)


def _exception_checks(
    path: Path, exception: CudaException, sites: Sequence[FaultSite], kernels: Sequence[str]
) -> list[HostCheck]:
    line, source = exception.line, _SOURCES.get(exception.source, exception.source)
    codes = list(dict.fromkeys(s.exception for s in sites if s.exception is not None))
    shown = ", ".join(f"{describe_exception(c)} ({c})" for c in codes) or None
    host = exception.name + (f" ({exception.code})" if exception.code is not None else "")
    if exception.code is None or not codes:
        agrees, how = None, "the dump records no exception" if not codes else "no code printed"
    else:
        agrees = exception.code in codes
        how = "same exception code" if agrees else "another exception code"
    checks = [HostCheck(path, line, source, "exception", host, shown, agrees, how)]
    if exception.device is not None and exception.sm is not None:
        checks.append(_sm_check(path, line, source, exception.device, exception.sm, sites))
    if exception.pc is not None:
        pcs = list(dict.fromkeys(s.error_pc for s in sites if s.error_pc is not None))
        same = exception.pc in pcs
        checks.append(
            HostCheck(
                path,
                line,
                source,
                "error PC",
                f"0x{exception.pc:x}",
                ", ".join(f"0x{pc:x}" for pc in pcs) or None,
                same if pcs else None,
                ("same PC" if same else "another PC") if pcs else "the dump has none",
            )
        )
    if exception.function:
        checks.append(kernel_check(path, line, source, exception.function, kernels))
    if exception.block is not None and exception.thread is not None:
        checks.append(
            coordinates_check(path, line, source, exception.block, exception.thread, sites)
        )
    return checks


def _sm_check(
    path: Path, line: int, source: str, device: int, sm: int, sites: Sequence[FaultSite]
) -> HostCheck:
    faults = [f for s in sites for f in s.faults if f.sm_id is not None]
    host = f"device {device} SM {sm}"
    if not faults:
        return HostCheck(path, line, source, "device and SM", host, None, None, "not compared")
    same = any(f.device_index == device and f.sm_id == sm for f in faults)
    first = faults[0]
    dump = f"device {first.device_index} SM {first.sm_id}"
    how = "a faulting SM" if same else "no fault on that SM"
    return HostCheck(path, line, source, "device and SM", host, dump, same, how)


def sanitizer_checks(path: Path, log: SanitizerLog, dump: DumpFacts) -> list[HostCheck]:
    """The first memcheck error (the first one in a kernel of the dump, if any), compared."""
    if not log.errors:
        return []
    sites, kernels, lanes = dump.sites, dump.kernels, dump.lanes
    error = next(
        (e for e in log.errors if e.kernel and any(match_kernel(e.kernel, k) for k in kernels)),
        log.errors[0],
    )
    checks: list[HostCheck] = []
    source = "compute-sanitizer"
    if error.kernel:
        checks.append(kernel_check(path, error.line, source, error.kernel, kernels))
        offset = _offset_check(path, error, sites)
        if offset is not None:
            checks.append(offset)
    if error.block is not None and error.thread is not None:
        checks.append(coordinates_check(path, error.line, source, error.block, error.thread, sites))
    if error.address is not None:
        agrees, how, lane = compare_address(error.address, lanes, exact_only=True)
        if agrees is False:
            how += " (a sanitizer run is another run: its buffers may lie elsewhere)"
        shown = lane_words(lane) if lane is not None else None
        checks.append(
            HostCheck(
                path, error.line, source, "address", f"0x{error.address:x}", shown, agrees, how
            )
        )
    return checks


def _offset_check(
    path: Path, error: SanitizerError, sites: Sequence[FaultSite]
) -> HostCheck | None:
    if error.offset is None or error.kernel is None:
        return None
    site = next(
        (s for s in sites if s.function and match_kernel(error.kernel, s.function.name)), None
    )
    if site is None or site.offset is None:
        return None
    same = site.offset == error.offset
    how = "same instruction" if same else "another instruction of the kernel"
    return HostCheck(
        path,
        error.line,
        "compute-sanitizer",
        "offset",
        f"+0x{error.offset:x}",
        f"+0x{site.offset:x}",
        same,
        how,
    )


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
