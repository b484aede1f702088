"""One dump, analyzed: fault sites, GPU state, and cuda-gdb's second opinion when it is there."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from postmortem._version import __version__
from postmortem.analysis.fault.disassembly import start_fault_disassembly
from postmortem.analysis.fault.options import LocalizeOptions
from postmortem.analysis.provenance import (
    BuildInfo,
    ToolUse,
    build_provenance,
    tool_choice,
    tool_uses,
)
from postmortem.analysis.verdict import Verdict, VerdictKind, decide, without_claims
from postmortem.codemap import CodeMap
from postmortem.coredump import Coredump, open_coredump
from postmortem.coredump.elf import MappedFile
from postmortem.coredump.remote import RemoteFile
from postmortem.errors import ToolFailed, ToolNotFound
from postmortem.model import Module, TextEnum
from postmortem.salvage import dump_findings, lost_rows, lost_warps
from postmortem.summary import DumpSummary, summarize
from postmortem.tools import Tool, ToolChoice, tool_version
from postmortem.urls import DumpUrl

if TYPE_CHECKING:
    from postmortem.analysis.crosscheck import CrossCheck
    from postmortem.analysis.fault.census import CensusRow
    from postmortem.analysis.fault.fault import FaultSite
    from postmortem.analysis.hang.hang import HangAnalysis
    from postmortem.analysis.host.join import HostJoin
    from postmortem.analysis.state import KernelState
    from postmortem.gdb import GdbSession
    from postmortem.host.model import HostLogFile


class AnalysisMode(TextEnum):
    """Which analysis a dump gets (`analyze --mode`)."""

    AUTO = "auto"
    """The hang analysis when the dump records no exception, else the fault's."""
    FAULT = "fault"
    HANG = "hang"
    """Where every warp is stuck and why, whatever the dump records."""


@dataclass(frozen=True, slots=True)
class AnalyzeOptions:
    """Localization options plus whether and how to ask cuda-gdb."""

    localize: LocalizeOptions = field(default_factory=LocalizeOptions)
    mode: AnalysisMode = AnalysisMode.AUTO
    cuda_gdb: Tool = Tool()
    """Which cuda-gdb to ask; off: none (`--no-gdb`; a script may pass False, or a path:
    `Tool.of`)."""
    host_logs: tuple[Path, ...] = ()
    """What the host wrote around the crash (`--host-log`), read and joined to the dump."""
    redact: bool = True
    """Secrets and home folders hidden in what the host logs say (`postmortem.host.redact`);
    False: the logs' text as written (`--no-redact`)."""

    def __post_init__(self) -> None:
        # A script may name the mode by its text ("hang"); an unknown one is a ValueError.
        object.__setattr__(self, "mode", AnalysisMode(self.mode))
        object.__setattr__(self, "cuda_gdb", Tool.of(self.cuda_gdb))


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything `analyze` reports about one dump."""

    path: Path
    summary: DumpSummary
    """What the native reader read: devices, launches, modules, metadata, format."""
    sites: tuple[FaultSite, ...]
    state: tuple[KernelState, ...]
    """Where every warp was, per grid."""
    hang: HangAnalysis | None
    """Where everything is stuck and why (hang mode); None in fault mode."""
    crosscheck: CrossCheck | None
    """None when cuda-gdb was not run; `gdb_note` says why."""
    gdb_note: str | None
    census: tuple[CensusRow, ...] = ()
    """The fault sites merged by kernel and offset, with their lane/warp/CTA/SM counts."""
    builds: tuple[BuildInfo, ...] = ()
    """How the faulting modules (else those of the running grids) were built."""
    verdict: Verdict = Verdict(VerdictKind.NO_EXCEPTION, "")
    """What happened, in one line."""
    provenance: tuple[ToolUse, ...] = ()
    """Which source gave which facts, and why a tool was not used."""
    host: HostJoin | None = None
    """What the host logs (`AnalyzeOptions.host_logs`) add; None when none was given."""
    redact: bool = True
    """Home folders hidden in every path the report carries, as `AnalyzeOptions.redact` asked."""


def analyze_dump(path: Path, options: AnalyzeOptions | None = None) -> Analysis:
    """Localize every fault of the dump at `path`, census its warps, cross-check with cuda-gdb."""
    options = options or AnalyzeOptions()
    # Host logs first: one that cannot be read stops the analysis before any work. Their
    # readers, like cuda-gdb's, are loaded only when asked for: start-up is felt every run.
    host_logs = _host_logs(options.host_logs)
    # cuda-gdb reads the dump on its own: it runs while the native reader and nvdisasm work.
    # It runs in its own session, out of reach of the user's Ctrl-C: if anything here ends
    # the analysis early, it is cancelled rather than waited for.
    cancel = threading.Event()
    # nvdisasm too runs in the pool, from the moment the faulting function is known.
    with ThreadPoolExecutor(max_workers=2) as pool, open_coredump(path) as core:

        def start_gdb(summary: DumpSummary) -> Future[_GdbOutcome] | None:
            if not options.cuda_gdb.run:
                return None
            # A compressed dump is given to cuda-gdb as the reader's decompressed copy.
            local = core.file.child_path() if isinstance(core.file, MappedFile) else path
            return pool.submit(_run_gdb, local, options, cancel, summary)

        def start_nvdisasm(code_map: CodeMap, summary: DumpSummary) -> None:
            start_fault_disassembly(code_map, summary.faults, options.localize, pool, cancel)

        try:
            analysis = _analyze(path, core, options, start_gdb, start_nvdisasm)
            core.file.check_unchanged()  # an object replaced while read: no report
        except BaseException:
            cancel.set()
            raise
    analysis = replace(analysis, redact=options.redact)
    if not host_logs:
        return analysis
    running = tuple(k.kernel for k in analysis.state if k.kernel is not None)
    pci = tuple(
        (d.pci_bus_id, d.pci_dev_id)
        for d in analysis.summary.devices
        if d.pci_bus_id is not None and d.pci_dev_id is not None
    )
    metadata = analysis.summary.metadata
    written = metadata.timestamp if metadata is not None else None
    from postmortem.analysis.host.join import join_host
    from postmortem.host.redact import redact_strings

    join = join_host(host_logs, analysis.sites, running, path, pci, dump_time=written)
    return replace(analysis, host=redact_strings(join) if options.redact else join)


def _host_logs(paths: tuple[Path, ...]) -> tuple[HostLogFile, ...]:
    if not paths:
        return ()
    from postmortem.host.reader import read_host_logs

    return read_host_logs(paths)


def _analyze(
    path: Path,
    core: Coredump,
    options: AnalyzeOptions,
    start_gdb: Callable[[DumpSummary], Future[_GdbOutcome] | None],
    start_nvdisasm: Callable[[CodeMap, DumpSummary], None],
) -> Analysis:
    code_map = CodeMap(core)
    # The findings read every warp and lane table: made once, at the end, after localizing
    # (a warp's barrier info read there may add some).
    summary = summarize(core, code_map, findings=False)
    # Started once the summary says whether it can read the dump (milliseconds in); it then
    # runs while nvdisasm and the rest of the analysis work.
    gdb = start_gdb(summary)
    # nvdisasm's fixed cost (most of a second) is paid while the analysis's own modules load
    # and the warps are read.
    start_nvdisasm(code_map, summary)
    from postmortem.analysis.fault.census import fault_census
    from postmortem.analysis.fault.fault import localize
    from postmortem.analysis.hang.hang import analyze_hang
    from postmortem.analysis.state import gpu_state, warp_pcs

    warps = warp_pcs(core)
    state = gpu_state(core, code_map, warps)
    sites = localize(core, options.localize, code_map, summary.faults)
    hang = None
    if options.mode is AnalysisMode.HANG or (options.mode is AnalysisMode.AUTO and not sites):
        hang = without_claims(
            analyze_hang(core, warps, options.localize, code_map), lost_warps(core)
        )
    check, note, gdb_ran = _second_opinion(core, gdb, summary, code_map)
    if check is not None:
        from postmortem.analysis.crosscheck import named_by_gdb

        sites, check = named_by_gdb(sites, check)
    builds = build_provenance(code_map, modules_that_matter(core, code_map, sites, state))
    summary = replace(summary, findings=dump_findings(core, code_map))
    return Analysis(
        path, summary, sites, state, hang, check, note, fault_census(sites), builds,
        decide(sites, hang, state, lost_rows(summary.findings)),
        tool_uses(
            __version__, sites, hang, check, note, transfer_note(core),
            (_nvdisasm_choice(options.localize), gdb_ran),
        ),
    )  # fmt: skip


def _nvdisasm_choice(localize: LocalizeOptions) -> ToolChoice | None:
    """The nvdisasm executable this analysis ran, and what chose it."""
    return tool_choice("nvdisasm", localize.nvdisasm) if localize.nvdisasm.run else None


def transfer_note(core: Coredump) -> str | None:
    """What reading a dump in an object store cost: bytes and requests; None for a file."""
    file = core.file
    if not isinstance(file, RemoteFile):
        return None
    how = "streamed whole (compressed)" if file.compressed else "read by ranges"
    return (
        f"{how} from the store: {file.bytes_fetched:,} of {file.stored_size:,} bytes "
        f"in {file.requests} requests"
    )


def modules_that_matter(
    core: Coredump, code_map: CodeMap, sites: tuple[FaultSite, ...], state: tuple[KernelState, ...]
) -> list[Module]:
    """The faulting modules; in a dump without a fault, the modules of the running grids."""
    faulting = [site.module for site in sites if site.module is not None]
    if faulting:
        return faulting
    from postmortem.analysis.state import kernel_code

    codes = (kernel_code(core, code_map, k.device_index, k.grid_id) for k in state)
    return [code[0].module for code in codes if code is not None]


_GdbOutcome: TypeAlias = "tuple[GdbSession | str, ToolChoice | None]"
"""cuda-gdb's session, or why there is none; and the executable, when it ran."""


def _run_gdb(
    path: Path, options: AnalyzeOptions, cancel: threading.Event, summary: DumpSummary
) -> _GdbOutcome:
    """cuda-gdb's session on the dump, or why there is none, and the executable that ran."""
    from postmortem.analysis.crosscheck import gdb_cannot_read
    from postmortem.gdb import run_cuda_gdb

    if isinstance(path, DumpUrl):
        return "cuda-gdb not run: it reads local files, and this dump is at a URL", None
    try:
        choice = options.cuda_gdb.locate("cuda-gdb")
    except ToolNotFound as error:
        return f"cuda-gdb not found, so no second opinion; {error.hint}", None
    # A cuda-gdb known not to read this dump would spend seconds saying nothing of it.
    cannot = gdb_cannot_read(tool_version(choice.path), summary)
    if cannot is not None:
        return cannot, None
    try:
        session = run_cuda_gdb(
            path, cuda_gdb=choice.path, timeout=options.localize.timeout, cancel=cancel
        )
    except ToolNotFound as error:
        return f"cuda-gdb not found, so no second opinion; {error.hint}", None
    except ToolFailed as error:
        return f"cuda-gdb failed: {error}", choice
    return session, choice


def _second_opinion(
    core: Coredump, gdb: Future[_GdbOutcome] | None, summary: DumpSummary, code_map: CodeMap
) -> tuple[CrossCheck | None, str | None, ToolChoice | None]:
    """The cross-check or why there is none, and the cuda-gdb that ran (None: none ran)."""
    if gdb is None:
        return None, "cuda-gdb not run (--no-gdb)", None
    session, ran = gdb.result()
    if isinstance(session, str):
        return None, session, ran
    from postmortem.analysis.crosscheck import crosscheck

    return crosscheck(core, session, summary, code_map), None, ran
