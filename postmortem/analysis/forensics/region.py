"""Where a faulting address falls: captured global memory, the shared or local window, and
whether it is aligned for the access width.

Every check says when it cannot be made (a lightweight dump captures no memory, an older row
layout records no shared-memory size) instead of calling the address good or bad.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from postmortem.coredump import Coredump
from postmortem.cubin.operands import MemoryAccess
from postmortem.exceptions import is_misaligned
from postmortem.model import Fault, MemorySegment

_SKIP_GLOBAL = 2
_SKIP_SHARED = 4
_SKIP_LOCAL = 8


@dataclass(frozen=True, slots=True)
class AddressCheck:
    """One question asked of the faulting addresses, and its answer."""

    check: str
    """"global-segment", "shared-size", "local-size" or "alignment"."""
    verdict: bool | None
    """True: the addresses pass; False: they do not; None: the dump cannot tell."""
    message: str
    """The answer in one sentence, with the numbers."""
    excess_bytes: int | None = None
    """How far past the end (shared/local) or off alignment the worst address is."""


def check_addresses(
    core: Coredump, access: MemoryAccess, faults: Sequence[Fault], addresses: Sequence[int]
) -> tuple[AddressCheck, ...]:
    """Every check that applies to the access's memory space, plus alignment.

    `addresses` are what the lanes computed: offsets into the window for shared and local
    accesses, virtual addresses for global and generic ones.
    """
    if not addresses:
        return ()
    checks: list[AddressCheck] = []
    if access.space == "generic":
        checks.extend(_generic_checks(core, access, faults, addresses))
    elif access.space == "global":
        checks.append(_global_check(core, addresses))
    elif access.space == "shared":
        checks.append(_shared_check(core, faults, addresses, access.width_bytes or 1))
    elif access.space == "local":
        checks.append(_local_check(core, faults, addresses, access.width_bytes or 1))
    exception = faults[0].exception if faults else None
    alignment = _alignment_check(addresses, access.width_bytes, exception)
    if alignment is not None:
        checks.append(alignment)
    return tuple(checks)


def _generic_checks(
    core: Coredump, access: MemoryAccess, faults: Sequence[Fault], addresses: Sequence[int]
) -> list[AddressCheck]:
    """A generic address may point into the context's shared or local window: then it is
    checked as a shared or local offset, else as a global address."""
    windows = _windows(core, faults)
    if windows is None:
        return [_global_check(core, addresses)]
    shared_base, local_base = windows
    width = access.width_bytes or 1
    span = local_base - shared_base
    shared = [a - shared_base for a in addresses if shared_base <= a < local_base]
    local = [a - local_base for a in addresses if local_base <= a < local_base + span]
    rest = [a for a in addresses if not (shared_base <= a < local_base + span)]
    checks = []
    if shared:
        checks.append(_shared_check(core, faults, shared, width))
    if local:
        checks.append(_local_check(core, faults, local, width))
    if rest:
        checks.append(_global_check(core, rest))
    return checks


def _windows(core: Coredump, faults: Sequence[Fault]) -> tuple[int, int] | None:
    """The shared and local window bases of the faulting device's context, when the local
    window follows the shared one (as the driver lays them out)."""
    devices = {f.device_index for f in faults}
    for context in core.contexts():
        if context.device_index in devices:
            shared, local = context.shared_window_base, context.local_window_base
            if shared is None or local is None:
                return None
            return (shared, local) if 0 < shared < local else None
    return None


def _flags(core: Coredump) -> int:
    metadata = core.metadata
    return metadata.flags if metadata and metadata.flags is not None else 0


def _global_check(core: Coredump, addresses: Sequence[int]) -> AddressCheck:
    segments = [s for s in core.memory_segments() if s.kind in ("global", "managed")]
    if not segments:
        why = (
            "the dump was written with skip_global_memory"
            if _flags(core) & _SKIP_GLOBAL
            else "the dump holds no global memory segments"
        )
        return AddressCheck(
            "global-segment", None,
            f"cannot tell whether the addresses are mapped: {why} (a lightweight dump), "
            "which says nothing about the address being bad",
        )  # fmt: skip
    outside = [a for a in addresses if _segment_of(segments, a) is None]
    if not outside:
        return AddressCheck(
            "global-segment", True, "every address lies inside a captured memory segment"
        )
    nearest = min(segments, key=lambda s: _distance(s, outside[0]))
    return AddressCheck(
        "global-segment", False,
        f"{len(outside)} of {len(addresses)} addresses lie outside every captured segment; "
        f"the nearest segment to 0x{outside[0]:x} is {nearest.kind} "
        f"[0x{nearest.address:x}, 0x{nearest.address + nearest.size_bytes:x})",
    )  # fmt: skip


def _segment_of(segments: Sequence[MemorySegment], address: int) -> MemorySegment | None:
    for segment in segments:
        if segment.address <= address < segment.address + segment.size_bytes:
            return segment
    return None


def _distance(segment: MemorySegment, address: int) -> int:
    if address < segment.address:
        return segment.address - address
    return max(0, address - (segment.address + segment.size_bytes) + 1)


def _shared_check(
    core: Coredump, faults: Sequence[Fault], addresses: Sequence[int], width: int
) -> AddressCheck:
    size, source = _shared_size(core, faults)
    if size is None:
        return AddressCheck(
            "shared-size", None,
            "cannot compare with the block's shared memory size: the warp row has no "
            "sharedMemSize (layouts before r570) and the dump holds no shared memory",
        )  # fmt: skip
    return _window_check("shared-size", "shared", addresses, width, size, source)


def _shared_size(core: Coredump, faults: Sequence[Fault]) -> tuple[int | None, str]:
    for fault in faults:
        if fault.warp_record is not None and fault.warp_record.shared_mem_size is not None:
            return fault.warp_record.shared_mem_size, "the warp row's sharedMemSize"
    if _flags(core) & _SKIP_SHARED:
        return None, ""
    for fault in faults:
        data = core.shared_memory(fault.warp_record) if fault.warp_record else None
        if data is not None:
            return len(data), "the size of the block's captured shared memory"
    return None, ""


def _local_check(
    core: Coredump, faults: Sequence[Fault], addresses: Sequence[int], width: int
) -> AddressCheck:
    sizes = [
        len(data)
        for fault in faults
        if fault.lane_record is not None
        and (data := core.local_memory(fault.lane_record)) is not None
    ]
    if not sizes:
        return AddressCheck(
            "local-size", None,
            "cannot compare with the thread's local memory size: the dump holds no local memory",
        )  # fmt: skip
    size = min(sizes)
    return _window_check(
        "local-size", "local", addresses, width, size, "the size of the captured local memory"
    )


def _window_check(
    check: str, space: str, addresses: Sequence[int], width: int, size: int, source: str
) -> AddressCheck:
    worst = max(addresses)
    excess = worst + width - size
    if excess <= 0:
        return AddressCheck(
            check, True,
            f"every {space} offset is inside the {size:,}-byte window ({source})",
        )  # fmt: skip
    past = sum(1 for a in addresses if a + width > size)
    return AddressCheck(
        check, False,
        f"{space} offset {worst:,} (0x{worst:x}) with a {width}-byte access ends {excess:,} "
        f"bytes past the {size:,}-byte window ({source}); {past} of {len(addresses)} "
        "lanes overflow",
        excess,
    )  # fmt: skip


def _alignment_check(
    addresses: Sequence[int], width: int | None, exception: int | None
) -> AddressCheck | None:
    if not width or width == 1:
        return None
    off = [a % width for a in addresses if a % width]
    if not off:
        if is_misaligned(exception):
            return AddressCheck(
                "alignment", True,
                f"every address is {width}-byte aligned, yet the exception says misaligned: "
                "the registers may have changed since the fault, or the PC is imprecise",
            )  # fmt: skip
        return None
    worst = max(off)
    return AddressCheck(
        "alignment", False,
        f"misaligned by {worst} byte{'s' if worst != 1 else ''} for a {width}-byte access "
        f"(address % {width} = {worst}; {len(off)} of {len(addresses)} lanes)",
        worst,
    )  # fmt: skip
