"""postmortem: CUDA GPU coredumps turned into answers, on any machine.

>>> from postmortem import open_coredump, find_faults
>>> with open_coredump("core.nvcudmp") as core:
...     for fault in find_faults(core):
...         print(fault.exception_name, hex(fault.error_pc or 0))
"""

from postmortem.codemap import CodeMap, find_faults
from postmortem.coredump import Coredump, open_coredump
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

__version__ = "0.1.0"

__all__ = [
    "CodeMap",
    "CompressedDumpError",
    "Coredump",
    "CorruptSection",
    "NotACudaCoredump",
    "NotAnElfFile",
    "PostmortemError",
    "ToolFailed",
    "ToolNotFound",
    "TruncatedDump",
    "UnreadableFile",
    "__version__",
    "find_faults",
    "open_coredump",
]
