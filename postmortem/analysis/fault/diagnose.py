"""Diagnoses: what is wrong with the build, the PC or the tools, in plain words, and what
to do, each a `Finding` (postmortem/findings.py) with a stable code.
"""

from __future__ import annotations

from collections.abc import Sequence

from postmortem.cubin.sass import SassInstruction
from postmortem.findings import Finding, FindingCode, Severity

_LINEINFO_REMEDY = (
    "rebuild with -lineinfo; for builds you do not control (PyTorch extensions, vLLM, "
    "FlashAttention) set NVCC_PREPEND_FLAGS='-lineinfo', and turn the compiler cache off "
    "(CCACHE_DISABLE=1): ccache can hand back an object compiled without the flag and "
    "the build still succeeds"
)


def no_line_info(kernel: str, ptxas_options: str | None = None) -> Finding:
    """No `.debug_line`, and the recorded ptxas options (if any) lack -lineinfo."""
    how = (
        f"; it was compiled without -lineinfo (ptxas options: {ptxas_options.strip()})"
        if ptxas_options is not None
        else "; the cubin records no compiler options (no .note.nv.tkinfo), so whether it "
        "was compiled without -lineinfo or stripped later cannot be told"
    )
    return Finding(
        FindingCode.NO_LINE_INFO,
        Severity.WARNING,
        f"the cubin of {kernel} has no .debug_line section: no source line can be recovered "
        f"for any instruction{how}",
        remedy=_LINEINFO_REMEDY,
    )


def line_info_removed(kernel: str, ptxas_options: str) -> Finding:
    """The options ask for line info, yet `.debug_line` is gone: removed after compiling."""
    return Finding(
        FindingCode.LINE_INFO_REMOVED,
        Severity.WARNING,
        f"the cubin of {kernel} was compiled with -lineinfo (ptxas options: "
        f"{ptxas_options.strip()}) but has no .debug_line section: the line info was removed "
        "after compilation",
        remedy="look for a build or packaging step that strips or repacks device code (a "
        "strip or objcopy of the cubin, a fatbinary repack, nvprune); rebuilding with "
        "-lineinfo alone will not bring the lines back",
    )


def device_debug_build(kernel: str, ptxas_options: str) -> Finding:
    """A `-G` build: optimizations off, so the fault may not occur in the release build."""
    return Finding(
        FindingCode.DEVICE_DEBUG_BUILD,
        Severity.INFO,
        f"the cubin of {kernel} is a device-debug (-G) build (ptxas options: "
        f"{ptxas_options.strip()}): optimizations are off, so code, timing and register "
        "use differ from an optimized build",
        remedy="confirm the fault also happens in the optimized build; use -lineinfo there",
    )


def pc_outside_modules(pc: int) -> Finding:
    return Finding(
        FindingCode.PC_OUTSIDE_MODULES,
        Severity.ERROR,
        f"the error PC 0x{pc:x} lies in no code section of any relocated image in the dump",
        remedy="the PC may be in driver code (e.g. the assert handler) or in a module the dump "
        "did not capture; `postmortem extract` lists the modules the dump holds",
    )


def images_missing(module_handles: Sequence[int | None]) -> Finding:
    """The modules whose relocated image the dump lacks (one diagnosis for all of them)."""
    first = module_handles[0]
    module = "a module" if first is None else f"module 0x{first:x}"
    if len(module_handles) > 1:
        module = f"{len(module_handles):,} modules ({module} first)"
    verb = "have" if len(module_handles) > 1 else "has"
    return Finding(
        FindingCode.IMAGE_MISSING,
        Severity.ERROR,
        f"{module} {verb} no relocated image in the dump",
        remedy="the dump was written without the module's ELF image; check "
        "CUDA_COREDUMP_GENERATION_FLAGS and write the dump again",
    )


def lane_offset_mismatch(lane_offset: int, section_offset: int) -> Finding:
    return Finding(
        FindingCode.LANE_OFFSET_MISMATCH,
        Severity.WARNING,
        f"the lane's function-relative PC (0x{lane_offset:x}) differs from the error PC's "
        f"offset in its code section (0x{section_offset:x})",
        remedy="the lane may be inside a called device function, or have run on after the "
        "fault; the error PC is used",
    )


def imprecise_pc(opcode: str, exception: str, nearest: str | None) -> Finding:
    hint = f"; the nearest memory instruction before it is {nearest}" if nearest else ""
    return Finding(
        FindingCode.IMPRECISE_PC,
        Severity.WARNING,
        f"{exception} reported at {opcode}, which does not access memory: the PC may be "
        f"imprecise{hint}",
        remedy="errors can be reported a few instructions after the access; rerun under "
        "compute-sanitizer on a GPU for the exact instruction",
    )


def assert_return_address(offset: int, call: SassInstruction) -> Finding:
    """A failed assert's lane is inside the `__assertfail` call: its PC is the return address."""
    return Finding(
        FindingCode.ASSERT_IN_CALL,
        Severity.INFO,
        f"the asserting lane is inside the assert's call ({call.text} at /*{call.offset:04x}*/): "
        f"its PC, +0x{offset:x}, is the call's return address; the call is shown",
    )


def nvdisasm_missing(install: str) -> Finding:
    """No nvdisasm was found: no SASS, no inline chain."""
    return Finding(
        FindingCode.NVDISASM_MISSING,
        Severity.WARNING,
        "nvdisasm is not installed: no SASS instructions; native facts and the cubin's line "
        "table only",
        remedy=install,
    )


def nvdisasm_failed(detail: str) -> Finding:
    """nvdisasm ran and gave no listing (timed out, killed, too much output)."""
    return Finding(FindingCode.NVDISASM_FAILED, Severity.ERROR, f"nvdisasm failed: {detail}")


def nvdisasm_refused(refusals: Sequence[tuple[str, str]]) -> Finding:
    """nvdisasm ran on every copy of a module's image and refused each.

    Args:
        refusals: (which copy, nvdisasm's message) for every copy tried, in order.
    """
    first = refusals[0][1] if refusals else "no message"
    others = [
        f"{copy} ({'the same message' if message == first else message})"
        for copy, message in refusals[1:]
    ]
    tried = f"; also refused: {'; '.join(others)}" if others else ""
    return Finding(
        FindingCode.NVDISASM_FAILED,
        Severity.ERROR,
        f"nvdisasm refused the image: {first}{tried}",
        evidence=tuple(f"{copy}: {message}" for copy, message in refusals),
        remedy="the module's image in the dump may be damaged or written in a form this "
        "nvdisasm does not read; `postmortem extract` writes it out for a closer look",
    )
