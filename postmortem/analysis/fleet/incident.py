"""One incident from many dumps: the dumps of one job (several ranks, one window of time),
which faulted first, which are collateral, and one verdict for them all.

Dumps are put in the order they were written by the timestamp of their metadata section
(r565 and later); a dump without one falls back to its file's modification time, which is
when the writing ended. A name is never used: a `%t` in `CUDA_COREDUMP_FILE` is when the
context was created, not when the kernel faulted. The timestamp counts whole seconds, so
ranks that fault in the same second are told apart by their files' modification times,
and the incident says so.

A dump with no exception is collateral when every warp in it waits in a collective kernel
(`postmortem.analysis.hang.collective`), when it holds no live warp, or when it holds no GPU
state at all (no kernel was running, or its contexts were torn down). One whose warps are
elsewhere is "stuck": a hang of its own, the suspect when no dump faulted. A file that
cannot be read is a row with its one-line error; it never stops the incident.

Two or more dumps of one process without an exception are compared
(`postmortem.analysis.hang.motion`): the warps that did not move between them are the stuck ones,
and the verdict and the on-call next step say so instead of asking for a second dump.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from postmortem.analysis.analyze import Analysis, AnalyzeOptions, analyze_dump
from postmortem.analysis.fleet.signature import compute_signature, load_rules, signature_input
from postmortem.analysis.hang.collective import is_collective
from postmortem.analysis.hang.motion import (
    DumpComparison,
    DumpIdentity,
    IncidentMotion,
    Motion,
    NotCompared,
    PcMotion,
    SameProcess,
    compare_dumps,
    dump_identity,
    pair_by_process,
    seconds_text,
)
from postmortem.analysis.oncall.evidence import Statement
from postmortem.analysis.oncall.summary import OnCallSummary, ProblemClass, oncall_summary
from postmortem.coredump.reader import open_coredump
from postmortem.coredump.remote import stored_mtime
from postmortem.demangle import base_name
from postmortem.errors import NoGpuState, PostmortemError
from postmortem.urls import DumpUrl

METADATA = "metadata"
"""`IncidentDump.time_source` of a dump ordered by its metadata timestamp."""
MTIME = "mtime"
"""`IncidentDump.time_source` of one ordered by its file's modification time."""


class Role(Enum):
    """What part a dump played in the incident."""

    FIRST_FAULT = "first-fault"
    """The earliest dump that records an exception: its verdict is the incident's."""
    FAULT = "fault"
    """A later dump that records an exception."""
    COLLATERAL = "collateral"
    """No exception: its warps wait in a collective, or it holds none (contexts torn down)."""
    STUCK = "stuck"
    """No exception, and warps outside any collective kernel: a hang of its own."""
    UNREADABLE = "unreadable"
    """Not a readable CUDA coredump (its error says why)."""


@dataclass(frozen=True, slots=True)
class IncidentDump:
    """What the incident needs of one dump, from its analysis or from a scan's row."""

    path: str
    time: float | None
    """When it was written, Unix seconds (see `time_source`); None when unknown."""
    time_source: str | None
    """`METADATA` or `MTIME`; None when the file could not even be looked at."""
    mtime: float | None
    """The file's modification time: the tie-break between equal timestamps."""
    error: str | None = None
    """Why the dump could not be read (without the path); None when it was."""
    no_gpu_state: bool = False
    """Read, but it holds no warp and no exception (`NoGpuState`)."""
    exception: int | None = None
    """The exception of its first fault site; None without one."""
    faulted: bool = False
    headline: str | None = None
    """Its own verdict."""
    signature: str | None = None
    """Its crash signature's id (`postmortem.analysis.fleet.signature`)."""
    kernels: tuple[str, ...] = ()
    """The faulting kernel; for a dump without a fault, the kernels its live warps are in."""

    @property
    def unreadable(self) -> bool:
        """Its analysis stopped on an error other than holding no GPU state."""
        return self.error is not None and not self.no_gpu_state


@dataclass(frozen=True, slots=True)
class IncidentRow:
    """One dump of the incident and its role."""

    dump: IncidentDump
    role: Role
    why: str
    """The role's reason in a phrase ("parked in ncclDevKernel_AllReduce_Sum_f32_RING_LL")."""


@dataclass(frozen=True, slots=True)
class IncidentVerdict:
    """The incident in one line, and how much of it agrees."""

    kind: str
    """"fault" (a dump faulted), "hang" (none did; some are stuck, or two dumps of one process
    were compared: the headline says whether their warps moved), "collateral" (every readable
    dump is collateral) or "unreadable" (no dump could be read)."""
    headline: str
    lead: str | None
    """The dump whose verdict is the incident's (the first fault); None without one."""
    agree: int = 0
    """Dumps of the lead's role whose crash signature is the lead's (the lead included)."""
    of: int = 0
    """Dumps of the lead's role (faulting dumps for a fault, stuck ones for a hang)."""


@dataclass(frozen=True, slots=True)
class Incident:
    """The dumps of one incident in the order they were written, and its verdict."""

    rows: tuple[IncidentRow, ...]
    """Readable dumps by time (undated ones after), then the unreadable ones."""
    verdict: IncidentVerdict
    notes: tuple[str, ...] = ()
    """What limits the order (undated dumps, equal timestamps)."""
    oncall: OnCallSummary | None = None
    """The lead dump's on-call summary, when its analysis was at hand."""
    motion: IncidentMotion | None = None
    """Dumps of one process without an exception, compared; None with fewer than two such
    dumps analyzed."""


def analyze_incident(paths: Sequence[Path], options: AnalyzeOptions | None = None) -> Incident:
    """Analyze each dump of `paths` and make one incident of them (see the module's doc)."""
    options = options or AnalyzeOptions()
    rules = load_rules()
    dumps: list[IncidentDump] = []
    analyses: dict[str, Analysis] = {}
    for path in paths:
        mtime = _mtime(path)
        try:
            analysis = analyze_dump(path, options)
        except PostmortemError as error:
            no_gpu_state = isinstance(error, NoGpuState)
            dumps.append(failed_dump(str(path), _reason(path, error), mtime, no_gpu_state))
            continue
        except Exception as error:  # a bug of ours in one dump must not stop the incident
            reason = f"internal error: {type(error).__name__}: {_reason(path, error)}"
            dumps.append(failed_dump(str(path), reason, mtime))
            continue
        signature = compute_signature(signature_input(analysis), rules, options.localize.path_maps)
        dumps.append(incident_dump(analysis, mtime, signature.id))
        analyses[str(path)] = analysis
    incident = build_incident(dumps)
    lead = analyses.get(incident.verdict.lead or "")
    if lead is not None:
        incident = replace(incident, oncall=oncall_summary(lead))
    motion = compare_hangs([(d, analyses[d.path]) for d in dumps if d.path in analyses])
    if motion is None:
        return incident
    # A hang is led by the later dump of the comparison with the most warps that did not
    # move, among those of stuck dumps: its verdict, hang groups and on-call are the incident's.
    stuck = {r.dump.path: r.dump for r in incident.rows if r.role is Role.STUCK}
    compared = [c for c in motion.compared if c.later in stuck]
    if incident.verdict.kind != "hang" or not compared:
        return replace(incident, motion=motion)
    best = max(compared, key=lambda c: c.count(Motion.STUCK))
    lead_dump = stuck[best.later]
    agree = sum(
        1 for d in stuck.values()
        if d is lead_dump or (d.signature is not None and d.signature == lead_dump.signature)
    )  # fmt: skip
    verdict = replace(incident.verdict, headline=motion_verdict(best), lead=best.later, agree=agree)
    oncall = motion_oncall(oncall_summary(analyses[best.later]), best)
    return replace(incident, verdict=verdict, oncall=oncall, motion=motion)


def incident_dump(analysis: Analysis, mtime: float | None, signature: str | None) -> IncidentDump:
    """What the incident needs of an analyzed dump."""
    meta = analysis.summary.metadata
    stamp = meta.timestamp if meta is not None else None
    time, source = (float(stamp), METADATA) if stamp else (mtime, MTIME)
    site = analysis.sites[0] if analysis.sites else None
    if site is not None:
        kernels: tuple[str, ...] = (site.function.name,) if site.function else ()
    else:
        kernels = tuple(dict.fromkeys(k.kernel or "" for k in analysis.state if k.warps))
    return IncidentDump(
        str(analysis.path), time, source, mtime, exception=site.exception if site else None,
        faulted=site is not None, headline=analysis.verdict.headline, signature=signature,
        kernels=kernels,
    )  # fmt: skip


def failed_dump(
    path: str, error: str, mtime: float | None, no_gpu_state: bool = False
) -> IncidentDump:
    """A dump whose analysis stopped on `error`: unreadable, or holding no GPU state."""
    source = None if mtime is None else MTIME
    return IncidentDump(path, mtime, source, mtime, error, no_gpu_state)


def build_incident(dumps: Sequence[IncidentDump]) -> Incident:
    """The roles, order and verdict of `dumps` (the dumps of one job)."""
    # sorted() is stable: dumps written at the same moment keep the order given.
    ordered = sorted(
        (d for d in dumps if not d.unreadable),
        key=lambda d: (d.time is None, d.time or 0.0, d.mtime is None, d.mtime or 0.0),
    )
    faults = [d for d in ordered if d.faulted]
    stuck = [d for d in ordered if not d.faulted and _role_without_fault(d)[0] is Role.STUCK]
    lead = faults[0] if faults else (stuck[0] if stuck else None)
    rows = [_row(d, lead) for d in ordered]
    rows += [IncidentRow(d, Role.UNREADABLE, d.error or "") for d in dumps if d.unreadable]
    return Incident(tuple(rows), _verdict(lead, faults, stuck, rows), _notes(ordered, faults))


def _row(dump: IncidentDump, lead: IncidentDump | None) -> IncidentRow:
    if dump.faulted:
        if dump is lead:
            return IncidentRow(
                dump, Role.FIRST_FAULT, "the earliest dump that records an exception"
            )
        same = lead is not None and dump.signature is not None and dump.signature == lead.signature
        why = "the same crash signature as the first fault" if same else "another crash signature"
        return IncidentRow(dump, Role.FAULT, why)
    role, why = _role_without_fault(dump)
    return IncidentRow(dump, role, why)


def _role_without_fault(dump: IncidentDump) -> tuple[Role, str]:
    if dump.no_gpu_state:
        return Role.COLLATERAL, (
            "no warp and no exception: no kernel was running, or its contexts were torn down"
        )
    if not dump.kernels:
        return Role.COLLATERAL, "no exception and no live warp"
    names = ", ".join(base_name(k) if k else "an unknown kernel" for k in dump.kernels)
    if all(is_collective(k) for k in dump.kernels):
        return Role.COLLATERAL, f"no exception; its warps wait in {names}"
    return Role.STUCK, f"no exception; its warps are in {names}"


def _verdict(
    lead: IncidentDump | None,
    faults: Sequence[IncidentDump],
    stuck: Sequence[IncidentDump],
    rows: Sequence[IncidentRow],
) -> IncidentVerdict:
    if lead is not None:
        peers = faults if lead.faulted else stuck
        agree = 1 + sum(
            1 for d in peers
            if d is not lead and d.signature is not None and d.signature == lead.signature
        )  # fmt: skip
        kind = "fault" if lead.faulted else "hang"
        return IncidentVerdict(kind, lead.headline or "", lead.path, agree, len(peers))
    if any(r.role is Role.COLLATERAL for r in rows):
        return IncidentVerdict(
            "collateral",
            "no dump here records an exception: every readable one waits in a collective or "
            "holds no GPU state, so the GPU that failed left no dump among these",
            None,
        )
    return IncidentVerdict("unreadable", "no dump could be read", None)


def _notes(ordered: Sequence[IncidentDump], faults: Sequence[IncidentDump]) -> tuple[str, ...]:
    notes = []
    # A dump with no GPU state was never read as far as its timestamp: the driver is not why.
    undated = sum(1 for d in ordered if d.time_source != METADATA and not d.no_gpu_state)
    if undated:
        notes.append(
            f"{undated} dump{'s carry' if undated != 1 else ' carries'} no metadata timestamp "
            "(drivers before r565): ordered by file modification time, when the writing ended"
        )
    first = faults[0] if faults else None
    if first is not None and first.time_source == METADATA:
        tied = [d for d in faults if d.time_source == METADATA and d.time == first.time]
        if len(tied) > 1:
            notes.append(
                f"{len(tied)} faulting dumps share the first fault's timestamp (whole seconds): "
                "among them the first is the one whose file was written first"
            )
    return tuple(notes)


def compare_hangs(dumps: Sequence[tuple[IncidentDump, Analysis]]) -> IncidentMotion | None:
    """The dumps without an exception compared, process by process; None with fewer than two."""
    # One file given twice is one dump: nothing to compare it with.
    hangs = list({d.path: (d, a) for d, a in dumps if not d.faulted}.values())
    if len(hangs) < 2:
        return None
    by_path = {d.path: a for d, a in hangs}
    identities = [
        dump_identity(
            d.path, a.summary.metadata.timestamp if a.summary.metadata else None, d.mtime,
            a.summary.launches,
        )
        for d, a in hangs
    ]  # fmt: skip
    pairs, others = pair_by_process(identities)
    compared: list[DumpComparison] = []
    for earlier, later, seconds, source, process in pairs:
        order = (earlier, later, seconds, source)
        done = _compare(by_path[earlier.path], by_path[later.path], order, process)
        if isinstance(done, str):
            others.append(NotCompared((earlier.path, later.path), f"could not be compared: {done}"))
        else:
            compared.append(done)
    return IncidentMotion(tuple(compared), tuple(others))


def _compare(
    earlier: Analysis,
    later: Analysis,
    order: tuple[DumpIdentity, DumpIdentity, float, str],
    process: SameProcess,
) -> DumpComparison | str:
    """The comparison of two analyzed dumps, reopened; why not, when one cannot be read."""
    kernels = {(k.device_index, k.grid_id): k.kernel for k in (*earlier.state, *later.state)}
    groups = later.hang.groups if later.hang is not None else ()
    try:
        with open_coredump(earlier.path) as a, open_coredump(later.path) as b:
            return compare_dumps(a, b, order, process, kernels, groups)
    except PostmortemError as error:
        return " ".join(str(error).split())
    except Exception as error:  # a bug of ours must not stop the incident
        return f"internal error: {type(error).__name__}: {' '.join(str(error).split())}"


def motion_verdict(comparison: DumpComparison) -> str:
    """The headline of a hang whose dumps were compared: the warps that did not move, or a
    kernel still running when every warp moved."""
    gap = _gap(comparison)
    stuck, moved = comparison.count(Motion.STUCK), comparison.count(Motion.MOVED)
    if stuck:
        grids = sorted(
            (g for g in comparison.grids if g.counts[Motion.STUCK]),
            key=lambda g: -g.counts[Motion.STUCK],
        )
        main = grids[0]
        where = f"grid {main.grid_id}" if main.grid_id is not None else "a grid the rows omit"
        of = main.counts[Motion.STUCK]
        more = f" and {stuck - of} of {len(grids) - 1} other grid(s)" if len(grids) > 1 else ""
        places = [g for g in comparison.groups if g.counts[Motion.STUCK]]
        at = "; ".join(f"{g.counts[Motion.STUCK]} at {_where(g)}" for g in places[:2])
        at += "; …" if len(places) > 2 else ""
        all_or = "all " if not moved and stuck > 1 else ""
        return (
            f"hang: {all_or}{of} warp{'s' if of != 1 else ''} of {where}{more} did not move "
            f"{gap} ({at}); {moved or 'none'} moved"
        )
    gone, new = comparison.count(Motion.GONE), comparison.count(Motion.NEW)
    if moved:
        return (
            f"a kernel still running: every warp moved {gap} ({moved} warp"
            f"{'s' if moved != 1 else ''}{f', {gone} gone' if gone else ''}"
            f"{f', {new} new' if new else ''})"
        )
    return f"a kernel still running: no warp is in both dumps ({gone} gone, {new} new {gap})"


def _gap(comparison: DumpComparison) -> str:
    if comparison.seconds <= 0:
        return "between two dumps that show no time between them"
    return f"between dumps {seconds_text(comparison.seconds)} apart"


def _where(group: PcMotion) -> str:
    """What the hang group knows: "BAR.SYNC 0x0 at +0x140 (divergent_barrier.cu:7)"."""
    found = group.group
    text = f"+0x{group.offset:x}"
    if found is not None and found.instruction is not None:
        text = f"{found.instruction.text} at {text}"
    if found is not None and found.chain:
        frame = found.chain[0]
        text += f" ({frame.file.rsplit('/', 1)[-1]}:{frame.line})"
    return text


def motion_oncall(oncall: OnCallSummary, comparison: DumpComparison) -> OnCallSummary:
    """An on-call summary with the comparison's next step (instead of asking for a second
    dump) and, for a hang, a running kernel ruled out. Where one dump found no deadlock
    pattern (it could not tell a hang from a running kernel), the comparison is its problem
    and strongest signal too."""
    source = "dump comparison: warp PCs, masks and registers of two dumps"
    stuck = comparison.count(Motion.STUCK)
    gap = _gap(comparison)
    compared = stuck + comparison.count(Motion.MOVED)
    unexplained = oncall.problem_class is ProblemClass.HANG
    if not stuck:
        step = Statement(
            f"every warp moved {gap}: the kernel runs; find why it runs this long (an input "
            "far larger than usual, a loop whose exit condition is never met: compare the "
            "PCs and registers of a warp in both dumps)",
            source,
        )
        if not unexplained:
            return replace(oncall, next_step=step)
        signal = Statement(f"all {compared} warp(s) in both dumps moved {gap}", source)
        problem = "no exception, and every warp moved between two dumps: a kernel still running"
        return replace(oncall, problem=problem, strongest_signal=signal, next_step=step)
    # A barrier the stuck warps wait at says more than a loop they spin in.
    places = [g for g in comparison.groups if g.counts[Motion.STUCK]]
    group = next((g for g in places if g.group is not None and g.group.barrier), places[0])
    ruled = Statement(f"not a running kernel: {stuck} warp(s) did not move {gap}", source)
    summary = replace(
        oncall, next_step=_stuck_step(group, stuck), ruled_out=(*oncall.ruled_out, ruled)
    )
    if not unexplained:
        return summary
    signal = Statement(
        f"{stuck} of {compared} warp(s) in both dumps did not move {gap} (PCs, masks and "
        "registers unchanged)",
        source,
    )
    problem = (
        "a hang: no exception, and warps that did not move between two dumps, at no deadlock "
        "pattern these rules know"
    )
    return replace(summary, problem=problem, strongest_signal=signal)


def _stuck_step(group: PcMotion, stuck: int) -> Statement:
    here = group.counts[Motion.STUCK]
    blocks = ", ".join("({},{},{})".format(*b) for b in group.blocks[:4])
    blocks += ", …" if len(group.blocks) > 4 else ""
    who = f"the {here} warp(s) that did not move at {_where(group)} (blocks {blocks})"
    found = group.group
    barrier = found.barrier if found is not None else None
    if barrier == "cta":
        what = (
            "find the path by which the other threads of those blocks skip that "
            "__syncthreads() (an early return or a data-dependent branch before it)"
        )
    elif barrier == "named":
        count = f" ({found.barrier_threads} threads)" if found and found.barrier_threads else ""
        what = f"find which warps should arrive at that named barrier{count} and why they do not"
    elif barrier == "convergence":
        what = "find the branch that splits the warp before that convergence point"
    elif found is not None and found.in_polling_loop:
        what = (
            "they spin on memory: find who should write what the loop reads (another block, "
            "the host, another GPU)"
        )
    else:
        what = "read the code at that line for what it waits on"
    more = f"; {stuck - here} more did not move elsewhere" if stuck > here else ""
    return Statement(f"{who}: {what}{more}", f"dump comparison: {stuck} warp(s) did not move")


def _mtime(path: Path) -> float | None:
    if isinstance(path, DumpUrl):
        return stored_mtime(str(path))
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _reason(path: Path, error: BaseException) -> str:
    # Our errors start with the path; the row names it already.
    text = " ".join(str(error).split()) or type(error).__name__
    return text.removeprefix(f"{path}: ")
