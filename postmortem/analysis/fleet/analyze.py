"""The dumps of one job analyzed, one by one, and made one incident (`incident.py`); the hang
dumps of one process compared (`stuck.py`), whose stuck warps then lead a hang's verdict.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from postmortem.analysis.analyze import Analysis, AnalyzeOptions, analyze_dump
from postmortem.analysis.fleet.incident import (
    Incident,
    IncidentDump,
    Role,
    build_incident,
    failed_dump,
    incident_dump,
)
from postmortem.analysis.fleet.signature import compute_signature, load_rules, signature_input
from postmortem.analysis.fleet.stuck import compare_hangs, motion_oncall, motion_verdict
from postmortem.analysis.hang.motion import (
    Motion,
)
from postmortem.analysis.oncall.summary import oncall_summary
from postmortem.coredump.remote import stored_mtime
from postmortem.cubin.nvdisasm import RememberedDisassemblies
from postmortem.errors import NoGpuState, PostmortemError
from postmortem.urls import DumpUrl


def analyze_incident(
    paths: Sequence[Path],
    options: AnalyzeOptions | None = None,
    failed: Sequence[IncidentDump] = (),
) -> Incident:
    """Analyze each dump of `paths` and make one incident of them (see the module's doc).

    `failed` are dumps of the same job already known to be unreadable (a scan's error rows),
    taken as they are rather than read again. `analyze A B` and `scan --incident` both come
    here, so the same dumps get the same verdict.
    """
    options = options or AnalyzeOptions()
    if options.localize.store is None:
        # The dumps of one job mostly carry the same cubins: each function is disassembled
        # once for all of them, not once per dump (nvdisasm costs over half a second a run).
        localize = replace(options.localize, store=RememberedDisassemblies())
        options = replace(options, localize=localize)
    rules = load_rules()
    dumps: list[IncidentDump] = list(failed)
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
        signature = compute_signature(
            signature_input(analysis), rules, options.localize.sources.maps
        )
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
