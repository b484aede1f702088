"""How each cubin that matters was built: the `.note.nv.tkinfo` / `.note.nv.cuinfo` notes,
and what they say about line info ("compiled without -lineinfo" versus "removed later")."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from postmortem.codemap import CodeMap
from postmortem.cubin.nvinfo import ToolkitInfo
from postmortem.model import Module


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """One module's build, as its cubin records it."""

    module_handle: int | None
    """None for a root-level image."""
    kernels: tuple[str, ...]
    """Mangled names of the module's kernels."""
    abi_version: int
    sm_arch: int
    toolkit: ToolkitInfo | None
    """None when the cubin carries neither note (ptxas before CUDA 12 writes none)."""
    has_line_info: bool
    """True when the cubin has a `.debug_line` section."""

    @property
    def line_info(self) -> str:
        """What the notes and sections together say about line info, in a phrase."""
        asked = self.toolkit.has_lineinfo_option if self.toolkit else None
        if self.has_line_info:
            return "line info present"
        if asked is None:
            return "no line info; the cubin does not record how it was compiled"
        if asked:
            return "line info removed after compilation (compiled with -lineinfo)"
        return "compiled without -lineinfo"


def build_provenance(code_map: CodeMap, modules: Iterable[Module]) -> tuple[BuildInfo, ...]:
    """The build of each module named, in the order given, each once."""
    found = []
    for module in dict.fromkeys(modules):
        summary = code_map.summary(module)
        if summary is None:
            continue
        kernels = tuple(f.name for f in summary.functions if f.is_kernel)
        found.append(
            BuildInfo(
                module.module_handle, kernels, summary.abi_version, summary.sm_arch,
                code_map.toolkit(module), summary.has_line_info,
            )
        )  # fmt: skip
    return tuple(found)
