"""The analysis a scan's row needs, and nothing more: no tool runs for a signature.

`postmortem.analysis.analyze.analyze_dump` makes everything a report shows: nvdisasm's
listing and forensics at every site, cuda-gdb's second opinion, the builds' provenance. A
row of a signature scan (no per-dump report, no Sentry event, no incident) needs the
summary, the located faults with the line table's inline chain, the warps' state and the
verdict, all read natively in milliseconds; and the instruction at the faulting PC, which
`postmortem.scan.work.instruction` has nvdisasm work out once per function for the whole fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from postmortem.analysis.analyze import (
    Analysis,
    AnalysisMode,
    AnalyzeOptions,
    modules_that_matter,
)
from postmortem.analysis.fault.fault import FaultSite, localize
from postmortem.analysis.hang.hang import analyze_hang
from postmortem.analysis.provenance import build_provenance
from postmortem.analysis.state import KernelState, gpu_state, warp_pcs
from postmortem.analysis.verdict import decide, without_claims
from postmortem.codemap import CodeMap, CubinMemo
from postmortem.coredump import open_coredump
from postmortem.model import FaultSource
from postmortem.salvage import dump_findings, lost_rows, lost_warps
from postmortem.scan.build import build_key
from postmortem.scan.work.instruction import InstructionMemo
from postmortem.summary import summarize
from postmortem.tools import Tool

SKIPPED_GDB = "cuda-gdb not run: a signature scan needs no second opinion"


@dataclass(frozen=True, slots=True)
class AtPc:
    """What the row says of the faulting PC's instruction (see `DumpRow.instruction`)."""

    code_key: str | None = None
    instruction: str | None = None
    note: str | None = None
    retry: bool = False
    """nvdisasm timed out or was killed: the row is not cached, so a later scan tries again."""
    build_key: str | None = None
    """The faulting module's build (`postmortem.scan.build.build_key`)."""


_WARP_ASSERT = 12


def _deliberate(site: FaultSite) -> bool:
    """A failed assert or a warp stopped at a trap."""
    return site.exception == _WARP_ASSERT or any(f.source is FaultSource.TRAP for f in site.faults)


def lean_analysis(
    path: Path,
    options: AnalyzeOptions,
    memo: InstructionMemo | None,
    cubins: CubinMemo | None = None,
) -> tuple[Analysis, AtPc]:
    """The dump at `path` analyzed for its row; the instruction at its faulting PC when
    `memo` is given and `options` allow nvdisasm. With `cubins`, each cubin's facts are
    those of an earlier dump's image of the same content, when there was one.

    Raises:
        PostmortemError: the dump cannot be read (as `analyze_dump`).
    """
    native = replace(options.localize, nvdisasm=Tool.OFF)
    at_pc = AtPc()
    with open_coredump(path) as core:
        code_map = CodeMap(core, cubins)
        # The findings read every warp and lane table: made once, after all is read.
        summary = summarize(core, code_map, findings=False)
        sites = localize(core, native, code_map, summary.faults)
        hang_wanted = options.mode is AnalysisMode.HANG or (
            options.mode is AnalysisMode.AUTO and not sites
        )
        state: tuple[KernelState, ...] = ()
        hang = None
        if hang_wanted or not any(site.module is not None for site in sites):
            # A fault's row reads the fault site alone (its verdict, signature and build):
            # the other warps of the device are read for a hang's row only.
            warps = warp_pcs(core)
            state = gpu_state(core, code_map, warps)
            if hang_wanted:
                hang = analyze_hang(core, warps, native, code_map)
                hang = without_claims(hang, lost_warps(core))
        summary = replace(summary, findings=dump_findings(core, code_map))
        if sites and options.localize.nvdisasm.run and _deliberate(sites[0]):
            # An assert or a trap is named from its function's code: that one site is read
            # whole, so that its row signs and reads as the full analysis does.
            whole = localize(core, options.localize, code_map, sites[0].faults)
            sites = (*whole, *sites[1:])
        if memo is not None and sites and options.localize.nvdisasm.run:
            at_pc = AtPc(*memo.row_facts(core, code_map, sites[0], options.localize))
        if sites:
            at_pc = replace(at_pc, build_key=build_key(code_map, sites[0].module))
        core.file.check_unchanged()  # an object replaced while read: no row
        # The builds say whether a hang group's cubin has line info: its signature's advice.
        builds = build_provenance(code_map, modules_that_matter(core, code_map, sites, state))
    verdict = decide(sites, hang, state, lost_rows(summary.findings))
    analysis = Analysis(
        path, summary, sites, state, hang, None, SKIPPED_GDB, builds=builds, verdict=verdict
    )
    return analysis, at_pc
