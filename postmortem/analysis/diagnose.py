"""Diagnoses: what is wrong with the build or the dump, in plain words, and what to do.

Each diagnosis has a stable `code` (for tests, scripts and grouping), a one-line
`message` that says what we saw, and a `remedy` that says what to do about it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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


def image_missing(module_handle: int) -> Diagnosis:
    return Diagnosis(
        "image-missing",
        Severity.ERROR,
        f"module 0x{module_handle:x} has no relocated image in the dump",
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
        f"{tool}-missing",
        Severity.WARNING,
        f"{tool} is not installed: no SASS and no source lines, native facts only",
        install,
    )


def tool_failed(tool: str, detail: str) -> Diagnosis:
    return Diagnosis(f"{tool}-failed", Severity.ERROR, f"{tool} failed: {detail}", None)
