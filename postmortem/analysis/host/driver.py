"""The driver's log joined to the dump: Xid faults, CUDA exceptions, dumps written, GPUs lost.

Each Xid's GPU is checked to be the dump's before its fault address and access type are
compared with the faulting lanes'; cuda-gdb's and coredump progress's exception lines are
compared with the dump's exceptions, SMs, error PCs, kernels and threads. The driver's refusal
to write a coredump while CUDA_DEVICE_WAITS_ON_EXCEPTION is set is said as a finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.host.check import DumpFacts, HostCheck, coordinates_check, kernel_check
from postmortem.analysis.host.match import compare_address, lane_words
from postmortem.exceptions import describe_exception
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.host.model import CudaException, DriverLog
from postmortem.pci import parse_pci

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
    address = parse_pci(pci)
    if address is None:
        return HostCheck(path, line, source, "GPU (PCI)", pci, shown, None, "not a PCI address")
    same = address in devices
    how = "the dump's GPU" if same else "another GPU than the dump's"
    return HostCheck(path, line, source, "GPU (PCI)", pci, shown, same, how)


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


def gpu_lost(path: Path, log: DriverLog, pci: Sequence[tuple[int, int]]) -> list[Finding]:
    """A GPU that fell off the bus (Xid 79), with a caveat when it is not one of the dump's."""
    lost = [x for x in log.xids if x.xid == 79]
    if not lost:
        return []
    caveat = None
    if pci and not any(parse_pci(x.pci) in pci for x in lost):
        gpus = ", ".join(f"{bus:02x}:{device:02x}" for bus, device in pci)
        caveat = f"the lost GPU is not the dump's ({gpus}): it may be another process's failure"
    return [
        Finding(
            FindingCode.GPU_LOST,
            Severity.ERROR,
            f"the GPU at PCI {lost[0].pci} fell off the bus (Xid 79): a hardware or power "
            "failure, not a kernel's bug; the dump may not hold the state of the crash",
            tuple(f"{path.name}:{x.line}: Xid {x.xid}, {x.detail}" for x in lost[:4]),
            "check the GPU's power, temperature and seating; run the vendor's diagnostics",
            caveat,
        )
    ]


def coredump_refused(path: Path, log: DriverLog) -> list[Finding]:
    """The driver's "CUDA coredump is not supported with CUDA attach on exception": the
    process had CUDA_DEVICE_WAITS_ON_EXCEPTION set beside CUDA_ENABLE_COREDUMP_ON_EXCEPTION."""
    if not log.attach_conflicts:
        return []
    return [
        Finding(
            FindingCode.COREDUMP_ATTACH_CONFLICT,
            Severity.WARNING,
            "the CUDA driver refused to write a coredump because CUDA_DEVICE_WAITS_ON_EXCEPTION "
            "was set beside CUDA_ENABLE_COREDUMP_ON_EXCEPTION: on an exception that process "
            "neither wrote a dump nor waited for a debugger",
            tuple(
                f"{path.name}:{line}: CUDA coredump is not supported with CUDA attach on exception"
                for line in log.attach_conflicts[:_CHECKED]
            ),
            "unset CUDA_DEVICE_WAITS_ON_EXCEPTION (keep CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1) and "
            "run again; `postmortem capture --check` checks a run's variables before the run",
            "a dump written on an exception does not come from the process that printed this "
            "line: check that the log and the dump are of the same run",
        )
    ]
