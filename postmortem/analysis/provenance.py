"""How each cubin that matters was built: the `.note.nv.tkinfo` / `.note.nv.cuinfo` notes,
and what they say about line info ("compiled without -lineinfo" versus "removed later")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from postmortem.codemap import CodeMap
from postmortem.cubin.nvinfo import ToolkitInfo
from postmortem.errors import ToolNotFound
from postmortem.findings import FindingCode
from postmortem.model import Module
from postmortem.tools import Tool, ToolChoice

if TYPE_CHECKING:  # types only: the analysis's modules load after nvdisasm has started
    from postmortem.analysis.crosscheck import CrossCheck
    from postmortem.analysis.fault.fault import FaultSite
    from postmortem.analysis.hang.hang import HangAnalysis


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


@dataclass(frozen=True, slots=True)
class ToolUse:
    """Where a report's facts came from: one source, whether it was used, and if not, why."""

    source: str
    """"native reader", "nvdisasm" or "cuda-gdb"."""
    version: str | None
    facts: str
    """Which facts it gave."""
    used: bool
    note: str | None
    """Why it was not used, or what limited it."""
    image: str | None = None
    """For nvdisasm: which copy of the image it read (`postmortem.cubin.normalize`)."""
    seconds: float | None = None
    """How long the tool ran for this dump (None: not run, or not measured)."""
    peak_rss_kib: int | None = None
    """The tool's peak resident memory, in KiB (None: not measured)."""
    path: str | None = None
    """The executable that ran (None: not run, or not found)."""
    chosen_by: str | None = None
    """What chose that executable: an option, a settings file, an environment variable, $PATH,
    a CUDA folder or the nvidia wheel (`postmortem.tools.ToolChoice.origin`)."""


def tool_choice(name: str, tool: Tool) -> ToolChoice | None:
    """The executable a run of `name` uses with these settings, and what chose it; None when
    there is none (the run then says why)."""
    try:
        return tool.locate(name)
    except ToolNotFound:
        return None


def tool_uses(
    version: str,
    sites: Sequence[FaultSite],
    hang: HangAnalysis | None,
    check: CrossCheck | None,
    gdb_note: str | None,
    reader_note: str | None = None,
    choices: tuple[ToolChoice | None, ToolChoice | None] = (None, None),
) -> tuple[ToolUse, ...]:
    """The provenance of an analysis: the native reader, nvdisasm and cuda-gdb.
    `reader_note` says how the reader got the dump when that is worth saying (by ranges
    from an object store); `choices` are the nvdisasm and cuda-gdb executables chosen
    (None: not run)."""
    listing = next((s.disassembly for s in sites if s.disassembly), None)
    if listing is None and hang is not None and hang.disassemblies:
        listing = hang.disassemblies[0]
    trouble = next(
        (d.message for s in sites for d in s.diagnoses if d.code in _NVDISASM_TROUBLE), None
    )
    why_no_listing = trouble or ("not run" if sites else "no fault to disassemble")
    gdb_why = gdb_note if check is None else (
        None if check.opened
        else "; ".join(n.message for n in check.notes) or "could not read the dump"
    )  # fmt: skip
    return (
        ToolUse(
            "native reader", version,
            "exception, error PC, threads, kernel+offset, launches, devices, modules, "
            "metadata, GPU state", True, reader_note,
        ),
        ToolUse(
            "nvdisasm", listing.tool_version if listing else None,
            "SASS instructions, inline chains (-gi)", listing is not None,
            None if listing else why_no_listing, listing.image if listing else None,
            _nvdisasm_seconds(sites, hang) if listing else None, None,
            *_chosen(choices[0] if listing or trouble else None),
        ),
        ToolUse(
            "cuda-gdb", check.version if check else None,
            "second opinion on the native facts; backtrace with inline function names",
            bool(check and check.opened), gdb_why, None,
            check.seconds if check else None, check.peak_rss_kib if check else None,
            *_chosen(choices[1]),
        ),
    )  # fmt: skip


def _chosen(choice: ToolChoice | None) -> tuple[str | None, str | None]:
    return (None, None) if choice is None else (str(choice.path), choice.origin)


def _nvdisasm_seconds(sites: Sequence[FaultSite], hang: HangAnalysis | None) -> float:
    # Each distinct listing once (sites of one function share one, memoized); a listing from
    # the scan's store took no run.
    listings = [s.disassembly for s in sites if s.disassembly]
    listings += list(hang.disassemblies) if hang else []
    return sum({id(d): d.seconds for d in listings}.values())


_NVDISASM_TROUBLE = frozenset({FindingCode.NVDISASM_MISSING, FindingCode.NVDISASM_FAILED})
