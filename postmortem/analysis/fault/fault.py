"""Fault localization: from an error PC to the SASS instruction, its inline chain, its source.

For each distinct faulting PC: the module whose relocated image holds it, the function
and the offset in its code section, the instruction nvdisasm prints there (only that one
function is disassembled), the `-gi` inline chain of that instruction, the source line of
every frame when the sources can be found, and what limits the answer (no line info,
missing tool, an imprecise PC).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from postmortem.analysis.fault import diagnose as dx
from postmortem.analysis.fault.assertion import DeviceAssert, decode_assert, find_assert_call
from postmortem.analysis.fault.calls import CallStack, unwind
from postmortem.analysis.fault.counts import FaultCounts, count_faults
from postmortem.analysis.fault.disassembly import disassemble_function, quoted
from postmortem.analysis.fault.inline import FrameName, NamedChain, line_table_chain, reconcile
from postmortem.analysis.fault.opclass import is_memory_access
from postmortem.analysis.fault.options import LocalizeOptions
from postmortem.analysis.fault.source import (
    FunctionAt,
    QuotedLine,
    function_finder,
)
from postmortem.analysis.fault.trap import TrapStop, find_trap
from postmortem.analysis.forensics.forensics import Forensics, examine
from postmortem.analysis.state import FAULT_PC_STEPS
from postmortem.codemap import CodeMap, find_faults
from postmortem.coredump import Coredump
from postmortem.cubin.inspect import Function
from postmortem.cubin.nvdisasm import Disassembly
from postmortem.cubin.sass import SassInstruction, SassListing, SourceFrame
from postmortem.demangle import heading_name, without_parameters
from postmortem.exceptions import describe_exception, is_memory_exception
from postmortem.findings import Finding
from postmortem.model import Fault, FaultSource, Module


@dataclass(frozen=True, slots=True)
class FaultSite:
    """One faulting PC and everything that localizes it."""

    faults: tuple[Fault, ...]
    """Every fault record (lanes, warps, SMs) at this PC."""
    error_pc: int | None
    exception: int | None
    module: Module | None
    """The module whose relocated image holds the PC."""
    function: Function | None
    """The kernel (the function owning the code section) holding the PC, in absolute
    addresses of the relocated image; `calls` names a called function the PC is in."""
    offset: int | None
    """PC minus the start of the function's code section (nvdisasm's `/*offset*/`)."""
    instruction: SassInstruction | None
    window: tuple[SassInstruction, ...]
    chain: tuple[SourceFrame, ...]
    """The inline chain at the PC, innermost first (empty without line info)."""
    quoted: tuple[QuotedLine, ...]
    has_line_info: bool | None
    disassembly: Disassembly | None = field(repr=False)
    diagnoses: tuple[Finding, ...]
    forensics: Forensics | None = None
    """The instruction decoded and its address per lane; None without an instruction."""
    frame_names: tuple[FrameName | None, ...] = ()
    """The function of each frame of `chain` (and `quoted`), where a source names it."""
    calls: CallStack | None = None
    """The first faulting lane's call stack (one frame when nothing was called)."""
    assertion: DeviceAssert | None = None
    """The failed device assert the lanes stopped at: message, file, line, function."""
    trap: TrapStop | None = None
    """The trap instruction the lanes stopped at, and the message printed before it."""
    counted: FaultCounts | None = field(default=None, repr=False, compare=False)
    """`count_faults(faults)`, counted once by `localize`; None: not counted yet."""

    @property
    def counts(self) -> FaultCounts:
        """The site's faults counted by lane, warp, block, SM and device (a grid-wide fault's
        270,000 are counted once, not by every reader)."""
        return self.counted if self.counted is not None else count_faults(self.faults)

    @property
    def module_handle(self) -> int | None:
        """The module's handle (None without a module, or for a root-level image)."""
        return None if self.module is None else self.module.module_handle

    @property
    def innermost(self) -> tuple[Function, int] | None:
        """The function holding the PC (a called function's clone, or the kernel) and the
        PC's offset in it; None when neither is known."""
        frames = self.calls.frames if self.calls else ()
        if frames and frames[0].function is not None and frames[0].offset is not None:
            return frames[0].function, frames[0].offset
        if self.function is not None and self.offset is not None:
            return self.function, self.offset
        return None

    @property
    def location(self) -> str | None:
        """``kernel+0xd0``: the function holding the PC (parameters dropped) and the PC's
        offset in it; a called function's own offset, not the kernel's."""
        if self.innermost is None:
            return None
        function, offset = self.innermost
        return f"{without_parameters(function.demangled)}+0x{offset:x}"


def localize(
    core: Coredump,
    options: LocalizeOptions | None = None,
    code_map: CodeMap | None = None,
    faults: Sequence[Fault] | None = None,
) -> tuple[FaultSite, ...]:
    """Localize every distinct faulting PC of the dump, most populous first.

    `faults` are the dump's faults when the caller has found them already.
    """
    options = options or LocalizeOptions()
    code_map = code_map or CodeMap(core)
    # Lanes with different exception codes at one PC are different faults; a trap is
    # kept apart from an exception at the same PC.
    groups: dict[tuple[int, int | None, int | None, bool], list[Fault]] = {}
    for fault in find_faults(core, code_map) if faults is None else faults:
        key = (
            fault.device_index,
            fault.error_pc,
            fault.exception,
            fault.source is FaultSource.TRAP,
        )
        groups.setdefault(key, []).append(fault)
    ordered = sorted(groups.values(), key=lambda faults: -len(faults))
    return tuple(_localize_site(core, code_map, tuple(faults), options) for faults in ordered)


def _localize_site(
    core: Coredump, code_map: CodeMap, faults: tuple[Fault, ...], options: LocalizeOptions
) -> FaultSite:
    first = faults[0]
    pc, location = first.error_pc, first.location
    base = FaultSite(
        faults, pc, first.exception, None, None, None, None, (), (), (), None, None, (),
        counted=count_faults(faults),
    )  # fmt: skip
    if pc is None:
        return base
    if location is None:
        missing = [m for m in core.all_modules() if m.relocated_image is None]
        outside = [dx.pc_outside_modules(pc)]
        if missing:
            outside.append(dx.images_missing([m.module_handle for m in missing]))
        return _replace(base, diagnoses=tuple(outside))
    summary = code_map.summary(location.module)
    function = summary.find_entry(pc) if summary else None
    inner = summary.find_function(pc) if summary else None
    notes: list[Finding] = []
    lane_offsets = {f.function_offset for f in faults if f.function_offset is not None}
    # A lane where the driver leaves a faulting warp (state.still_at_fault) is no mismatch.
    odd = lane_offsets - {location.offset + step for step in FAULT_PC_STEPS}
    if odd:
        notes.append(dx.lane_offset_mismatch(min(odd), location.offset))
    has_lines = summary.has_line_info if summary else None
    name = heading_name(function.demangled) if function else location.section_name
    notes.extend(_build_notes(code_map, location.module, name, has_lines))
    site = _replace(
        base, module=location.module, function=function,
        offset=location.offset, has_line_info=has_lines,
    )  # fmt: skip
    # One source lookup for the site's chain and its call stack: each file is read once.
    finder = function_finder(options.sources)
    native = (
        line_table_chain(code_map, location.module, inner, location.offset, finder)
        if inner is not None else None
    )  # fmt: skip
    if native is not None:
        site = _replace(
            site, chain=native.frames, frame_names=native.names,
            quoted=quoted(code_map, native.frames, options.sources),
        )  # fmt: skip
    if not options.nvdisasm.run or function is None or summary is None:
        calls = _unwind(core, code_map, faults, None, finder)
        return _replace(site, diagnoses=tuple(notes), calls=calls)
    site = _disassembled(core, code_map, site, location.section_address, options, notes, native)
    return _replace(site, calls=_unwind(core, code_map, faults, site.disassembly, finder))


def _unwind(
    core: Coredump,
    code_map: CodeMap,
    faults: tuple[Fault, ...],
    listing: Disassembly | None,
    finder: FunctionAt,
) -> CallStack | None:
    lane = next((f for f in faults if f.lane_record is not None), None)
    return unwind(core, code_map, lane, listing, finder) if lane else None


def _build_notes(
    code_map: CodeMap, module: Module, kernel: str, has_lines: bool | None
) -> list[Finding]:
    """Line info missing (and why, from the recorded ptxas options); a -G build."""
    toolkit = code_map.toolkit(module)
    options = toolkit.options if toolkit else None
    notes = []
    if has_lines is False:
        if options is not None and toolkit is not None and toolkit.has_lineinfo_option:
            notes.append(dx.line_info_removed(kernel, options))
        else:
            notes.append(dx.no_line_info(kernel, options))
    if options is not None and toolkit is not None and toolkit.has_device_debug:
        notes.append(dx.device_debug_build(kernel, options))
    return notes


def _disassembled(
    core: Coredump,
    code_map: CodeMap,
    site: FaultSite,
    section_address: int,
    options: LocalizeOptions,
    notes: list[Finding],
    native: NamedChain | None,
) -> FaultSite:
    # `native`: the chain the cubin's own debug info gives (its origin decides how a flat
    # nvdisasm chain of a -G build is read).
    assert site.function is not None and site.offset is not None
    assert site.module is not None
    result, note = disassemble_function(
        core, code_map, site.module, site.function.symbol_index, section_address, options
    )
    if result is None:
        notes.extend([note] if note else [])
        return _replace(site, diagnoses=tuple(notes))
    listing = result.listing
    instruction = listing.at(site.offset)
    found = find_assert_call(listing, site.offset, site.exception)
    assertion = None
    if found is not None:
        call, inside = found
        if inside:
            notes.append(dx.assert_return_address(site.offset, call))
        instruction = call
        assertion = decode_assert(core, code_map, site.module, listing, site.offset, site.faults)
    trap = find_trap(core, code_map, site.module, listing, site.offset, site.faults)
    if trap is not None:
        instruction = trap.instruction
    window = _without_padding(listing.window(site.offset, options.window, options.window), listing)
    named, disagreement = reconcile(native, instruction.inline_chain if instruction else ())
    notes.extend([disagreement] if disagreement else [])
    chain = named.frames
    if instruction is not None:
        notes.extend(_precision(instruction, window, site.exception))
    lines = site.quoted if chain == site.chain else (
        quoted(code_map, chain, options.sources) if chain else ()
    )  # fmt: skip
    # A warp stopped at a trap accessed nothing: there is no address to examine.
    trapped = all(f.source is FaultSource.TRAP for f in site.faults)
    evidence = (
        examine(core, code_map, site.faults, instruction) if instruction and not trapped else None
    )
    return _replace(
        site, instruction=instruction, window=window, chain=chain, quoted=lines,
        frame_names=named.names, disassembly=result, diagnoses=tuple(notes), forensics=evidence,
        assertion=assertion, trap=trap,
    )  # fmt: skip


def _without_padding(
    window: tuple[SassInstruction, ...], listing: SassListing
) -> tuple[SassInstruction, ...]:
    # The NOPs after a function's last real instruction only pad it to its alignment. Read
    # from the end: a fault site of a big kernel asks this of the whole listing.
    last = next((i.offset for i in reversed(listing.instructions) if i.base_opcode != "NOP"), None)
    return tuple(i for i in window if last is None or i.offset <= last)


def _precision(
    instruction: SassInstruction, window: Sequence[SassInstruction], exception: int | None
) -> list[Finding]:
    if not is_memory_exception(exception) or is_memory_access(instruction.base_opcode):
        return []
    before = [
        i for i in window if i.offset < instruction.offset and is_memory_access(i.base_opcode)
    ]
    nearest = f"{before[-1].text} at /*{before[-1].offset:04x}*/" if before else None
    return [dx.imprecise_pc(instruction.opcode, describe_exception(exception or 0), nearest)]


def _replace(site: FaultSite, **changes: object) -> FaultSite:
    return replace(site, **changes)  # type: ignore[arg-type]
