"""Scan one dump: analyze it, sign it, write its report; a broken dump becomes an error row.

This runs inside a worker process. It never raises for a bad dump: every failure, ours
included, is a row with a one-line reason, so one dump never stops a scan.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from postmortem.analysis.analyze import Analysis, AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.source import PathMap
from postmortem.analysis.fleet.signature import (
    SignatureRules,
    compute_signature,
    signature_input,
)
from postmortem.codemap import CodeMap, CubinMemo
from postmortem.coredump import open_coredump
from postmortem.cubin.nvdisasm import DisassemblyStore
from postmortem.demangle import demangle
from postmortem.dumpnames import DEFAULT_PATTERNS, NameFacts, parse_name
from postmortem.errors import NoGpuState, PostmortemError
from postmortem.findings import Finding, FindingCode
from postmortem.model import Device, Module, TimeSource
from postmortem.report.context import build_report
from postmortem.report.formats import suffix_of
from postmortem.report.render import report_text
from postmortem.report.values import version_or_none
from postmortem.scan.build import build_key
from postmortem.scan.discover.remote import object_info
from postmortem.scan.row import DumpRow, RowStatus, Triage, error_row, verdict_context
from postmortem.scan.work.fingerprint import fingerprint
from postmortem.scan.work.instruction import InstructionMemo
from postmortem.scan.work.lean import lean_analysis
from postmortem.urls import DumpUrl

REPORT_FAILED = "cannot write its report"
"""How the error of a row whose dump was read but whose report could not be written starts;
such rows are not cached, so the next scan tries again."""


@dataclass(frozen=True, slots=True)
class WorkOptions:
    """Everything a worker needs to scan one dump."""

    analyze: AnalyzeOptions
    rules: SignatureRules
    name_patterns: tuple[str, ...] = DEFAULT_PATTERNS
    reports_dir: Path | None = None
    """Where per-dump reports go; None: no reports."""
    report_format: str = "html"
    triage: bool = False
    """Give each row what a crash-triage event needs (`DumpRow.triage`): the verdict and
    the report in Markdown."""
    full_analysis: bool = False
    """Analyze every dump as `analyze` does, with nvdisasm at each site, even when neither a
    report nor an event needs it (`--incident`: its verdicts name hang patterns read from
    SASS). Otherwise a row gets the lean analysis (`postmortem.scan.work.lean`)."""
    code_cache: Path | None = None
    """The scan cache file whose ``code`` table remembers each function's instructions for
    every worker (`postmortem.scan.work.instruction`); None: each worker's memory only."""
    remember_code: bool = True
    """False: nvdisasm runs again for every dump (the benchmark's baseline)."""
    remember_cubins: bool = True
    """False: every dump's cubins are decoded again, even where an earlier dump of this
    worker held an image of the same content (`postmortem.codemap.CubinMemo`)."""

    @property
    def lean(self) -> bool:
        """True when a row needs only the lean analysis: no report, event or incident."""
        return self.reports_dir is None and not self.triage and not self.full_analysis


def with_store(options: WorkOptions, store: DisassemblyStore) -> WorkOptions:
    """`options` with disassemblies remembered in `store` (one per worker process)."""
    localize = replace(options.analyze.localize, store=store)
    return replace(options, analyze=replace(options.analyze, localize=localize))


def report_path(dump: str, options: WorkOptions) -> Path | None:
    """Where the report of `dump` goes: its name made safe plus a hash of its path."""
    if options.reports_dir is None:
        return None
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(dump).name)[:80]
    tag = hashlib.sha256(dump.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return options.reports_dir / f"{stem}-{tag}{suffix_of(options.report_format)}"


def scan_dump(path: Path, options: WorkOptions, name: str | None = None) -> DumpRow:
    """The row of the dump at `path` (an error row when it cannot be analyzed).

    `name`: the path as the scan names it, when `path` is another spelling of it (a Dask
    worker opens the absolute path); the row, and its report's file name, use `name`.
    """
    started = time.monotonic()
    shown = str(path) if name is None else name
    names = parse_name(Path(shown).name, options.name_patterns)
    try:
        info, print_ = _stat(path)
    except OSError as error:
        return with_names(error_row(shown, 0, 0.0, RowStatus.ERROR, _oneline(error)), names)
    try:
        if options.lean:
            found, at_pc = lean_analysis(path, options.analyze, _memo(options), _cubins(options))
            row = _row(shown, _named(found, shown), info, names, options.rules, _maps(options))
            row = replace(
                row, code_key=at_pc.code_key, instruction=at_pc.instruction,
                instruction_note=at_pc.note, degraded=at_pc.retry, build_key=at_pc.build_key,
            )  # fmt: skip
        else:
            analysis = _named(analyze_dump(path, options.analyze), shown)
            row = _row(shown, analysis, info, names, options.rules, _maps(options))
            row = _with_outputs(row, analysis, options)
            site = analysis.sites[0] if analysis.sites else None
            if site is not None and site.instruction is not None:
                row = replace(row, instruction=site.instruction.text)
            if site is not None and site.module is not None:
                row = replace(row, build_key=_build_key(path, site.module, options))
    except PostmortemError as error:
        # Our errors start with the path; the row already names it.
        message = _oneline(error).removeprefix(f"{path}: ")
        row = error_row(shown, info.st_size, info.st_mtime, RowStatus.ERROR, message)
        row = replace(row, no_gpu_state=isinstance(error, NoGpuState))
    except Exception as error:  # a bug of ours must not stop the scan: say it in the row
        message = f"internal error: {type(error).__name__}: {_oneline(error)}"
        row = error_row(shown, info.st_size, info.st_mtime, RowStatus.ERROR, message)
    row = replace(row, seconds=round(time.monotonic() - started, 4), fingerprint=print_)
    return with_names(row, names)


def _build_key(path: Path, module: Module, options: WorkOptions) -> str | None:
    # A full analysis keeps no image bytes: the module's image is read again.
    with open_coredump(path) as core:
        return build_key(CodeMap(core, _cubins(options)), module)


# One per worker process and cache file: what it has worked out stays for its next dumps.
_MEMOS: dict[Path | None, InstructionMemo] = {}


def _memo(options: WorkOptions) -> InstructionMemo:
    if not options.remember_code:
        return InstructionMemo(None)
    memo = _MEMOS.get(options.code_cache)
    if memo is None:
        memo = _MEMOS[options.code_cache] = InstructionMemo(options.code_cache)
    return memo


# One per worker process: the cubins its dumps held, by content (a fleet's dumps come from a
# few builds, and each image is decoded once).
_CUBINS = CubinMemo()


def _cubins(options: WorkOptions) -> CubinMemo | None:
    return _CUBINS if options.remember_cubins else None


def _named(analysis: Analysis, name: str) -> Analysis:
    """`analysis` naming its dump `name`, as the scan does (its report says so too)."""
    if str(analysis.path) == name:
        return analysis
    return replace(analysis, path=Path(name), summary=replace(analysis.summary, path=name))


def _stat(path: Path) -> tuple[os.stat_result, str | None]:
    """`os.stat` of the dump at `path` (of a `DumpUrl`: its size and time in the store, from
    one request) and its content fingerprint (None when its content cannot be read).

    Raises:
        OSError: The file or object cannot be found or reached.
    """
    if isinstance(path, DumpUrl):
        stored = object_info(path)
        return stored.as_stat(), stored.fingerprint(path)
    info = os.stat(path)
    try:
        return info, fingerprint(path)
    except OSError:
        return info, None


def lost_row(
    path: Path, status: RowStatus, message: str, seconds: float, name: str | None = None
) -> DumpRow:
    """The row of a dump whose analysis gave no result (a timeout, a worker that died)."""
    try:
        info, print_ = _stat(path)
        size, mtime = info.st_size, info.st_mtime
    except OSError:
        size, mtime, print_ = 0, 0.0, None
    row = error_row(str(path) if name is None else name, size, mtime, status, message, seconds)
    return replace(row, fingerprint=print_)


def analysis_row(
    path: Path, analysis: Analysis, rules: SignatureRules, maps: Sequence[PathMap] = ()
) -> DumpRow:
    """The row of one dump analyzed outside a scan (`postmortem analyze --sentry-dsn`), with
    its triage facts: the facts a scan's row of the same dump holds, so that both make the
    same event (the same event id: Sentry keeps one)."""
    try:
        info, print_ = _stat(path)
    except OSError:  # gone since, or not a local file: no size, and no time but its own
        info, print_ = os.stat_result((0,) * 10), None
    names = parse_name(path.name, DEFAULT_PATTERNS)
    row = _row(str(path), analysis, info, names, rules, maps)
    row = replace(row, fingerprint=print_, triage=triage_of(analysis))
    return with_names(row, names)


def triage_of(analysis: Analysis) -> Triage:
    """What a crash-triage event adds to a dump's row: the verdict and the Markdown report."""
    return Triage(verdict_context(build_report(analysis, lanes=1)), report_text(analysis, "md"))


def _maps(options: WorkOptions) -> tuple[PathMap, ...]:
    return options.analyze.localize.sources.maps


def _with_outputs(row: DumpRow, analysis: Analysis, options: WorkOptions) -> DumpRow:
    target = report_path(row.path, options)
    if target is None and not options.triage:
        return row
    if options.triage:
        row = replace(row, triage=triage_of(analysis))
    if target is None:
        return row
    try:
        _write_report(analysis, target, options.report_format)
    except OSError as error:  # the dump was read; only its report is missing
        message = f"{REPORT_FAILED} {target}: {error.strerror or error}"
        return error_row(row.path, row.size_bytes, row.mtime, RowStatus.ERROR, message)
    return replace(row, report=str(target))


def _row(
    path: str,
    analysis: Analysis,
    info: os.stat_result,
    names: NameFacts,
    rules: SignatureRules,
    maps: Sequence[PathMap],
) -> DumpRow:
    summary = analysis.summary
    meta = summary.metadata
    facts = signature_input(analysis)
    signature = compute_signature(facts, rules, maps)
    trouble = next(
        (t for site in analysis.sites if (t := _tool_trouble(site.diagnoses)) is not None), None
    )
    if trouble is not None and not signature.quality.line_info and facts.has_line_info is not False:
        # The chain is missing because of nvdisasm, not the build: say which way it failed.
        signature = replace(signature, quality=replace(signature.quality, advice=trouble))
    when, source = float(info.st_mtime), TimeSource.MTIME
    if meta is not None and meta.timestamp:
        when, source = float(meta.timestamp), TimeSource.METADATA
    elif names.time is not None:
        when, source = float(names.time), TimeSource.NAME
    driver = version_or_none(meta.driver_version) if meta else None
    gpu, sm = _faulting_gpu(analysis)
    return DumpRow(
        path=path, size_bytes=info.st_size, mtime=info.st_mtime, status=RowStatus.OK, error=None,
        time=when, time_source=source, host=names.host, pid=names.pid, driver_version=driver,
        devices=tuple(d.name or "?" for d in summary.devices), exception=facts.exception,
        kernel=demangle(facts.kernel) if facts.kernel else None,
        fault_sites=len(analysis.sites), signature=signature,
        degraded=trouble is not None, headline=analysis.verdict.headline,
        live_kernels=() if analysis.sites else tuple(
            dict.fromkeys(k.kernel or "" for k in analysis.state if k.warps)
        ),
        pci_bus_id=gpu.pci_bus_id if gpu else None, pci_dev_id=gpu.pci_dev_id if gpu else None,
        gpu_name=gpu.name if gpu else None, sm=sm,
    )  # fmt: skip


def _faulting_gpu(analysis: Analysis) -> tuple[Device | None, int | None]:
    """The GPU of the first fault and its SM; of a dump without one, its first GPU."""
    devices = {d.index: d for d in analysis.summary.devices}
    for site in analysis.sites:
        for fault in site.faults:
            return devices.get(fault.device_index), fault.sm_id
    first = analysis.summary.devices[0] if analysis.summary.devices else None
    return first, None


def _tool_trouble(diagnoses: Sequence[Finding]) -> str | None:
    """Why nvdisasm gave no listing, in a phrase, or None when it did not fail.

    "nvdisasm not found" and "nvdisasm refused the image: <its message>" (or "nvdisasm
    failed: …" for a timeout) are different troubles: only the first is cured by
    installing it.
    """
    for diagnosis in diagnoses:
        if diagnosis.code is FindingCode.NVDISASM_MISSING:
            return "nvdisasm not found" + (f" ({diagnosis.remedy})" if diagnosis.remedy else "")
        if diagnosis.code is FindingCode.NVDISASM_FAILED:
            return diagnosis.message
    return None


def with_names(row: DumpRow, names: NameFacts) -> DumpRow:
    """`row` with the host, pid (and, lacking a better one, the time) its file name gives."""
    if row.time_source == TimeSource.MTIME and names.time is not None:
        row = replace(row, time=float(names.time), time_source=TimeSource.NAME)
    return replace(row, host=names.host, pid=names.pid)


def _write_report(analysis: Analysis, target: Path, fmt: str) -> None:
    text = report_text(analysis, fmt)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    partial.write_text(text, encoding="utf-8", errors="surrogateescape")
    partial.replace(target)


def _oneline(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__
