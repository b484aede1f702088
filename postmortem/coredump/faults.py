"""Find the faults a dump records and the code each faulting PC belongs to.

The order of evidence follows the format: a warp row with a valid error PC, the lanes
with a non-zero exception (each lane's own PC), and, since r555, an SM row's exception
and error PC, which is all that is left when every faulting warp has exited. Exception
columns are scanned in bulk over each table; rows are turned into objects only for
the lanes and warps that faulted.
"""

from __future__ import annotations

from dataclasses import dataclass

from postmortem.coredump import tables as t
from postmortem.coredump.reader import Coredump
from postmortem.coredump.rows import make_cta, make_lane, make_sm, make_warp
from postmortem.cubin.inspect import CubinSummary, summarize_cubin
from postmortem.cubin.nvinfo import NvInfoError, ToolkitInfo, read_toolkit_info
from postmortem.errors import CorruptSection, PostmortemError
from postmortem.model import CTA, SM, CodeLocation, Fault, FaultSource, Module, RowRef, Warp


@dataclass(frozen=True, slots=True)
class LoadedModule:
    """A module with a relocated image, and what that image holds."""

    module: Module
    summary: CubinSummary


class CodeMap:
    """PC → module, section and function, over the relocated images of a dump."""

    def __init__(self, core: Coredump) -> None:
        self._core = core
        self._loaded: list[LoadedModule] | None = None
        self._toolkits: dict[int, ToolkitInfo | None] = {}

    def modules(self) -> list[LoadedModule]:
        if self._loaded is None:
            self._loaded = []
            for module in self._core.all_modules():
                image = module.relocated_image
                if image is not None:
                    summary = self._summarize(image.section)
                    self._loaded.append(LoadedModule(module, summary))
        return self._loaded

    def _summarize(self, section: int) -> CubinSummary:
        core = self._core
        offset, size = int(core.sections.offset[section]), int(core.sections.size[section])
        label = core.sections.label(section)
        core.file.check(offset, size, f"section {label}")
        try:
            return summarize_cubin(core.file.map, offset, size)
        except PostmortemError:
            raise
        except Exception as error:  # pyelftools fails in many ways on a corrupt image
            raise CorruptSection(
                core.path, label, "image", size, f"not a readable cubin ({error})"
            ) from None

    def find(self, module_handle: int) -> LoadedModule | None:
        """The loaded module with `module_handle`, if the dump holds its image."""
        return next((m for m in self.modules() if m.module.module_handle == module_handle), None)

    def summary(self, module_handle: int) -> CubinSummary | None:
        """What the module's relocated image holds."""
        loaded = self.find(module_handle)
        return loaded.summary if loaded else None

    def image_bytes(self, module_handle: int) -> bytes:
        """The module's relocated cubin (empty when the dump holds none)."""
        loaded = self.find(module_handle)
        image = loaded.module.relocated_image if loaded else None
        return self._core.image_bytes(image) if image else b""

    def toolkit(self, module_handle: int) -> ToolkitInfo | None:
        """How the module's image was built (its tkinfo/cuinfo notes), read once; None when
        it has none or they cannot be read."""
        if module_handle not in self._toolkits:
            image = self.image_bytes(module_handle)
            try:
                self._toolkits[module_handle] = read_toolkit_info(image) if image else None
            except NvInfoError:
                self._toolkits[module_handle] = None
        return self._toolkits[module_handle]

    def locate(self, device_index: int, pc: int) -> CodeLocation | None:
        """The executable section (and its function) holding `pc` on a device."""
        for loaded in self.modules():
            if loaded.module.device_index != device_index:
                continue
            code = loaded.summary.find_code(pc)
            if code is not None:
                return CodeLocation(
                    loaded.module.module_handle,
                    code.name,
                    code.address,
                    pc - code.address,
                    code.function,
                )
        return None


def find_faults(core: Coredump, code_map: CodeMap | None = None) -> tuple[Fault, ...]:
    """Every fault the dump records, lane faults first-class, sorted by location."""
    code_map = code_map or CodeMap(core)
    faults: list[Fault] = []
    # Each faulting warp is decoded once, however many of its lanes fault.
    warps: dict[RowRef, Warp] = {}
    for ref in core.tables.nonzero_rows(t.LN_TABLE, "exception"):
        warp_ref = core.tables.parent_of(ref.section)
        warp = warps.get(warp_ref) or warps.setdefault(warp_ref, _warp_at(core, warp_ref))
        lane = make_lane(core.tables.rows(ref.section, t.LN_TABLE)[ref.row], warp, ref)
        pc = warp.error_pc if warp.error_pc is not None else lane.virtual_pc
        faults.append(
            Fault(
                FaultSource.LANE, lane.exception, pc, lane.device_index, lane.sm_id,
                lane.grid_id, lane.block_idx, lane.warp_id, lane.lane, lane.thread_idx,
                lane.function_offset, code_map.locate(lane.device_index, pc),
                warp_record=warp, lane_record=lane,
            )
        )  # fmt: skip
    faults.extend(_warp_faults(core, code_map, set(warps)))
    faulted_sms = {(f.device_index, f.sm_id) for f in faults}
    faults.extend(_sm_faults(core, code_map, faulted_sms))
    return tuple(sorted(faults, key=_order))


def _order(fault: Fault) -> tuple[int, int, tuple[int, int, int], int, int]:
    return (
        fault.device_index,
        fault.sm_id,
        fault.block_idx or (-1, -1, -1),
        -1 if fault.warp_id is None else fault.warp_id,
        -1 if fault.lane is None else fault.lane,
    )


def _warp_faults(core: Coredump, code_map: CodeMap, skip: set[RowRef]) -> list[Fault]:
    """Warps with a valid error PC but no lane exception (the code comes from the SM)."""
    found = []
    for ref in core.tables.nonzero_rows(t.WP_TABLE, "error_pc_valid"):
        if ref in skip:
            continue
        warp = _warp_at(core, ref)
        sm = _sm_at(core, core.tables.parent_of(core.tables.parent_of(ref.section).section))
        found.append(
            Fault(
                FaultSource.WARP, sm.exception, warp.error_pc, warp.device_index, warp.sm_id,
                warp.grid_id, warp.block_idx, warp.warp_id, None, None, None,
                code_map.locate(warp.device_index, warp.error_pc or 0),
                warp_record=warp,
            )
        )  # fmt: skip
    return found


def _sm_faults(core: Coredump, code_map: CodeMap, skip: set[tuple[int, int]]) -> list[Fault]:
    """SM-level exceptions (r555+) on SMs where no warp or lane reports one."""
    found = []
    for ref in core.tables.nonzero_rows(t.SM_TABLE, "exception"):
        sm = _sm_at(core, ref)
        if (sm.device_index, sm.sm_id) in skip:
            continue
        location = None if sm.error_pc is None else code_map.locate(sm.device_index, sm.error_pc)
        found.append(
            Fault(
                FaultSource.SM, sm.exception or 0, sm.error_pc, sm.device_index, sm.sm_id,
                None, None, None, None, None, None, location, sm.exception_string,
            )
        )  # fmt: skip
    return found


def _sm_at(core: Coredump, ref: RowRef) -> SM:
    device = core.tables.parent_of(ref.section)
    rows = core.tables.rows(ref.section, t.SM_TABLE)
    return make_sm(rows[ref.row], device.row, ref, core.sections.string)


def _cta_at(core: Coredump, ref: RowRef) -> CTA:
    sm = _sm_at(core, core.tables.parent_of(ref.section))
    return make_cta(core.tables.rows(ref.section, t.CTA_TABLE)[ref.row], sm, ref)


def _warp_at(core: Coredump, ref: RowRef) -> Warp:
    cta = _cta_at(core, core.tables.parent_of(ref.section))
    return make_warp(
        core.tables.rows(ref.section, t.WP_TABLE)[ref.row], cta, ref, core.sections.string
    )
