"""The on-call summary: the five lines an incident note starts with, drawn from an analysis.

SGLang's serving-debug skill (`sglang-prod-incident-triage`) asks a triage to return the
problem class, the strongest signal so far, the current best guess, what was ruled out and
the next step. Each line here is built from what the `Analysis` holds (its verdict, the
findings and their remedies, the fault sites, the forensics, the build notes, the cuda-gdb
cross-check) and names where it came from. A part with no basis stays empty (None, or no
statements), so a report can say "none checked" instead of guessing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from postmortem.analysis.analyze import Analysis
from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.hang.collective import is_collective
from postmortem.analysis.hang.hang import StuckGroup
from postmortem.analysis.oncall import evidence as parts
from postmortem.analysis.oncall.deliberate import (
    assert_frame,
    assert_signal,
    assert_step,
    trap_frame,
    trap_signal,
    trap_step,
)
from postmortem.analysis.oncall.evidence import NATIVE, BestGuess, Statement
from postmortem.analysis.state import KernelState
from postmortem.analysis.verdict import site_title
from postmortem.demangle import base_name, collapse_templates, heading_name
from postmortem.exceptions import PROBLEM_WORDS, ProblemClass, find_exception
from postmortem.findings import Finding, FindingCode
from postmortem.model import LOST_EXCEPTION, FaultSource
from postmortem.salvage import lost_rows

__all__ = ["BestGuess", "OnCallSummary", "ProblemClass", "Statement", "oncall_summary"]


_BY_PATTERN = {
    FindingCode.DIVERGENT_BARRIER: (ProblemClass.HANG_AT_BARRIER, "hang at a block barrier"),
    FindingCode.CONVERGENCE_SPLIT: (
        ProblemClass.HANG_AT_CONVERGENCE, "hang at a warp convergence barrier"
    ),
    FindingCode.SPIN_WAIT: (ProblemClass.SPIN_WAIT, "hang in a spin-wait loop"),
    FindingCode.NAMED_BARRIER_STARVED: (
        ProblemClass.HANG_AT_BARRIER, "hang at a named barrier no live warp can complete"
    ),
    FindingCode.CIRCULAR_WAIT: (
        ProblemClass.HANG_AT_BARRIER, "likely hang: a circular wait in a warp-specialized pipeline"
    ),
    FindingCode.PIPELINE_STALLED: (
        ProblemClass.HANG_AT_BARRIER,
        "likely hang: a warp-specialized pipeline whose producer is gone",
    ),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class OnCallSummary:
    """The block an on-call note starts with, each part with its basis."""

    problem_class: ProblemClass
    problem: str
    """The class in words, with the exception's name and number when there is one."""
    strongest_signal: Statement | None
    """The one fact that best supports the class; None when nothing does."""
    best_guess: BestGuess | None
    """Where the problem most likely is; None when the dump points nowhere."""
    ruled_out: tuple[Statement, ...]
    """What the analysis checked and excluded (empty: none checked)."""
    next_step: Statement | None
    """What to do next, from a finding's remedy or what the evidence lacks; None: no basis."""


def oncall_summary(analysis: Analysis) -> OnCallSummary:
    """The on-call summary of `analysis` (its first fault site, else its hang)."""
    if analysis.sites:
        return _fault_summary(analysis, analysis.sites[0])
    lost = lost_rows(analysis.summary.findings)
    if lost is not None:  # the absence of an exception says nothing: it may have been lost
        return OnCallSummary(
            ProblemClass.DAMAGED, "damaged dump: no exception found in what could be read",
            Statement(lost, "native reader: salvage"), None,
            parts.common_ruled_out(analysis, None), parts.dump_step(analysis),
        )  # fmt: skip
    live = [k for k in analysis.state if k.warps]
    if live and all(is_collective(k.kernel) for k in live):
        return _collective_summary(analysis, live)
    if analysis.hang is not None:
        return _hang_summary(analysis)
    return OnCallSummary(
        ProblemClass.NO_EXCEPTION, "no exception recorded, and no hang analysis asked for",
        parts.no_exception(analysis), None, parts.common_ruled_out(analysis, None),
        Statement(
            f"analyze it as a hang: `postmortem analyze {analysis.path} --mode hang`", "verdict"
        ),
    )  # fmt: skip


def _fault_summary(analysis: Analysis, site: FaultSite) -> OnCallSummary:
    problem_class, problem = _fault_class(site)
    return OnCallSummary(
        problem_class,
        problem,
        _fault_signal(site),
        _with_assert(parts.site_guess(analysis, site), site),
        (*parts.site_ruled_out(site), *parts.common_ruled_out(analysis, site)),
        parts.cross_check_step(analysis)
        or assert_step(site)
        or trap_step(site)
        or parts.finding_step(site.diagnoses, site)
        or parts.dump_step(analysis)
        or parts.localized_step(site, problem_class is ProblemClass.DEVICE_ASSERT),
    )


def _with_assert(guess: BestGuess, site: FaultSite) -> BestGuess:
    """Without an inline chain, the place a failed assert (or a trap's message) names is the
    frame to read, and the source line is no longer unknown."""
    named = assert_frame(site) or ((trap_frame(site), None) if trap_frame(site) else None)
    if guess.frame is not None or named is None:
        return guess
    frame, condition = named
    unknown = tuple(u for u in guess.unknown if not u.startswith(("source line:", "source text:")))
    return replace(guess, frame=frame, source_line=condition, unknown=unknown)


def _fault_class(site: FaultSite) -> tuple[ProblemClass, str]:
    if site.faults and all(f.source is FaultSource.TRAP for f in site.faults):
        return ProblemClass.TRAP, "a warp stopped at a trap (a breakpoint or __trap())"
    code = site.exception
    if code is None and any(f.lanes_lost for f in site.faults):
        return ProblemClass.OTHER_EXCEPTION, LOST_EXCEPTION
    if code is None:
        return ProblemClass.OTHER_EXCEPTION, "an exception the dump does not name"
    named = f"{site_title(site)}, exception {code}"
    kind = find_exception(code)
    problem = kind.problem if kind is not None else ProblemClass.OTHER_EXCEPTION
    return problem, f"{PROBLEM_WORDS[problem]} ({named})"


def _fault_signal(site: FaultSite) -> Statement:
    """The failed assert, a failed address check, else the driver's own words, else the
    exception records."""
    deliberate = assert_signal(site) or trap_signal(site)
    if deliberate is not None:
        return deliberate
    checks = site.forensics.checks if site.forensics else ()
    failed = next((c for c in checks if c.verdict is False), None)
    if failed is not None:
        return Statement(failed.message, parts.FORENSICS)
    detail = next((f.detail for f in site.faults if f.detail), None)
    if detail is not None:
        return Statement(f"the driver says: {detail}", f"{NATIVE}: the SM row's error text")
    where = collapse_templates(site.location) if site.location else (
        "an unknown PC" if site.error_pc is None else f"0x{site.error_pc:x}"
    )  # fmt: skip
    counts = site.counts
    title = site_title(site)
    if counts.lanes:
        lanes = f"{counts.lanes} lane{'s' if counts.lanes != 1 else ''}"
        warps = f"{counts.warps} warp{'s' if counts.warps != 1 else ''}"
        return Statement(f"{lanes} in {warps} recorded {title} at {where}", f"{NATIVE}: lane rows")
    first = site.faults[0] if site.faults else None
    row = first.source.value if first else "fault"
    sm = f", SM {first.sm_id}" if first and first.sm_id is not None else ""
    device = first.device_index if first else 0
    return Statement(
        f"the {row} row of device {device}{sm} records {title} at {where}",
        f"{NATIVE}: {row} row",
    )


def _collective_summary(analysis: Analysis, live: Sequence[KernelState]) -> OnCallSummary:
    names = sorted({base_name(k.kernel or "") for k in live})
    warps = sum(k.warps for k in live)
    kernel = live[0].kernel or ""
    guess = BestGuess(
        Statement(f"{heading_name(kernel)} (a collective: it waits for its peers)", NATIVE),
        None, None, None, None,
        ("the cause: this GPU waits in a collective; the GPU that failed is in another "
         "rank's dump",),
    )  # fmt: skip
    return OnCallSummary(
        ProblemClass.COLLECTIVE_WAIT,
        "waiting in a collective: no exception, every live warp is in a communication kernel",
        Statement(
            f"all {warps} live warp{'s' if warps != 1 else ''} sit in {', '.join(names)}, and "
            "no lane records an exception",
            f"{NATIVE}: warp PCs, kernel names",
        ),
        guess,
        parts.common_ruled_out(analysis, None),
        Statement(
            "find the rank that faulted first: `postmortem scan DIR --incident` (or "
            "`postmortem analyze CORE...`) over the dumps of every rank of the job",
            "collective kernel names",
        ),
    )


def _hang_summary(analysis: Analysis) -> OnCallSummary:
    hang = analysis.hang
    assert hang is not None
    pattern = next((f for f in hang.findings if f.code in _BY_PATTERN), None)
    groups = hang.groups
    if pattern is None:
        group = groups[0] if groups else None
        return OnCallSummary(
            ProblemClass.HANG,
            "no exception and no deadlock pattern: a kernel still running when the dump was "
            "taken, or a hang these rules miss",
            parts.group_signal(group) if group else parts.no_exception(analysis),
            parts.group_guess(analysis, group) if group else None,
            parts.common_ruled_out(analysis, None),
            Statement(
                "take a second dump a few seconds later (`postmortem trigger --pid PID`) and run "
                "`postmortem analyze FIRST SECOND`: the warps that did not move between them "
                "are the stuck ones",
                "hang analysis: no deadlock pattern",
            ),
        )
    problem_class, problem = _BY_PATTERN[pattern.code]
    return OnCallSummary(
        problem_class,
        problem,
        _pattern_signal(pattern),
        parts.group_guess(analysis, _group_of(pattern.code, groups)),
        parts.common_ruled_out(analysis, None),
        _pattern_step(pattern),
    )


def _pattern_signal(pattern: Finding) -> Statement:
    evidence = f" ({pattern.evidence[0]})" if pattern.evidence else ""
    return Statement(f"{pattern.message}{evidence}", f"hang analysis: {pattern.code.value}")


def _group_of(code: FindingCode, groups: Sequence[StuckGroup]) -> StuckGroup | None:
    """The stuck group a deadlock pattern is about: the barrier, or the loop."""
    wanted = {
        FindingCode.DIVERGENT_BARRIER: "cta",
        FindingCode.NAMED_BARRIER_STARVED: "named",
        FindingCode.CIRCULAR_WAIT: "mbarrier",
        FindingCode.PIPELINE_STALLED: "mbarrier",
        FindingCode.CONVERGENCE_SPLIT: "convergence",
    }
    if code in wanted:
        found = next((g for g in groups if g.barrier == wanted[code]), None)
    else:
        found = next((g for g in groups if g.in_polling_loop), None)
    return found or (groups[0] if groups else None)


def _pattern_step(pattern: Finding) -> Statement:
    if pattern.remedy:
        return Statement(pattern.remedy, pattern.code.value)
    why = f" ({pattern.caveat})" if pattern.caveat else ""
    return Statement(
        "take a second dump a few seconds later (`postmortem trigger --pid PID`) and run "
        f"`postmortem analyze FIRST SECOND`: the warps that did not move are the stuck ones{why}",
        pattern.code.value,
    )
