"""postmortem: CUDA GPU coredumps turned into answers, on any machine.

Two levels of API. The reader: what the dump holds, no tool needed.

>>> from postmortem import open_coredump, find_faults
>>> with open_coredump("core.nvcudmp") as core:
...     for fault in find_faults(core):
...         print(fault.exception_name, hex(fault.error_pc or 0))

The analysis: what `postmortem analyze` reports, as typed, frozen data.

>>> from pathlib import Path
>>> from postmortem import AnalyzeOptions, Tool, analyze_dump
>>> analysis = analyze_dump(Path("core.nvcudmp"), AnalyzeOptions(cuda_gdb=Tool.OFF))
>>> print(analysis.verdict.headline)

`import postmortem` loads only the errors and the version: each other name is imported on
first use (PEP 562), so that a program, or the command line's `--help`, that does not read a
dump does not pay for numpy, the reader or the analysis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from postmortem._version import __version__
from postmortem.errors import (
    CompressedDumpError,
    CorruptSection,
    NotACudaCoredump,
    NotAnElfFile,
    PostmortemError,
    ToolFailed,
    ToolNotFound,
    TruncatedDump,
    UnreadableFile,
)

if TYPE_CHECKING:
    from postmortem.analysis.analyze import Analysis, AnalyzeOptions, analyze_dump
    from postmortem.analysis.fault.options import LocalizeOptions
    from postmortem.analysis.fault.source import PathMap, SourcePaths
    from postmortem.codemap import CodeMap, find_faults
    from postmortem.coredump import Coredump, open_coredump
    from postmortem.tools import Tool

_LAZY: dict[str, str] = {
    # name: the module that defines it; keep in step with the TYPE_CHECKING imports above.
    "CodeMap": "postmortem.codemap",
    "find_faults": "postmortem.codemap",
    "Coredump": "postmortem.coredump",
    "open_coredump": "postmortem.coredump",
    "Analysis": "postmortem.analysis.analyze",
    "AnalyzeOptions": "postmortem.analysis.analyze",
    "analyze_dump": "postmortem.analysis.analyze",
    "LocalizeOptions": "postmortem.analysis.fault.options",
    "PathMap": "postmortem.analysis.fault.source",
    "SourcePaths": "postmortem.analysis.fault.source",
    "Tool": "postmortem.tools",
}

__all__ = [
    "Analysis",
    "AnalyzeOptions",
    "CodeMap",
    "CompressedDumpError",
    "Coredump",
    "CorruptSection",
    "LocalizeOptions",
    "NotACudaCoredump",
    "NotAnElfFile",
    "PathMap",
    "PostmortemError",
    "SourcePaths",
    "Tool",
    "ToolFailed",
    "ToolNotFound",
    "TruncatedDump",
    "UnreadableFile",
    "__version__",
    "analyze_dump",
    "find_faults",
    "open_coredump",
]


def __getattr__(name: str) -> Any:
    # Called only for names not yet in the module's namespace: import the defining module
    # once, and keep the value here so that later lookups are plain attribute reads.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
