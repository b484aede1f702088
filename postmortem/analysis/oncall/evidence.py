"""The parts of an on-call summary (`postmortem.analysis.oncall.summary`), each read off the
analysis: the best guess, what was ruled out, and the next step, every statement with its source."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from postmortem.analysis.analyze import Analysis
from postmortem.analysis.fault.calls import CallStack
from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.fault.inline import FrameName
from postmortem.analysis.fault.opclass import is_memory_access
from postmortem.analysis.fault.source import QuotedLine
from postmortem.analysis.hang.hang import StuckGroup
from postmortem.analysis.provenance import BuildInfo
from postmortem.cubin.sass import SourceFrame
from postmortem.demangle import brief_name, heading_name
from postmortem.exceptions import is_memory_exception
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.salvage import lost_rows

if TYPE_CHECKING:
    from postmortem.analysis.crosscheck import CrossCheck

NATIVE = "native reader"
NVDISASM = "nvdisasm"
FORENSICS = "forensics: the faulting lanes' registers"
BUILD = "build notes: .note.nv.tkinfo"
CUDA_GDB = "cuda-gdb cross-check"

# The findings whose remedy is a next step, most pressing first.
_STEP_CODES = (
    FindingCode.PC_OUTSIDE_MODULES,
    FindingCode.IMAGE_MISSING,
    FindingCode.NO_LINE_INFO,
    FindingCode.LINE_INFO_REMOVED,
    FindingCode.NVDISASM_MISSING,
    FindingCode.NVDISASM_FAILED,
    FindingCode.IMPRECISE_PC,
)
# Address checks that, passed, exclude a cause, and the cause they exclude.
_EXCLUDES = {
    "global-segment": "not an unmapped address",
    "shared-size": "not past the shared memory window",
    "local-size": "not past the local memory window",
}
_CAPTURE_AGAIN = "then capture again with `postmortem capture -- CMD`"


@dataclass(frozen=True, slots=True)
class Statement:
    """One claim of an on-call summary and what supports it."""

    text: str
    source: str
    """Where it came from: the native reader, nvdisasm, the line table, forensics, the build
    notes, the cuda-gdb cross-check, the hang analysis, or a finding's code."""


@dataclass(frozen=True, slots=True)
class BestGuess:
    """Where the problem most likely is, as far down as the evidence goes."""

    kernel: Statement | None
    """The kernel and the offset of the PC in it."""
    instruction: Statement | None
    """The SASS instruction at the PC."""
    frame: Statement | None
    """The innermost frame of the inline chain: file:line in its function."""
    source_line: Statement | None
    """The text of that line, when the source was found."""
    address: Statement | None
    """The faulting address, and the kernel argument it is attributed to."""
    unknown: tuple[str, ...] = ()
    """What the guess lacks, and why."""


def site_guess(analysis: Analysis, site: FaultSite) -> BestGuess:
    """The best guess at a fault site: kernel, instruction, frame, source line, address."""
    unknown: list[str] = []
    kernel = instruction = None
    if site.function is not None:
        kernel = _kernel_statement(site)
        if site.instruction is not None:
            instruction = Statement(site.instruction.text, NVDISASM)
        else:
            unknown.append(f"instruction: {_why_no_listing(analysis)}")
    else:
        why = next((d.message for d in site.diagnoses if d.severity is Severity.ERROR), None)
        unknown.append(f"kernel: {why or 'the dump names no error PC'}")
    build = _build_of(analysis, site.function.name if site.function else None)
    no_chain = _why_no_chain(site.has_line_info, build)
    frame, line = _chain_guess(site.chain, site.frame_names, site.quoted, no_chain, unknown)
    return BestGuess(
        kernel, instruction, frame, line, _address_guess(site, unknown), tuple(unknown)
    )


def _kernel_statement(site: FaultSite) -> Statement:
    # A PC in a called function names that function, its offset and who called it.
    assert site.function is not None
    called = _called_statement(site.calls, f"{NATIVE}: error PC") if site.calls else None
    if called is None:
        where = f" at +0x{site.offset:x}" if site.offset is not None else ""
        return Statement(f"{heading_name(site.function.name)}{where}", f"{NATIVE}: error PC")
    return called


def _called_statement(stack: CallStack, basis: str) -> Statement | None:
    frames = stack.frames if stack.is_called else ()
    inner = frames[0] if frames else None
    if inner is None or inner.function is None or inner.offset is None:
        return None
    callers = " <- ".join(
        brief_name(f.function.demangled)
        + (f" ({f.chain[0].file}:{f.chain[0].line})"
                                                    if f.chain else "")
        for f in frames[1:] if f.function is not None
    )  # fmt: skip
    return Statement(
        f"{brief_name(inner.function.demangled)} at +0x{inner.offset:x}, called from {callers}",
        f"{basis} and the lane's backtrace rows",
    )


def group_guess(analysis: Analysis, group: StuckGroup | None) -> BestGuess | None:
    """The best guess at a group of stuck warps: its kernel, instruction, frame, line."""
    if group is None:
        return None
    unknown: list[str] = []
    name = heading_name(group.kernel) if group.kernel else "an unknown kernel"
    kernel = Statement(f"{name} at +0x{group.offset:x}", f"{NATIVE}: warp PCs")
    if group.calls is not None and group.calls.is_called:
        kernel = _called_statement(group.calls, f"{NATIVE}: warp PCs") or kernel
    instruction = None
    if group.instruction is not None:
        instruction = Statement(group.instruction.text, NVDISASM)
    else:
        unknown.append(f"instruction: {_why_no_listing(analysis)}")
    build = _build_of(analysis, group.kernel)
    no_chain = _why_no_chain(build.has_line_info if build else None, build)
    frame, line = _chain_guess(group.chain, group.frame_names, group.quoted, no_chain, unknown)
    return BestGuess(kernel, instruction, frame, line, None, tuple(unknown))


def group_signal(group: StuckGroup) -> Statement:
    """The most populous stuck group, as a signal."""
    kernel = brief_name(group.kernel) if group.kernel else "an unknown kernel"
    what = f": {group.instruction.text}" if group.instruction else ""
    return Statement(
        f"{group.lanes} lanes in {group.warps} warp{'s' if group.warps != 1 else ''} of "
        f"{kernel} sit at +0x{group.offset:x}{what}, the most populous PC",
        f"{NATIVE}: warp PCs",
    )


def no_exception(analysis: Analysis) -> Statement:
    """That no row records an exception, and how many warps are live."""
    warps = sum(k.warps for k in analysis.state)
    return Statement(
        f"no lane, warp or SM row records an exception; {warps} live "
        f"warp{'s' if warps != 1 else ''}",
        NATIVE,
    )


def _why_no_listing(analysis: Analysis) -> str:
    use = next((u for u in analysis.provenance if u.source == NVDISASM), None)
    return f"nvdisasm {use.note}" if use is not None and use.note else "no instruction listing"


def _build_of(analysis: Analysis, kernel: str | None) -> BuildInfo | None:
    if kernel is not None:
        found = next((b for b in analysis.builds if kernel in b.kernels), None)
        if found is not None:
            return found
    return analysis.builds[0] if analysis.builds else None


def _why_no_chain(has_line_info: bool | None, build: BuildInfo | None) -> str:
    if has_line_info is None:
        return "source line: the function holding the PC is unknown"
    if has_line_info:
        return "source line: no inline chain at this PC"
    toolkit = build.toolkit if build else None
    if toolkit is None or toolkit.options is None or toolkit.has_lineinfo_option is None:
        return (
            "source line: the cubin has no .debug_line, and no .note.nv.tkinfo to say how it "
            "was compiled"
        )
    options = " ".join(toolkit.options.split())
    if toolkit.has_lineinfo_option:
        return (
            f'source line: the cubin has no .debug_line, although its ptxas options "{options}" '
            "ask for -lineinfo: the line info was removed after compiling"
        )
    return (
        f'source line: the cubin has no .debug_line; its ptxas options "{options}" lack '
        "-lineinfo (if the build asked for -lineinfo, a compiler cache handed back an object "
        "compiled without it)"
    )


def _chain_guess(
    chain: Sequence[SourceFrame],
    names: Sequence[FrameName | None],
    quoted: Sequence[QuotedLine],
    no_chain: str,
    unknown: list[str],
) -> tuple[Statement | None, Statement | None]:
    """The innermost frame and its source line, or what is unknown about them."""
    if not chain:
        unknown.append(no_chain)
        return None, None
    top, name = chain[0], names[0] if names else None
    function = f" in {heading_name(name.demangled)}" if name else ""
    frame = Statement(f"{top.file}:{top.line}{function}", name.source if name else "line table")
    quote = quoted[0] if quoted else None
    if quote is None or quote.text is None:
        unknown.append(f"source text: {quote.reason if quote and quote.reason else 'not found'}")
        return frame, None
    return frame, Statement(quote.text.strip(), "source file")


def _address_guess(site: FaultSite, unknown: list[str]) -> Statement | None:
    fx = site.forensics
    if fx is None or fx.access is None:
        return None
    lane = next((lane for lane in fx.lanes if lane.address is not None), None)
    if lane is None or lane.address is None:
        why = fx.notes[0].message if fx.notes else "no lane's address could be computed"
        unknown.append(f"address: {why}")
        return None
    access = fx.access
    what = (
        f"{access.kind} at {access.space} offset"
        if access.space in ("shared", "local")
        else f"{access.space} {access.kind} at address"
    )
    culprit = fx.arguments.culprit if fx.arguments else None
    relation = (
        f" = {culprit.relation} ({fx.arguments.gist})"
        if culprit and fx.arguments and fx.arguments.gist
        else ""
    )
    return Statement(
        f"{what} 0x{lane.address:x} in the first of {len(fx.lanes)} {fx.lane_set}{relation}",
        FORENSICS,
    )


def site_ruled_out(site: FaultSite) -> list[Statement]:
    """What the fault site's evidence excludes: an imprecise PC, an address out of bounds,
    a stale object from a compiler cache."""
    found = []
    instruction = site.instruction
    imprecise = any(d.code is FindingCode.IMPRECISE_PC for d in site.diagnoses)
    if (
        instruction is not None and not imprecise and is_memory_exception(site.exception)
        and is_memory_access(instruction.base_opcode)
    ):  # fmt: skip
        found.append(
            Statement(
                f"not an imprecise PC: the instruction at the error PC, {instruction.text}, "
                "accesses memory",
                NVDISASM,
            )
        )
    checks = site.forensics.checks if site.forensics else ()
    found.extend(
        Statement(f"{_EXCLUDES[c.check]}: {c.message}", FORENSICS)
        for c in checks
        if c.verdict and c.check in _EXCLUDES
    )
    return found


def common_ruled_out(analysis: Analysis, site: FaultSite | None) -> tuple[Statement, ...]:
    """What any dump's analysis may exclude: a fault (for a dump with none), a stale
    compiler-cache object, a misreading of the dump, damage to it."""
    found = []
    if site is None and not analysis.summary.faults and not lost_rows(analysis.summary.findings):
        found.append(Statement("not a fault: no lane, warp or SM row records an exception", NATIVE))
    build = _build_of(analysis, site.function.name if site and site.function else None)
    stale = _not_stale(build) if build else None
    found.extend([stale] if stale else [])
    check = analysis.crosscheck
    if check is not None and check.opened and check.agreements and not check.disagreements:
        facts = [c.fact for c in check.agreements]
        shown = ", ".join(facts[:3]) + (", …" if len(facts) > 3 else "")
        found.append(
            Statement(
                f"not a misreading of the dump: {_cuda_gdb(check)} agrees on {len(facts)} "
                f"fact{'s' if len(facts) != 1 else ''} ({shown})",
                CUDA_GDB,
            )
        )
    if not analysis.summary.findings:
        found.append(
            Statement(
                "not a damaged dump: no section was set aside or cut short", f"{NATIVE}: salvage"
            )
        )
    return tuple(found)


def _not_stale(build: BuildInfo) -> Statement | None:
    toolkit = build.toolkit
    if toolkit is None or toolkit.options is None or not toolkit.has_lineinfo_option:
        return None
    options = " ".join(toolkit.options.split())
    if build.has_line_info:
        return Statement(
            "not a stale compiler-cache object built without -lineinfo: the cubin's tkinfo note "
            f'records the ptxas options "{options}", and its .debug_line is present',
            BUILD,
        )
    return Statement(
        f'not a stale compiler-cache object: the cubin\'s tkinfo note records "{options}", '
        "with -lineinfo; its line info was removed after compiling",
        BUILD,
    )


def cross_check_step(analysis: Analysis) -> Statement | None:
    """A disagreement with cuda-gdb comes first: it says one of the two readings is wrong."""
    check = analysis.crosscheck
    if check is None or not check.disagreements:
        return None
    facts = ", ".join(c.fact for c in check.disagreements)
    return Statement(
        f"{_cuda_gdb(check)} disagrees on {facts}: compare both readings by hand "
        f"(`postmortem debug {analysis.path}`) before trusting either",
        CUDA_GDB,
    )


def _cuda_gdb(check: CrossCheck) -> str:
    return f"cuda-gdb {check.version}" if check.version else "cuda-gdb"


def finding_step(diagnoses: Sequence[Finding], site: FaultSite | None = None) -> Statement | None:
    """The remedy of the most pressing finding that has one. Without line info, the argument
    the faulting address came from is where to look first: it needs no rebuild."""
    for code in _STEP_CODES:
        finding = next((d for d in diagnoses if d.code is code and d.remedy), None)
        if finding is None or finding.remedy is None:
            continue
        text = finding.remedy
        if code is FindingCode.NO_LINE_INFO:
            text = f"{text}; {_CAPTURE_AGAIN}"
        if code in (FindingCode.NO_LINE_INFO, FindingCode.LINE_INFO_REMOVED):
            text = _argument_first(site, text)
        return Statement(text, finding.code.value)
    return None


def _argument_first(site: FaultSite | None, remedy: str) -> str:
    arguments = site.forensics.arguments if site and site.forensics else None
    if arguments is None or arguments.culprit is None:
        return remedy
    culprit = arguments.culprit
    return (
        f"check how {culprit.label} is indexed: the faulting address is {culprit.relation} "
        f"({arguments.gist}); for the source line, {remedy}"
    )


def dump_step(analysis: Analysis) -> Statement | None:
    """The remedy of what the reader had to set aside (a partial dump)."""
    finding = next(
        (f for f in analysis.summary.findings if f.remedy and f.severity is not Severity.INFO),
        None,
    )
    return None if finding is None or finding.remedy is None else Statement(
        finding.remedy, finding.code.value
    )  # fmt: skip


def localized_step(site: FaultSite, is_assert: bool) -> Statement | None:
    """For a fault the evidence localizes: where to read, and how to confirm it."""
    if is_assert:
        return Statement(
            "read the assertion's message the process printed (file, line, condition); "
            "`postmortem analyze CORE --host-log LOG` shows it beside the dump's answer",
            "device-side assert: exception 12",
        )
    if not site.chain:
        return None
    top = site.chain[0]
    name = site.frame_names[0] if site.frame_names else None
    function = f" in {brief_name(name.demangled)}" if name else ""
    fx = site.forensics
    culprit = fx.arguments.culprit if fx and fx.arguments else None
    reached = f": the faulting access there reached {culprit.relation}" if culprit else ""
    confirm = (
        "; to confirm on a GPU, rerun the failing input under compute-sanitizer"
        if is_memory_exception(site.exception)
        else ""
    )
    return Statement(
        f"read {top.file}:{top.line}{function}{reached}{confirm}", "best guess: inline chain"
    )
