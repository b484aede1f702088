"""The terminal summary of `postmortem analyze`: the verdict first, then the evidence."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from postmortem.analysis.analyze import Analysis
from postmortem.analysis.fault import FaultSite
from postmortem.demangle import demangle, without_parameters
from postmortem.model import Fault, describe_exception


def render_analysis_text(analysis: Analysis) -> str:
    """Every fault site (verdict, SASS window, inline chain, diagnoses), then the cross-check."""
    path, sites = analysis.path, analysis.sites
    if not sites:
        blocks = [
            f"{path}: no exception recorded: every warp was live (a hang or a user-triggered "
            "dump); `postmortem info` lists the grids and warps"
        ]
    else:
        innermost = _innermost_function(analysis)
        blocks = [
            _site(path, site, number, len(sites), innermost) for number, site in enumerate(sites, 1)
        ]
    blocks.append("\n".join(_crosscheck(analysis)))
    return "\n\n".join(blocks) + "\n"


def _crosscheck(analysis: Analysis) -> list[str]:
    check = analysis.crosscheck
    if check is None:
        return [f"cross-check: {analysis.gdb_note}"]
    version = check.version or "version unknown"
    if not check.opened:
        lines = [f"cross-check: cuda-gdb {version} could not read this dump; native facts stand"]
        lines += [f"  {note}" for note in check.notes]
        if check.longer_rows:
            lines.append(
                f"  the {', '.join(check.longer_rows)} rows are longer than cuda-gdb 11.8 reads "
                "them: a newer driver wrote this dump; use a cuda-gdb at least as new as it"
            )
        return lines
    agreed = ", ".join(c.fact for c in check.agreements) or "nothing"
    lines = [f"cross-check with cuda-gdb {version}: agrees on {agreed}"]
    for c in check.disagreements:
        lines.append(f"  DISAGREES on {c.fact}: native reader: {c.native}; cuda-gdb: {c.cuda_gdb}")
    if check.disagreements and check.longer_rows:
        lines.append(
            f"  the {', '.join(check.longer_rows)} rows are longer than cuda-gdb 11.8 reads them; "
            "its table answers may be misread, the native reader's stand"
        )
    lines += [f"  note: {note}" for note in check.notes]
    for frame in check.backtrace:
        where = f" at {frame.file}:{frame.line}" if frame.file else ""
        inlined = ""
        if frame.inline_function:
            inlined = f" in {demangle(frame.inline_function)}"
            if frame.inlined_from_file:
                inlined += f" inlined from {frame.inlined_from_file}:{frame.inlined_from_line}"
        lines.append(f"  cuda-gdb bt #{frame.level} {frame.function}{where}{inlined}")
    return lines


def _site(path: Path, site: FaultSite, number: int, total: int, innermost: str | None) -> str:
    lines = _verdict(path, site, number, total)
    lines += _window(site)
    lines += _chain(site, innermost if number == 1 else None)
    lines += _diagnoses(site)
    return "\n".join(lines)


def _verdict(path: Path, site: FaultSite, number: int, total: int) -> list[str]:
    kernel = site.function.demangled if site.function else "an unknown function"
    name = "an exception the dump does not name"
    if site.exception is not None:
        name = f"{describe_exception(site.exception)} (exception {site.exception})"
    prefix = f"[{number}/{total}] " if total > 1 else ""
    lines = [f"{prefix}{path}: {name} in {kernel}"]
    if site.error_pc is not None:
        where = f"  at pc 0x{site.error_pc:x}"
        if site.function is not None and site.offset is not None:
            where += f" = {without_parameters(site.function.demangled)}+0x{site.offset:x}"
        if site.module_handle is not None:
            where += f", module 0x{site.module_handle:x}"
        lines.append(where)
    lines.append("  " + _who(site.faults))
    if site.instruction is not None:
        lines.append(f"  instruction: {site.instruction.text}")
    return lines


def _who(faults: Sequence[Fault]) -> str:
    lanes = [f for f in faults if f.lane is not None]
    first = faults[0]
    if not lanes:
        return (
            f"reported by the {first.source.value} row: "
            f"device {first.device_index}, sm {first.sm_id}"
        )
    warps = {(f.device_index, f.sm_id, f.warp_id) for f in lanes}
    head = lanes[0]
    block = "({},{},{})".format(*head.block_idx) if head.block_idx else "?"
    thread = "({},{},{})".format(*head.thread_idx) if head.thread_idx else "?"
    plural = "s" if len(lanes) > 1 else ""
    return (
        f"{len(lanes)} lane{plural} in {len(warps)} warp{'s' if len(warps) > 1 else ''}; first: "
        f"block {block} thread {thread}, device {head.device_index} sm {head.sm_id} "
        f"warp {head.warp_id} lane {head.lane}"
    )


def _window(site: FaultSite) -> list[str]:
    if not site.window:
        return []
    tool = site.disassembly.tool_version if site.disassembly else None
    lines = ["", f"SASS (nvdisasm {tool or 'version unknown'}):"]
    for instruction in site.window:
        mark = "-->" if instruction.offset == site.offset else "   "
        lines.append(f"  {mark} /*{instruction.offset:04x}*/  {instruction.text}")
    return lines


def _innermost_function(analysis: Analysis) -> str | None:
    """The function cuda-gdb names at the innermost frame (`in X inlined from …`)."""
    check, sites = analysis.crosscheck, analysis.sites
    if check is None or not check.backtrace or not sites or not sites[0].chain:
        return None
    top, frame = check.backtrace[0], sites[0].chain[0]
    same_place = top.line == frame.line and PurePosixPath(top.file or "").name == (
        PurePosixPath(frame.file).name
    )
    return demangle(top.inline_function) if same_place and top.inline_function else None


def _chain(site: FaultSite, innermost: str | None) -> list[str]:
    if not site.chain:
        return []
    lines = ["", "inline chain at the fault, innermost first:"]
    for depth, quoted in enumerate(site.quoted or ()):
        frame = quoted.frame
        named = f"  in {innermost} (from cuda-gdb)" if depth == 0 and innermost else ""
        lines.append(f"  #{depth} {frame.file}:{frame.line}{named}")
        if quoted.text is not None:
            lines.append(f"       {quoted.text.strip()}")
    missing = sum(1 for q in site.quoted if q.text is None)
    if missing:
        lines.append(
            f"  ({missing} of {len(site.quoted)} source lines not found: pass --source-dir DIR, "
            "and --map-path OLD=NEW for build-machine paths)"
        )
    return lines


def _diagnoses(site: FaultSite) -> list[str]:
    lines = []
    for note in site.diagnoses:
        lines += ["", f"{note.severity.value}: {note.message}"]
        if note.remedy:
            lines.append(f"  what to do: {note.remedy}")
    return lines
