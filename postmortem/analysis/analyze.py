"""One dump, analyzed: the fault sites, and cuda-gdb's second opinion when it is there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.fault import FaultSite, LocalizeOptions, localize
from postmortem.coredump import open_coredump
from postmortem.errors import ToolFailed, ToolNotFound
from postmortem.gdb import run_cuda_gdb
from postmortem.gdb.crosscheck import CrossCheck, crosscheck


@dataclass(frozen=True, slots=True)
class AnalyzeOptions:
    """Localization options plus whether and how to ask cuda-gdb."""

    localize: LocalizeOptions = LocalizeOptions()
    cuda_gdb: bool = True
    """False: do not run cuda-gdb (`--no-gdb`)."""
    cuda_gdb_path: str | Path | None = None


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything `analyze` reports about one dump."""

    path: Path
    sites: tuple[FaultSite, ...]
    crosscheck: CrossCheck | None
    """None when cuda-gdb was not run; `gdb_note` says why."""
    gdb_note: str | None


def analyze_dump(path: Path, options: AnalyzeOptions | None = None) -> Analysis:
    """Localize every fault of the dump at `path` and cross-check it with cuda-gdb."""
    options = options or AnalyzeOptions()
    with open_coredump(path) as core:
        sites = localize(core, options.localize)
        if not options.cuda_gdb:
            return Analysis(path, sites, None, "cuda-gdb not run (--no-gdb)")
        try:
            session = run_cuda_gdb(
                path, cuda_gdb=options.cuda_gdb_path, timeout=options.localize.timeout
            )
        except ToolNotFound as error:
            return Analysis(
                path, sites, None, f"cuda-gdb not found, no second opinion: {error.hint}"
            )
        except ToolFailed as error:
            return Analysis(path, sites, None, f"cuda-gdb failed: {error}")
        return Analysis(path, sites, crosscheck(core, session), None)
