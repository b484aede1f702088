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
from postmortem.errors import MalformedElf
from postmortem.model import CTA, SM, CodeLocation, Fault, FaultSource, Module, RowRef, Warp


@dataclass(frozen=True, slots=True)
class LoadedModule:
    """A module with a relocated image, and what that image holds."""

    module: Module
    summary: CubinSummary


class CodeMap:
    """PC → module, section and function, over the relocated images of a dump.

    An image that is not a readable cubin is set aside (`unreadable`), not fatal: the
    rest of the dump's code still maps.
    """

    def __init__(self, core: Coredump) -> None:
        self._core = core
        self._loaded: list[LoadedModule] | None = None
        self._by_module: dict[Module, LoadedModule] | None = None
        self._toolkits: dict[Module, ToolkitInfo | None] = {}
        self.unreadable: list[tuple[Module, str]] = []
        """Modules whose relocated image could not be read, and why."""

    def modules(self) -> list[LoadedModule]:
        if self._loaded is None:
            self._loaded = []
            for module in self._core.all_modules():
                image = module.relocated_image
                if image is None:
                    continue
                try:
                    summary = self._summarize(image.section)
                except MalformedElf as error:
                    self.unreadable.append((module, str(error)))
                    continue
                self._loaded.append(LoadedModule(module, summary))
        return self._loaded

    def _summarize(self, section: int) -> CubinSummary:
        core = self._core
        offset, size = int(core.sections.offset[section]), int(core.tables.survey.size[section])
        return summarize_cubin(core.file.map, offset, size)

    def find(self, module: Module) -> LoadedModule | None:
        """The loaded module, if the dump holds a readable relocated image for it."""
        if self._by_module is None:
            self._by_module = {loaded.module: loaded for loaded in self.modules()}
        return self._by_module.get(module)

    def summary(self, module: Module) -> CubinSummary | None:
        """What the module's relocated image holds."""
        loaded = self.find(module)
        return loaded.summary if loaded else None

    def image_bytes(self, module: Module) -> bytes:
        """The module's relocated cubin (empty when the dump holds none)."""
        image = module.relocated_image
        return self._core.image_bytes(image) if image and self.find(module) else b""

    def toolkit(self, module: Module) -> ToolkitInfo | None:
        """How the module's image was built (its tkinfo/cuinfo notes), read once; None when
        it has none or they cannot be read."""
        if module not in self._toolkits:
            image = self.image_bytes(module)
            try:
                self._toolkits[module] = read_toolkit_info(image) if image else None
            except NvInfoError:
                self._toolkits[module] = None
        return self._toolkits[module]

    def locate(self, device_index: int, pc: int | None) -> CodeLocation | None:
        """The executable section (and its function) holding `pc` on a device; a root-level
        image, whose device is unknown, serves every device."""
        if pc is None:
            return None
        for loaded in self.modules():
            if loaded.module.device_index not in (device_index, None):
                continue
            code = loaded.summary.find_code(pc)
            if code is not None:
                return CodeLocation(
                    loaded.module,
                    code.name,
                    code.address,
                    pc - code.address,
                    code.function,
                )
        return None


def find_faults(core: Coredump, code_map: CodeMap | None = None) -> tuple[Fault, ...]:
    """Every fault the dump records, lane faults first-class, sorted by location.

    Each faulting lane is a record of its own, with its own exception code, so lanes with
    different codes at one PC stay apart. A warp stopped at a trap (`isWarpBroken`) with
    no exception is a `TRAP` record.
    """
    code_map = code_map or CodeMap(core)
    faults: list[Fault] = []
    # Each faulting warp is decoded once, however many of its lanes fault.
    warps: dict[RowRef, Warp] = {}
    for ref in core.tables.nonzero_rows(t.LN_TABLE, "exception"):
        warp_ref = core.tables.parent_of(ref.section)
        warp = warps.get(warp_ref) or warps.setdefault(warp_ref, _warp_at(core, warp_ref))
        lane = make_lane(core.tables.rows(ref.section, t.LN_TABLE)[ref.row], warp, ref)
        if not warp.holds_lane(lane.lane):
            continue  # a row the valid-lanes mask does not count is no thread
        pc = warp.error_pc if warp.error_pc is not None else lane.virtual_pc
        faults.append(
            Fault(
                FaultSource.LANE, lane.exception, pc, lane.device_index, lane.sm_id,
                lane.grid_id, lane.block_idx, lane.warp_id, lane.lane, lane.thread_idx,
                lane.function_offset, code_map.locate(lane.device_index, pc),
                warp_record=warp, lane_record=lane,
            )
        )  # fmt: skip
    seen = set(warps)
    faults.extend(_warp_faults(core, code_map, seen))
    faults.extend(_trap_warps(core, code_map, seen))
    faulted_sms = {(f.device_index, f.sm_id) for f in faults}
    faults.extend(_sm_faults(core, code_map, faulted_sms))
    return tuple(sorted(faults, key=_order))


def _order(fault: Fault) -> tuple[int, int, tuple[int, int, int], int, int]:
    return (
        fault.device_index,
        -1 if fault.sm_id is None else fault.sm_id,
        fault.block_idx or (-1, -1, -1),
        -1 if fault.warp_id is None else fault.warp_id,
        -1 if fault.lane is None else fault.lane,
    )


def _warp_faults(core: Coredump, code_map: CodeMap, skip: set[RowRef]) -> list[Fault]:
    """Warps with a valid error PC but no lane exception (the code comes from the SM); a
    broken warp on an SM that reports no exception is left to `_trap_warps`."""
    found = []
    for ref in core.tables.nonzero_rows(t.WP_TABLE, "error_pc_valid"):
        if ref in skip:
            continue
        warp = _warp_at(core, ref)
        sm = _sm_at(core, core.tables.parent_of(core.tables.parent_of(ref.section).section))
        if warp.is_broken and not sm.exception:
            continue
        skip.add(ref)
        found.append(
            Fault(
                FaultSource.WARP, sm.exception, warp.error_pc, warp.device_index, warp.sm_id,
                warp.grid_id, warp.block_idx, warp.warp_id, None, None, None,
                code_map.locate(warp.device_index, warp.error_pc),
                warp_record=warp,
            )
        )  # fmt: skip
    return found


def _trap_warps(core: Coredump, code_map: CodeMap, skip: set[RowRef]) -> list[Fault]:
    """Warps stopped at a trap or breakpoint (`isWarpBroken`) that report no exception."""
    found = []
    for ref in core.tables.nonzero_rows(t.WP_TABLE, "is_warp_broken"):
        if ref in skip:
            continue
        warp = _warp_at(core, ref)
        pc = warp.error_pc if warp.error_pc is not None else _warp_pc(core, warp)
        found.append(
            Fault(
                FaultSource.TRAP, None, pc, warp.device_index, warp.sm_id, warp.grid_id,
                warp.block_idx, warp.warp_id, None, None, None,
                code_map.locate(warp.device_index, pc),
                warp_record=warp,
            )
        )  # fmt: skip
    return found


def _warp_pc(core: Coredump, warp: Warp) -> int | None:
    """The PC of the warp's first active lane (else its first lane), when lanes say one."""
    lanes = [lane for lane in core.lanes(warp) if lane.virtual_pc is not None]
    active = warp.active_lanes_mask or 0
    chosen = next((x for x in lanes if x.lane is not None and active >> x.lane & 1), None)
    chosen = chosen or next(iter(lanes), None)
    return None if chosen is None else chosen.virtual_pc


def _sm_faults(core: Coredump, code_map: CodeMap, skip: set[tuple[int, int | None]]) -> list[Fault]:
    """SM-level exceptions (r555+) on SMs where no warp or lane reports one."""
    found = []
    for ref in core.tables.nonzero_rows(t.SM_TABLE, "exception"):
        sm = _sm_at(core, ref)
        if (sm.device_index, sm.sm_id) in skip:
            continue
        found.append(
            Fault(
                FaultSource.SM, sm.exception or 0, sm.error_pc, sm.device_index, sm.sm_id,
                None, None, None, None, None, None,
                code_map.locate(sm.device_index, sm.error_pc), sm.exception_string,
            )
        )  # fmt: skip
    return found


def _sm_at(core: Coredump, ref: RowRef) -> SM:
    device = core.tables.parent_of(ref.section)
    rows = core.tables.rows(ref.section, t.SM_TABLE)
    return make_sm(rows[ref.row], device.row, ref, core.string)


def _cta_at(core: Coredump, ref: RowRef) -> CTA:
    sm = _sm_at(core, core.tables.parent_of(ref.section))
    return make_cta(core.tables.rows(ref.section, t.CTA_TABLE)[ref.row], sm, ref)


def _warp_at(core: Coredump, ref: RowRef) -> Warp:
    cta = _cta_at(core, core.tables.parent_of(ref.section))
    return make_warp(core.tables.rows(ref.section, t.WP_TABLE)[ref.row], cta, ref, core.string)
