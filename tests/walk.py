"""Touch every part of a dump the reader can decode (for fuzzing and agreement tests)."""

from __future__ import annotations

from postmortem.coredump import Coredump
from postmortem.summary import DumpSummary, summarize


def walk(core: Coredump) -> DumpSummary:
    """Summarize `core`, then descend to every lane and read its per-lane data."""
    summary = summarize(core)
    for context in core.contexts():
        for module in core.modules(context):
            for image in (module.relocated_image, module.unrelocated_image):
                if image is not None:
                    core.image_bytes(image)
    for device in core.devices:
        for grid in core.grids(device):
            core.params(grid)
            core.constbanks(grid)
        for warp in core.iter_warps(device):
            core.uniform_registers(warp)
            core.uniform_predicates(warp)
            core.convergence_barriers(warp)
            for lane in core.lanes(warp):
                core.registers(lane)
                core.predicates(lane)
                core.backtrace(lane)
                core.local_memory(lane)
    for segment in core.memory_segments():
        core.read_memory(segment.address, min(segment.size_bytes, 64))
    return summary
