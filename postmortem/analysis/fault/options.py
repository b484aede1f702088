"""How a fault is localized: the options every command builds once, in a module of their own
so that building them loads no analysis (`analyze` starts nvdisasm before it loads the rest)."""

from __future__ import annotations

from dataclasses import dataclass, field

from postmortem.analysis.fault.source import SourcePaths
from postmortem.cubin.nvdisasm import DisassemblyStore
from postmortem.tools import Tool


@dataclass(frozen=True, slots=True)
class LocalizeOptions:
    """How far to go: window size, where the sources are, which tools to use."""

    window: int = 8
    """Instructions shown before and after the faulting one."""
    sources: SourcePaths = SourcePaths()
    nvdisasm: Tool = Tool()
    """Which nvdisasm to run; off: native facts only, no SASS (a script may pass False, or a
    path: `Tool.of`)."""
    timeout: float = 120.0
    """Seconds each external tool may run."""
    store: DisassemblyStore | None = field(default=None, compare=False, repr=False)
    """Where disassemblies are remembered across dumps (a scan worker's); None: nowhere."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "nvdisasm", Tool.of(self.nvdisasm))
