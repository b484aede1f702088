"""A compute-sanitizer report joined to the dump: its first error's kernel, offset, thread
and address, compared with the dump's faults.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.host.check import DumpFacts, HostCheck, coordinates_check, kernel_check
from postmortem.analysis.host.match import compare_address, lane_words, match_kernel
from postmortem.host.model import SanitizerError, SanitizerLog


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
