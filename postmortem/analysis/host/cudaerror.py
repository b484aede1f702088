"""CUDA errors the host reported, joined to the dump: the error's kind against the dump's
exception, a device assert's kernel and thread, and a Python traceback put in its place
(where the error surfaced, not where it happened).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.host.check import HostCheck, coordinates_check, kernel_check
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.host.model import CudaErrorLog
from postmortem.model import describe_exception

# What the host's words mean, as the dump's exception codes (postmortem.model).
_KIND_CODES: dict[str, frozenset[int]] = {
    "illegal-address": frozenset({1, 5, 7, 10, 14, 17, 30}),
    "device-assert": frozenset({12}),
    "misaligned-address": frozenset({6, 11}),
    "illegal-instruction": frozenset({4, 26, 27}),
    "invalid-address-space": frozenset({7}),
    "invalid-pc": frozenset({8, 23, 24}),
}


def cuda_error_checks(
    path: Path, log: CudaErrorLog, sites: Sequence[FaultSite], kernels: Sequence[str]
) -> list[HostCheck]:
    """The first CUDA error's kind against the dump's exceptions; the first device assert's
    kernel and thread against the dump's."""
    checks: list[HostCheck] = []
    codes = tuple(s.exception for s in sites if s.exception is not None)
    if log.errors:
        error = log.errors[0]
        expected = _KIND_CODES.get(error.kind)
        dump = ", ".join(describe_exception(code) for code in dict.fromkeys(codes)) or None
        if expected is None or not codes:
            agrees, how = None, "the dump records no exception" if not codes else "not compared"
        else:
            agrees = any(code in expected for code in codes)
            how = "the error is the exception's kind" if agrees else "another kind of error"
        checks.append(
            HostCheck(path, error.line, "CUDA error", "exception", error.error, dump, agrees, how)
        )
    for assertion in log.asserts[:1]:
        line, function = assertion.line, assertion.function
        checks.append(kernel_check(path, line, "device assert", function, kernels))
        checks.append(
            coordinates_check(path, line, "device assert", assertion.block, assertion.thread, sites)
        )
    return checks


def surfaced_elsewhere(path: Path, log: CudaErrorLog, sites: Sequence[FaultSite]) -> list[Finding]:
    """A Python traceback put in its place: where the CUDA error surfaced (the next call that
    waited for the GPU), not where it happened."""
    error = next((e for e in log.errors if e.frames), None)
    if error is None:
        return []
    frame = error.frames[-1]
    where = f"{frame.file}:{frame.line} in {frame.function}"
    site = sites[0] if sites else None
    if site is not None and site.location:
        named = f"the dump names the kernel: {site.location}"
        if site.exception is not None:
            named += f" ({describe_exception(site.exception)})"
    else:
        named = "the dump names no faulting kernel"
    evidence = [f"{path.name}:{error.line}: {error.text}"]
    if frame.code:
        evidence.append(f"{where}: {frame.code}")
    caveat = None if error.asynchronous else "the log does not say the error was asynchronous"
    return [
        Finding(
            FindingCode.ERROR_SURFACED_ELSEWHERE,
            Severity.INFO,
            f"the Python traceback ends at {where}: that is where the CUDA error surfaced (the "
            f"next call that waited for the GPU), not where it happened; {named}",
            tuple(evidence),
            None,
            caveat,
        )
    ]
