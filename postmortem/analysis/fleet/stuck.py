"""The hang dumps of an incident compared, and what the comparison makes of its verdict.

Two or more dumps of one process without an exception are compared
(`postmortem.analysis.hang.motion`): the warps that did not move between them are the stuck ones,
and the verdict and the on-call next step say so instead of asking for a second dump.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from postmortem.analysis.analyze import Analysis
from postmortem.analysis.fleet.incident import IncidentDump
from postmortem.analysis.hang.motion import (
    DumpComparison,
    IncidentMotion,
    Motion,
    PcMotion,
    compare_dumps,
)
from postmortem.analysis.hang.pairing import (
    DumpIdentity,
    NotCompared,
    SameProcess,
    dump_identity,
    pair_by_process,
    seconds_text,
)
from postmortem.analysis.oncall.evidence import Statement
from postmortem.analysis.oncall.summary import OnCallSummary, ProblemClass
from postmortem.coredump.reader import open_coredump
from postmortem.errors import PostmortemError
from postmortem.model import TimeSource


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
    order: tuple[DumpIdentity, DumpIdentity, float, TimeSource],
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
