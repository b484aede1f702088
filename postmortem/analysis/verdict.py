"""The verdict: what happened, in the one line every report starts with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING

from postmortem.demangle import heading_name
from postmortem.exceptions import describe_exception
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import LOST_EXCEPTION, FaultSource

if TYPE_CHECKING:  # types only: the analysis's modules load after nvdisasm has started
    from postmortem.analysis.fault.fault import FaultSite
    from postmortem.analysis.hang.hang import HangAnalysis
    from postmortem.analysis.state import KernelState


class VerdictKind(Enum):
    """What kind of dump it is."""

    FAULT = "fault"
    """An exception (or a trap): the first fault site says where."""
    HANG = "hang"
    """No exception, analyzed as a hang."""
    NO_EXCEPTION = "no-exception"
    """No exception, and no hang analysis asked for."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The dump in one line, and how many sites or deadlock patterns stand behind it."""

    kind: VerdictKind
    headline: str
    sites: int = 0
    """Fault sites (for a fault)."""
    findings: int = 0
    """Deadlock patterns found (for a hang)."""


def site_title(site: FaultSite) -> str:
    """What happened at a site, in words: the exception's name, or a trap."""
    if site.exception is not None:
        return describe_exception(site.exception)
    if site.faults and all(f.source is FaultSource.TRAP for f in site.faults):
        return "stopped at a trap"
    if any(f.lanes_lost for f in site.faults):
        return LOST_EXCEPTION
    return "an unnamed exception"


def without_claims(hang: HangAnalysis, lost: str | None) -> HangAnalysis:
    """`hang` with its findings withheld when rows of warps or lanes were lost (`lost`, from
    `salvage.lost_warps`): each pattern is read off the warps left, and a lost one may be
    the warp the others wait for, or the one that would end a spin. A note says why."""
    if lost is None or not hang.findings:
        return hang
    note = Finding(
        FindingCode.HANG_LIMITED, Severity.INFO,
        f"no deadlock pattern is claimed: {len(hang.findings)} were read off the warps left, "
        f"and a lost warp may be the one they wait for ({lost})",
    )  # fmt: skip
    return replace(hang, findings=(), notes=(*hang.notes, note))


def decide(
    sites: Sequence[FaultSite],
    hang: HangAnalysis | None,
    state: Sequence[KernelState],
    lost: str | None = None,
) -> Verdict:
    """The verdict of an analysis: its first fault site, else its hang, else no exception.
    `lost` says what the dump lost that could have held an exception (`salvage.lost_rows`):
    then the absence of one is said to be the absence in what could be read."""
    if not sites and lost is not None:
        return Verdict(
            VerdictKind.NO_EXCEPTION,
            f"damaged dump: no exception found in what could be read ({lost})",
            findings=len(hang.findings) if hang else 0,
        )
    if not sites and hang is not None:
        warps = sum(k.warps for k in state)
        # An INFO finding explains the picture and claims no hang.
        claims = [f for f in hang.findings if f.severity is not Severity.INFO]
        explained = [f for f in hang.findings if f.severity is Severity.INFO]
        headline = (
            f"hang: {claims[0].message}" if claims
            else f"no deadlock claimed: {explained[0].message}" if explained
            else f"no exception recorded: {warps} live warp{'' if warps == 1 else 's'}, and no "
            "deadlock pattern found "
            "(a user-triggered dump of a kernel still running, or a hang these rules miss)"
        )  # fmt: skip
        return Verdict(VerdictKind.HANG, headline, findings=len(hang.findings))
    if not sites:
        return Verdict(
            VerdictKind.NO_EXCEPTION,
            "no exception recorded: every warp was live (a hang or a user-triggered dump)",
        )
    first = sites[0]
    kernel = heading_name(first.function.name) if first.function else "an unknown function"
    where = f" at {first.location}" if first.location else ""
    asserted = first.assertion
    said = f": {asserted.text}" if asserted is not None and asserted.message.known else ""
    return Verdict(VerdictKind.FAULT, f"{site_title(first)} in {kernel}{where}{said}", len(sites))
