"""The summary `postmortem info` prints: what the native reader found in a dump."""

from __future__ import annotations

from dataclasses import dataclass

from postmortem.codemap import CodeMap, find_faults
from postmortem.coredump import tables as t
from postmortem.coredump.reader import Coredump
from postmortem.coredump.survey import DamageKind
from postmortem.errors import NoGpuState
from postmortem.findings import Finding
from postmortem.model import Device, Fault, Grid, Metadata, Module, TableLayout
from postmortem.salvage import dump_findings


@dataclass(frozen=True, slots=True)
class KernelLaunch:
    """A grid with the kernel its entry address resolves to."""

    grid: Grid
    kernel: str | None
    """Mangled name, when a relocated image holds the entry address."""
    faulted: bool = False
    """A fault record names this grid (or, for an SM-level fault that names none, this
    grid's kernel holds the error PC)."""


@dataclass(frozen=True, slots=True)
class ModuleSummary:
    """A module and the functions of its relocated image."""

    module: Module
    functions: tuple[str, ...]
    abi_version: int | None
    """The cubin's ELF ABI version (7: CUDA 11/12, 8: CUDA 13); None without an image."""


@dataclass(frozen=True, slots=True)
class Census:
    """How much of the GPU the dump captured."""

    sms: int
    ctas: int
    warps: int
    lanes: int


@dataclass(frozen=True, slots=True)
class DumpSummary:
    """Everything `postmortem info` reports."""

    path: str
    file_size: int
    compressed: bool
    codec: str | None
    """"gzip", "zstd" or "xz" when the file was compressed."""
    abi_version: int
    section_count: int
    extended_numbering: bool
    layouts: tuple[TableLayout, ...]
    layout_generation: str
    """The newest driver generation the row sizes show."""
    metadata: Metadata | None
    devices: tuple[Device, ...]
    modules: tuple[ModuleSummary, ...]
    launches: tuple[KernelLaunch, ...]
    census: Census
    faults: tuple[Fault, ...]
    optional_sections: dict[str, int]
    findings: tuple[Finding, ...] = ()
    """What the reader had to set aside or read in part (a partial dump), and why."""


def summarize(
    core: Coredump, code_map: CodeMap | None = None, *, findings: bool = True
) -> DumpSummary:
    """Read the parts of a dump `info` shows (tables, modules, faults; no registers).

    `findings`: False leaves `DumpSummary.findings` empty, for a caller that makes them
    (`salvage.dump_findings`) once it has read all it reads: they read every warp and lane
    table.

    Raises:
        NoGpuState: The dump holds no warp and no SM-level exception: nothing to analyze.
    """
    code_map = code_map or CodeMap(core)
    if not core.has_gpu_state:
        raise NoGpuState(core.path, _holdings(core, code_map))
    modules = tuple(
        ModuleSummary(
            loaded.module,
            tuple(s.function for s in loaded.summary.code_sections if s.function),
            loaded.summary.abi_version,
        )
        for loaded in code_map.modules()
    )
    faults = find_faults(core, code_map)
    launches = []
    for device in core.devices:
        for grid in core.grids(device):
            location = code_map.locate(device.index, grid.function_entry)
            kernel = location.function if location else None
            launches.append(KernelLaunch(grid, kernel, _faulted(grid, kernel, faults)))
    return DumpSummary(
        path=str(core.path),
        file_size=core.file_size,
        compressed=core.compressed,
        codec=core.codec,
        abi_version=core.identity.abi_version,
        section_count=core.identity.section_count,
        extended_numbering=core.identity.extended_numbering,
        layouts=core.table_layouts(),
        layout_generation=core.layout_generation,
        metadata=core.metadata,
        devices=core.devices,
        modules=modules,
        launches=tuple(launches),
        census=_census(core),
        faults=faults,
        optional_sections=_optional_sections(core),
        findings=dump_findings(core, code_map) if findings else (),
    )


def _faulted(grid: Grid, kernel: str | None, faults: tuple[Fault, ...]) -> bool:
    for fault in faults:
        if fault.device_index != grid.device_index:
            continue
        if grid.grid_id is not None and fault.grid_id == grid.grid_id:
            return True
        # An SM-level fault names no grid: the code its PC is in names the kernel.
        location = fault.location
        if fault.grid_id is None and location and kernel and location.function == kernel:
            return True
    return False


def _holdings(core: Coredump, code_map: CodeMap) -> str:
    counts = (
        (len(core.devices), "device"),
        (len(code_map.modules()), "readable module"),
        (sum(len(core.grids(d)) for d in core.devices), "grid"),
        (core.tables.row_count(t.SM_TABLE), "SM row"),
        (sum(d.count for d in core.damage if d.kind is not DamageKind.ROOT_IMAGE),
         "section"),
    )  # fmt: skip
    words = [f"{n:,} {word}{'s' if n != 1 else ''}" for n, word in counts]
    return ", ".join(words[:-1]) + f"; {words[-1]} set aside or cut short"


def _census(core: Coredump) -> Census:
    return Census(
        sms=core.tables.row_count(t.SM_TABLE),
        ctas=core.tables.row_count(t.CTA_TABLE),
        warps=core.tables.row_count(t.WP_TABLE),
        lanes=core.tables.row_count(t.LN_TABLE),
    )


_OPTIONAL = (
    t.ELF_IMG, t.GLOBAL_MEM, t.MANAGED_MEM, t.SHARED_MEM, t.LOCAL_MEM, t.PARAM_MEM,
    t.DEV_UREGS, t.DEV_UPRED, t.BT, t.CB_TABLE, t.META_DATA, t.CBU_BAR,
)  # fmt: skip


def _optional_sections(core: Coredump) -> dict[str, int]:
    counts = core.section_counts()
    return {t.SECTION_TYPE_NAMES[k]: counts.get(t.SECTION_TYPE_NAMES[k], 0) for k in _OPTIONAL}
