"""Host evidence joined to the dump: what the host printed, checked against what the dump says.

Each host log (read by `postmortem.host`) is compared with the analysis fact by fact: the
kernel a tool names, the exception, the block and thread, the faulting address, the dump
file a run wrote. A fact the dump does not hold is not compared (`agrees` None), never
guessed. The SGLang kernel API log is searched for the call that launched the faulting
kernel; a Python traceback is put in its place (where the error surfaced, not where it
happened); what can be acted on becomes a `Finding`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.forensics.address import LaneAddress
from postmortem.analysis.host.events import (
    DumpFacts,
    HostCheck,
    coordinates_check,
    driver_checks,
    kernel_check,
    pci_address,
    sanitizer_checks,
)
from postmortem.analysis.host.match import best_api_match
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.host.model import ApiCall, CudaErrorLog, DriverLog, HostLogFile, SglangLog
from postmortem.model import describe_exception
from postmortem.spelling import size_text

# What the host's words mean, as the dump's exception codes (postmortem.model).
_KIND_CODES: dict[str, frozenset[int]] = {
    "illegal-address": frozenset({1, 5, 7, 10, 14, 17, 30}),
    "device-assert": frozenset({12}),
    "misaligned-address": frozenset({6, 11}),
    "illegal-instruction": frozenset({4, 26, 27}),
    "invalid-address-space": frozenset({7}),
    "invalid-pc": frozenset({8, 23, 24}),
}
_SHOWN_CALLS = 5
_SEVERITY_ORDER = (Severity.ERROR, Severity.WARNING, Severity.INFO)


@dataclass(frozen=True, slots=True)
class ApiJoin:
    """An SGLang kernel API log next to the dump: the call that launched the kernel."""

    path: Path
    log: SglangLog
    match: ApiCall | None
    """The latest call whose name best names a kernel of the dump; None when none does."""
    kernel: str | None
    """That kernel, mangled."""
    how: str | None
    """How the names matched (`hostmatch`'s words)."""

    @property
    def last_calls(self) -> tuple[ApiCall, ...]:
        """The calls logged last, oldest first."""
        return self.log.calls[-_SHOWN_CALLS:]


@dataclass(frozen=True, slots=True)
class HostJoin:
    """Everything the host logs add to the analysis of a dump."""

    files: tuple[HostLogFile, ...]
    checks: tuple[HostCheck, ...]
    """Every fact compared, in file order."""
    api: tuple[ApiJoin, ...]
    """One per file holding an SGLang kernel API log."""
    findings: tuple[Finding, ...]

    @property
    def disagreements(self) -> tuple[HostCheck, ...]:
        return tuple(check for check in self.checks if check.agrees is False)


def join_host(
    files: Sequence[HostLogFile],
    sites: Sequence[FaultSite],
    running: Sequence[str],
    dump_path: Path,
    pci: Sequence[tuple[int, int]] = (),
) -> HostJoin:
    """Host logs joined to a dump's fault `sites` (`running`: the mangled names of the
    kernels its grids run, for a dump without a fault; `pci`: its GPUs' (bus, device))."""
    faulting = tuple(dict.fromkeys(s.function.name for s in sites if s.function is not None))
    kernels = faulting or tuple(dict.fromkeys(running))
    dump = DumpFacts(
        dump_path, tuple(sites), kernels, tuple(_pointer_lanes(sites)), _access_kinds(sites),
        tuple(pci),
    )  # fmt: skip
    checks: list[HostCheck] = []
    api: list[ApiJoin] = []
    findings: list[Finding] = []
    for file in files:
        if file.driver is not None:
            checks += driver_checks(file.path, file.driver, dump)
            findings += _gpu_lost(file.path, file.driver, dump.pci)
        if file.sanitizer is not None:
            checks += sanitizer_checks(file.path, file.sanitizer, dump)
        if file.cuda_errors is not None:
            checks += _cuda_error_checks(file.path, file.cuda_errors, sites, kernels)
            findings += _surfaced_elsewhere(file.path, file.cuda_errors, sites)
        if file.sglang is not None:
            joined = _api_join(file.path, file.sglang, kernels)
            api.append(joined)
            findings += _api_findings(joined)
    findings = _file_findings(files) + findings
    disagreeing = [check for check in checks if check.agrees is False]
    if disagreeing:
        findings.append(_disagreement(disagreeing))
    findings.sort(key=lambda f: _SEVERITY_ORDER.index(f.severity))  # stable: file order kept
    return HostJoin(tuple(files), tuple(checks), tuple(api), tuple(findings))


def _pointer_lanes(sites: Sequence[FaultSite]) -> list[LaneAddress]:
    """The lanes whose address is a virtual address (not a shared or local offset)."""
    lanes: list[LaneAddress] = []
    for site in sites:
        forensics = site.forensics
        if forensics is None or forensics.access is None:
            continue
        if forensics.access.space in ("global", "generic"):
            lanes += forensics.lanes
    return lanes


def _access_kinds(sites: Sequence[FaultSite]) -> tuple[str, ...]:
    kinds = (s.forensics.access.kind for s in sites if s.forensics and s.forensics.access)
    return tuple(dict.fromkeys(kinds))


# --- CUDA errors the host reported --------------------------------------------------------


def _cuda_error_checks(
    path: Path, log: CudaErrorLog, sites: Sequence[FaultSite], kernels: Sequence[str]
) -> list[HostCheck]:
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


def _surfaced_elsewhere(path: Path, log: CudaErrorLog, sites: Sequence[FaultSite]) -> list[Finding]:
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


# --- SGLang kernel API log ------------------------------------------------------------------


def _api_join(path: Path, log: SglangLog, kernels: Sequence[str]) -> ApiJoin:
    found = best_api_match([call.name for call in log.calls], kernels)
    if found is None:
        return ApiJoin(path, log, None, None, None)
    index, kernel, how = found
    return ApiJoin(path, log, log.calls[index], kernel, how)


def _api_findings(joined: ApiJoin) -> list[Finding]:
    findings: list[Finding] = []
    calls = [joined.match] if joined.match is not None else list(joined.last_calls)
    for call in calls:
        if not call.flagged:
            continue
        evidence = tuple(
            f"{a.name}: nan_count={_count(a.tensor.nan_count if a.tensor else None)}, "
            f"inf_count={_count(a.tensor.inf_count if a.tensor else None)}, "
            f"shape {(a.tensor.shape_text if a.tensor else None) or '?'}"
            for a in call.flagged
        )
        findings.append(
            Finding(
                FindingCode.NAN_OR_INF_INPUT,
                Severity.WARNING,
                f"{call.name} (line {call.line} of {joined.path.name}) was given a tensor "
                "holding NaN or Inf: the bad values were there before its kernel ran",
                evidence,
                "look at the call that produced them, the one logged before it",
            )
        )
    saved = joined.match or next((c for c in reversed(joined.log.calls) if c.dump_dir), None)
    if saved is not None and saved.dump_dir:
        which = (
            "the call that launched the faulting kernel"
            if joined.match
            else ("the last call whose inputs were saved (no call matched the faulting kernel)")
        )
        findings.append(
            Finding(
                FindingCode.REPLAYABLE_INPUTS,
                Severity.INFO,
                f"the inputs of {saved.name}, {which}, were saved before it ran: {saved.dump_dir}",
                (f"{joined.path.name}:{saved.line}: {saved.name}",),
                f"replay it offline: torch.load('{saved.dump_dir}/inputs.pt'), with "
                "metadata.json beside it",
            )
        )
    return findings


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


# --- Files and disagreements ----------------------------------------------------------------


def _file_findings(files: Sequence[HostLogFile]) -> list[Finding]:
    findings: list[Finding] = []
    for file in files:
        if not file.kinds:
            findings.append(
                Finding(
                    FindingCode.HOST_LOG_NOT_RECOGNIZED,
                    Severity.INFO,
                    f"{file.path}: not recognized: no SGLang kernel API call, CUDA error, "
                    "driver line or compute-sanitizer report in it",
                    (f"{file.lines} lines read",),
                )
            )
        if file.cut:
            findings.append(
                Finding(
                    FindingCode.HOST_LOG_CUT,
                    Severity.INFO,
                    f"{file.path}: only its last {size_text(file.size_bytes - file.read_from)} "
                    f"of {size_text(file.size_bytes)} were read; line numbers count from byte "
                    f"{file.read_from}",
                    caveat="what the log said before that is not in this report",
                )
            )
    return findings


def _gpu_lost(path: Path, log: DriverLog, pci: Sequence[tuple[int, int]]) -> list[Finding]:
    lost = [x for x in log.xids if x.xid == 79]
    if not lost:
        return []
    caveat = None
    if pci and not any(pci_address(x.pci) in pci for x in lost):
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


def _disagreement(checks: Sequence[HostCheck]) -> Finding:
    facts = ", ".join(dict.fromkeys(check.fact for check in checks))
    return Finding(
        FindingCode.HOST_DISAGREES,
        Severity.WARNING,
        f"the host log disagrees with the dump on: {facts}",
        tuple(
            f"{c.path.name}:{c.line} ({c.source}): {c.fact}: host {c.host}; dump {c.dump}"
            for c in checks[:8]
        ),
        "check that the log and the dump come from the same run (process, time, host)",
    )
