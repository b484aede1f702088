"""CUDA errors the host reported, joined to the dump: the error's kind against the dump's
exception, a device assert's kernel and thread, and a Python traceback put in its place
(where the error surfaced, not where it happened).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.host.check import HostCheck, coordinates_check, kernel_check
from postmortem.exceptions import codes_for_host_words, describe_exception
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.host.model import CudaErrorLog, DeviceAssert
from postmortem.spelling import dim3_text


def cuda_error_checks(
    path: Path, log: CudaErrorLog, sites: Sequence[FaultSite], kernels: Sequence[str]
) -> list[HostCheck]:
    """The first CUDA error's kind against the dump's exceptions; the first device assert's
    kernel and thread against the dump's."""
    checks: list[HostCheck] = []
    codes = tuple(s.exception for s in sites if s.exception is not None)
    if log.errors:
        error = log.errors[0]
        expected = codes_for_host_words(error.kind) or None
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
        kernel = kernel_check(path, line, "device assert", function, kernels)
        if kernel.agrees is False:
            # The driver prints the function the assert is in, often inlined into the kernel
            # (a lambda's operator()): another name is no disagreement.
            how = "an assert names the function it is in, which may be inlined into the kernel"
            kernel = replace(kernel, agrees=None, how=how)
        checks.append(kernel)
        checks.append(
            coordinates_check(path, line, "device assert", assertion.block, assertion.thread, sites)
        )
    checks.extend(assert_check(path, printed, sites) for printed in log.asserts[:_ASSERTS_CHECKED])
    return checks


_ASSERTS_CHECKED = 8
"""Printed assert lines compared, thread by thread, with the dump's decoded asserts."""


def assert_check(path: Path, printed: DeviceAssert, sites: Sequence[FaultSite]) -> HostCheck:
    """What the driver printed for one asserting thread against the assert the dump decodes
    for that thread (its site), or for the first decoded assert when the thread is not among
    the dump's asserting lanes."""
    host = (
        f"block {dim3_text(printed.block)} thread {dim3_text(printed.thread)}: "
        f"{printed.source_file}:{printed.source_line}: {printed.function}: `{printed.condition}`"
    )
    decoded = [s for s in sites if s.assertion is not None]
    at = next(
        (s for s in decoded for f in s.faults
         if f.block_idx == printed.block and f.thread_idx == printed.thread),
        None,
    )  # fmt: skip
    site = at or (decoded[0] if decoded else None)
    if site is None or site.assertion is None:
        how = "the dump decodes no assert"
        return HostCheck(path, printed.line, "device assert", "assert", host, None, None, how)
    found = site.assertion
    pairs = (
        ("message", found.message.value, printed.condition),
        ("file", found.file.value, printed.source_file),
        ("line", found.line.value, printed.source_line),
        ("function", found.function.value, printed.function),
    )
    differ = [name for name, ours, theirs in pairs if ours is not None and ours != theirs]
    compared = [name for name, ours, _ in pairs if ours is not None]
    thread = (
        "that thread's"
        if at is not None
        else "the first (the thread is not an asserting lane of the dump)"
    )
    if not compared:
        agrees, how = None, f"{thread} assert has no part the dump holds"
    elif differ:
        agrees, how = False, f"{thread} assert differs in {', '.join(differ)}"
    else:
        agrees, how = True, f"{thread} assert: the same {', '.join(compared)}"
    return HostCheck(path, printed.line, "device assert", "assert", host, found.text, agrees, how)


def surfaced_elsewhere(path: Path, log: CudaErrorLog, sites: Sequence[FaultSite]) -> list[Finding]:
    """A Python traceback put in its place: where the CUDA error surfaced (the next call that
    waited for the GPU), not where it happened."""
    error = next((e for e in log.errors if e.frames), None)
    if error is None:
        return []
    frame = error.frames[-1]
    where = f"{frame.file}:{frame.line} in {frame.function}"
    site = sites[0] if sites else None
    asserted = site.assertion if site is not None else None
    if error.kind == "device-assert" and asserted is not None and asserted.message.known:
        named = f"the assert it reports is in the dump: {asserted.text}"
    elif site is not None and site.location:
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
