"""Diagnoses: what is wrong with the build or the dump, in plain words, and what to do.

Each diagnosis has a stable `code` (for tests, scripts and grouping), a one-line
`message` that says what we saw, and a `remedy` that says what to do about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


def missing_code(tool: str) -> str:
    """The code of the diagnosis that `tool` is not installed."""
    return f"{tool}-missing"


def failed_code(tool: str) -> str:
    """The code of the diagnosis that `tool` ran and gave no result (refused, timed out)."""
    return f"{tool}-failed"


NVDISASM_MISSING = missing_code("nvdisasm")
"""No nvdisasm was found: no SASS, no inline chain."""
NVDISASM_FAILED = failed_code("nvdisasm")
"""nvdisasm ran on every copy of the image and gave no listing."""


class Severity(Enum):
    """How much a diagnosis limits the answer."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One finding about the build, the dump or the tools."""

    code: str
    """Stable identifier, e.g. "no-line-info"."""
    severity: Severity
    message: str
    """What we saw, in one line."""
    remedy: str | None = None
    """What to do about it, when something can be done."""


_LINEINFO_REMEDY = (
    "rebuild with -lineinfo; for builds you do not control (PyTorch extensions, vLLM, "
    "FlashAttention) set NVCC_PREPEND_FLAGS='-lineinfo', and turn the compiler cache off "
    "(CCACHE_DISABLE=1): ccache can hand back an object compiled without the flag and "
    "the build still succeeds"
)


def no_line_info(kernel: str, ptxas_options: str | None = None) -> Diagnosis:
    """No `.debug_line`, and the recorded ptxas options (if any) lack -lineinfo."""
    how = (
        f"; it was compiled without -lineinfo (ptxas options: {ptxas_options.strip()})"
        if ptxas_options is not None
        else "; the cubin records no compiler options (no .note.nv.tkinfo), so whether it "
        "was compiled without -lineinfo or stripped later cannot be told"
    )
    return Diagnosis(
        "no-line-info",
        Severity.WARNING,
        f"the cubin of {kernel} has no .debug_line section: no source line can be recovered "
        f"for any instruction{how}",
        _LINEINFO_REMEDY,
    )


def line_info_removed(kernel: str, ptxas_options: str) -> Diagnosis:
    """The options ask for line info, yet `.debug_line` is gone: removed after compiling."""
    return Diagnosis(
        "line-info-removed",
        Severity.WARNING,
        f"the cubin of {kernel} was compiled with -lineinfo (ptxas options: "
        f"{ptxas_options.strip()}) but has no .debug_line section: the line info was removed "
        "after compilation",
        "look for a build or packaging step that strips or repacks device code (a strip or "
        "objcopy of the cubin, a fatbinary repack, nvprune); rebuilding with -lineinfo alone "
        "will not bring the lines back",
    )


def device_debug_build(kernel: str, ptxas_options: str) -> Diagnosis:
    """A `-G` build: optimizations off, so the fault may not occur in the release build."""
    return Diagnosis(
        "device-debug-build",
        Severity.INFO,
        f"the cubin of {kernel} is a device-debug (-G) build (ptxas options: "
        f"{ptxas_options.strip()}): optimizations are off, so code, timing and register "
        "use differ from an optimized build",
        "confirm the fault also happens in the optimized build; use -lineinfo there",
    )


def pc_outside_modules(pc: int) -> Diagnosis:
    return Diagnosis(
        "pc-outside-modules",
        Severity.ERROR,
        f"the error PC 0x{pc:x} lies in no code section of any relocated image in the dump",
        "the PC may be in driver code (e.g. the assert handler) or in a module the dump did not "
        "capture; `postmortem extract` lists the modules the dump holds",
    )


def images_missing(module_handles: Sequence[int | None]) -> Diagnosis:
    """The modules whose relocated image the dump lacks (one diagnosis for all of them)."""
    first = module_handles[0]
    module = "a module" if first is None else f"module 0x{first:x}"
    if len(module_handles) > 1:
        module = f"{len(module_handles):,} modules ({module} first)"
    verb = "have" if len(module_handles) > 1 else "has"
    return Diagnosis(
        "image-missing",
        Severity.ERROR,
        f"{module} {verb} no relocated image in the dump",
        "the dump was written without the module's ELF image; check "
        "CUDA_COREDUMP_GENERATION_FLAGS and write the dump again",
    )


def lane_offset_mismatch(lane_offset: int, section_offset: int) -> Diagnosis:
    return Diagnosis(
        "lane-offset-mismatch",
        Severity.WARNING,
        f"the lane's function-relative PC (0x{lane_offset:x}) differs from the error PC's "
        f"offset in its code section (0x{section_offset:x})",
        "the lane may be inside a called device function; the error PC is used",
    )


def imprecise_pc(opcode: str, exception: str, nearest: str | None) -> Diagnosis:
    hint = f"; the nearest memory instruction before it is {nearest}" if nearest else ""
    return Diagnosis(
        "imprecise-pc",
        Severity.WARNING,
        f"{exception} reported at {opcode}, which does not access memory: the PC may be "
        f"imprecise{hint}",
        "errors can be reported a few instructions after the access; rerun under "
        "compute-sanitizer on a GPU for the exact instruction",
    )


def tool_missing(tool: str, install: str) -> Diagnosis:
    return Diagnosis(
        missing_code(tool),
        Severity.WARNING,
        f"{tool} is not installed: no SASS and no source lines, native facts only",
        install,
    )


def tool_failed(tool: str, detail: str) -> Diagnosis:
    return Diagnosis(failed_code(tool), Severity.ERROR, f"{tool} failed: {detail}", None)


def image_refused(tool: str, refusals: Sequence[tuple[str, str]]) -> Diagnosis:
    """`tool` ran on every copy of a module's image and refused each.

    Args:
        tool: The tool ("nvdisasm").
        refusals: (which copy, the tool's message) for every copy tried, in order.
    """
    first = refusals[0][1] if refusals else "no message"
    others = [
        f"{copy} ({'the same message' if message == first else message})"
        for copy, message in refusals[1:]
    ]
    tried = f"; also refused: {'; '.join(others)}" if others else ""
    return Diagnosis(
        failed_code(tool),
        Severity.ERROR,
        f"{tool} refused the image: {first}{tried}",
        "the module's image in the dump may be damaged or written in a form this "
        f"{tool} does not read; `postmortem extract` writes it out for a closer look",
    )
