"""Host evidence joined to the dump: what the host printed, checked against what the dump says.

Each host log (read by `postmortem.host`) is compared with the analysis fact by fact, by the
module of its kind: `driver.py`, `sanitizer.py`, `cudaerror.py`, `sglang.py`, `vllm.py`,
`crashpickle.py` (SGLang's crash dump pickle). A fact the dump does not hold is not compared
(`agrees` None), never guessed. What can be acted on becomes a `Finding`; this module gathers
them, with those on the files themselves and the disagreements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.forensics.address import LaneAddress
from postmortem.analysis.host.check import DumpFacts, HostCheck
from postmortem.analysis.host.crashpickle import (
    CrashPickleJoin,
    DumpTime,
    crash_pickle_checks,
    crash_pickle_findings,
    join_crash_pickle,
)
from postmortem.analysis.host.cudaerror import cuda_error_checks, surfaced_elsewhere
from postmortem.analysis.host.driver import coredump_refused, driver_checks, gpu_lost
from postmortem.analysis.host.sanitizer import sanitizer_checks
from postmortem.analysis.host.sglang import ApiJoin, api_findings, join_api
from postmortem.analysis.host.vllm import VllmJoin, join_vllm, vllm_checks, vllm_findings
from postmortem.dumpnames import parse_name
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.host.crashpickle import CrashPickleSummary
from postmortem.host.model import HostLogFile
from postmortem.spelling import size_text

_SEVERITY_ORDER = (Severity.ERROR, Severity.WARNING, Severity.INFO)


@dataclass(frozen=True, slots=True)
class HostJoin:
    """Everything the host logs add to the analysis of a dump."""

    files: tuple[HostLogFile, ...]
    checks: tuple[HostCheck, ...]
    """Every fact compared, in file order."""
    api: tuple[ApiJoin, ...]
    """One per file holding an SGLang kernel API log."""
    findings: tuple[Finding, ...]
    vllm: tuple[VllmJoin, ...] = ()
    """One per file holding a vLLM engine dump."""
    crash_pickles: tuple[CrashPickleJoin, ...] = ()
    """One per file read as a pickle (SGLang's crash dump, or a pickle that is not)."""

    @property
    def disagreements(self) -> tuple[HostCheck, ...]:
        return tuple(check for check in self.checks if check.agrees is False)


def join_host(
    files: Sequence[HostLogFile],
    sites: Sequence[FaultSite],
    running: Sequence[str],
    dump_path: Path,
    pci: Sequence[tuple[int, int]] = (),
    dump_time: int | None = None,
) -> HostJoin:
    """Host logs joined to a dump's fault `sites` (`running`: the mangled names of the
    kernels its grids run, for a dump without a fault; `pci`: its GPUs' (bus, device);
    `dump_time`: its metadata timestamp, Unix seconds, else its name's ``%t`` is used)."""
    faulting = tuple(dict.fromkeys(s.function.name for s in sites if s.function is not None))
    kernels = faulting or tuple(dict.fromkeys(running))
    dump = DumpFacts(
        dump_path, tuple(sites), kernels, tuple(_pointer_lanes(sites)), _access_kinds(sites),
        tuple(pci),
    )  # fmt: skip
    checks: list[HostCheck] = []
    api: list[ApiJoin] = []
    engines: list[VllmJoin] = []
    pickles: list[CrashPickleJoin] = []
    findings: list[Finding] = []
    for file in files:
        if file.driver is not None:
            checks += driver_checks(file.path, file.driver, dump)
            findings += gpu_lost(file.path, file.driver, dump.pci)
            findings += coredump_refused(file.path, file.driver)
        if file.sanitizer is not None:
            checks += sanitizer_checks(file.path, file.sanitizer, dump)
        if file.cuda_errors is not None:
            checks += cuda_error_checks(file.path, file.cuda_errors, sites, kernels)
            findings += surfaced_elsewhere(file.path, file.cuda_errors, sites)
        if file.sglang is not None:
            joined = join_api(file.path, file.sglang, kernels)
            api.append(joined)
            findings += api_findings(joined)
        if file.vllm is not None:
            engine = join_vllm(file.path, file.vllm)
            engines.append(engine)
            checks += vllm_checks(file.path, file.vllm)
            findings += vllm_findings(engine)
        if file.crash_pickle is not None:
            pickled = join_crash_pickle(
                file.path, file.crash_pickle, _dump_time(dump_path, dump_time)
            )
            pickles.append(pickled)
            checks += crash_pickle_checks(pickled)
            findings += crash_pickle_findings(pickled)
    findings = _file_findings(files) + findings
    disagreeing = [check for check in checks if check.agrees is False]
    if disagreeing:
        findings.append(_disagreement(disagreeing))
    findings.sort(key=lambda f: _SEVERITY_ORDER.index(f.severity))  # stable: file order kept
    return HostJoin(
        tuple(files), tuple(checks), tuple(api), tuple(findings), tuple(engines), tuple(pickles)
    )


def _dump_time(path: Path, metadata: int | None) -> DumpTime | None:
    if metadata:
        return DumpTime(float(metadata), from_metadata=True)
    named = parse_name(path.name).time
    return None if named is None else DumpTime(float(named), from_metadata=False)


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


def _file_findings(files: Sequence[HostLogFile]) -> list[Finding]:
    findings: list[Finding] = []
    for file in files:
        pickled = file.crash_pickle
        if pickled is not None:
            # One that names code-running callables: `crash_pickle_findings` warns of it.
            if not file.kinds and not pickled.code_calls:
                findings.append(_pickle_not_recognized(file.path, pickled))
        elif not file.kinds:
            findings.append(
                Finding(
                    FindingCode.HOST_LOG_NOT_RECOGNIZED,
                    Severity.INFO,
                    f"{file.path}: not recognized: no SGLang kernel API call, CUDA error, "
                    "driver line, compute-sanitizer report, vLLM engine dump or SGLang crash "
                    "dump in it",
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


def _pickle_not_recognized(path: Path, summary: CrashPickleSummary) -> Finding:
    said = [*([summary.stopped] if summary.stopped else []), *summary.notes]
    return Finding(
        FindingCode.HOST_LOG_NOT_RECOGNIZED,
        Severity.INFO,
        f"{path}: a pickle, read without loading it, but not an SGLang crash dump",
        tuple(said) or (f"{summary.opcodes_read:,} opcodes read",),
    )


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
