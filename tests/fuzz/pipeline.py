"""What runs on each mutant, in-process: the one list to grow when the pipeline grows.

Each step opens the dump itself, so one step's `PostmortemError` does not hide a crash in
another. Nothing here runs an external tool (no nvdisasm, no cuda-gdb).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.codemap import find_faults
from postmortem.coredump import open_coredump
from postmortem.report.context import build_report
from postmortem.report.info import build_info
from postmortem.report.render import FORMATS, render
from postmortem.summary import summarize
from tests.walk import walk

ANALYZE_OPTIONS = AnalyzeOptions(localize=LocalizeOptions(nvdisasm=False), cuda_gdb=False)


def _info(path: Path) -> None:
    """`postmortem info` (text and JSON) and `find_faults`."""
    with open_coredump(path) as core:
        summary = summarize(core)
        find_faults(core)
    info = build_info(summary)
    render("info", info, "text")
    render("info", info, "json")


def _walk(path: Path) -> None:
    """Every lane's registers, predicates, backtrace, local memory; images; memory."""
    with open_coredump(path) as core:
        walk(core)


def _analyze(path: Path) -> None:
    """`postmortem analyze --no-disasm --no-gdb` in every format."""
    report = build_report(analyze_dump(path, ANALYZE_OPTIONS))
    for fmt in FORMATS:
        render("analyze", report, fmt)
        if fmt != "json":  # the JSON holds everything either way
            render("analyze", report, fmt, verbose=True)


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    run: Callable[[Path], None]


STEPS: tuple[Step, ...] = (Step("info", _info), Step("walk", _walk), Step("analyze", _analyze))
