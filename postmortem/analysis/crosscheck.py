"""cuda-gdb as a second opinion: its answers compared with the native reader's, fact by fact.

Each check names a fact (the exception, the error PC, the faulting lane, `kernel+offset`,
the kernels, the warps of the focus SM, the lanes of the focus warp), what the native
reader says, what cuda-gdb says, and whether they agree. A fact cuda-gdb did not state
(a table it refused, output we could not parse) is "not compared", never a disagreement.

cuda-gdb 11.8 steps through the SM, CTA, warp and lane tables with its own compiled row
sizes (the r346/r400 layout) whatever `sh_entsize` says (toolchain.md). When a dump's rows
are longer, its table answers cannot be trusted, and the cross-check says so rather than
report a disagreement that is cuda-gdb's misreading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import TypeVar

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.fault.inline import CUDA_GDB, FrameName
from postmortem.codemap import CodeMap
from postmortem.coredump import Coredump
from postmortem.coredump import tables as t
from postmortem.cubin.inspect import function_label, function_name
from postmortem.cubin.sass import SourceFrame
from postmortem.demangle import demangle, without_parameters
from postmortem.exceptions import describe_exception
from postmortem.findings import Finding, FindingCode
from postmortem.gdb.banner import parse_exception_banner
from postmortem.gdb.location import parse_backtrace, parse_info_symbol
from postmortem.gdb.model import CudaException, Frame, Parsed, Unparsed
from postmortem.gdb.parse import parse_kernels, parse_lanes, parse_warps
from postmortem.gdb.run import GdbSession
from postmortem.model import Fault, FaultSource, Warp
from postmortem.spelling import dim3_text
from postmortem.summary import DumpSummary, summarize

T = TypeVar("T")

# Known failures the driver already worked around by its retry (gdb/run.py).
_HANDLED_BY_RETRY = frozenset(
    {FindingCode.GDB_PYTHON_UNWINDER_FAULT, FindingCode.GDB_NO_PYTHON_SUPPORT_FILES}
)
# Known failures after which cuda-gdb's tables say nothing about the dump.
_REFUSED = frozenset(
    {
        FindingCode.GDB_COREDUMP_REFUSED,
        FindingCode.GDB_NOT_A_COREDUMP,
        FindingCode.GDB_CUBIN_ABI_TOO_NEW,
    }
)

# Row sizes cuda-gdb 11.8 assumes (toolchain.md): longer rows are misread by it.
_OLD_ROW_SIZES = {t.SM_TABLE: 8, t.CTA_TABLE: 24, t.WP_TABLE: 32, t.LN_TABLE: 48}
_OLD_ROW_TABLES = {t.LAYOUTS[kind].table: size for kind, size in _OLD_ROW_SIZES.items()}
# The newest cubin ELF ABI cuda-gdb 11 reads: v8 (CUDA 13) stops it ("CUDA ELF Image contains
# unknown ABI version: 8", toolchain.md).
_OLD_ABI = 7


def gdb_cannot_read(version: str | None, summary: DumpSummary) -> str | None:
    """Why the cuda-gdb of `version` cannot read this dump, known before running it; None when
    nothing recorded says so.

    Only what cuda-gdb 11.8 was seen to do is used (toolchain.md, and the dumps of
    fixtures/foreign/ and fixtures/dumps/ run through it by tests/tools/test_referee.py):
    it stops at a CUDA ELF ABI v8 cubin, misreads the SM, CTA, warp and lane tables when
    their rows are longer than the r346/r400 sizes, and refuses a dump whose lanes record
    exception 1. Of newer versions nothing is known that would skip them.
    """
    major = _major(version)
    if major is None or major >= 12:
        return None
    named = f"cuda-gdb {version}"
    abis = sorted({m.abi_version or 0 for m in summary.modules} - set(range(_OLD_ABI + 1)))
    if abis:
        return (
            f"{named} not run: it reads CUDA ELF ABI v{_OLD_ABI} cubins only, and this dump's "
            f"are v{abis[-1]} (CUDA 13); it would stop at the first. Use cuda-gdb 13"
        )
    longer = [
        layout.table
        for layout in summary.layouts
        if layout.row_size > _OLD_ROW_TABLES.get(layout.table, layout.row_size)
    ]
    if longer:
        return (
            f"{named} not run: the {', '.join(longer)} rows are longer than it reads them "
            "(r346/r400 sizes), so its answers would not be this dump's; a newer driver wrote "
            "it: use a cuda-gdb at least as new"
        )
    if any(f.exception == 1 and f.source is FaultSource.LANE for f in summary.faults):
        return (
            f"{named} not run: it refuses a dump whose lanes record exception 1 "
            "(LANE_ILLEGAL_ADDRESS), asking for a memcheck address the dump does not hold"
        )
    return None


def _major(version: str | None) -> int | None:
    head = (version or "").split(".", 1)[0]
    return int(head) if head.isdigit() else None


@dataclass(frozen=True, slots=True)
class Check:
    """One fact, as each side states it."""

    fact: str
    native: str
    cuda_gdb: str | None
    """None when cuda-gdb did not state it."""

    @property
    def agrees(self) -> bool | None:
        return None if self.cuda_gdb is None else self.native == self.cuda_gdb


@dataclass(frozen=True, slots=True)
class CrossCheck:
    """The comparison of one cuda-gdb session with the native reader."""

    version: str | None
    checks: tuple[Check, ...]
    opened: bool
    """False when cuda-gdb would not open the dump (its tables then say nothing)."""
    longer_rows: tuple[str, ...]
    """Tables whose rows are longer than cuda-gdb 11.8 reads them (its tables may be wrong)."""
    notes: tuple[Finding, ...]
    """Known cuda-gdb failures seen in the session (those its retry cured left out)."""
    backtrace: tuple[Frame, ...] = ()
    """cuda-gdb's `bt` of the focus lane (its unwinding and inline function names)."""
    seconds: float | None = None
    """How long cuda-gdb ran (both runs when it was retried)."""
    peak_rss_kib: int | None = None
    """cuda-gdb's peak resident memory, in KiB."""

    @property
    def disagreements(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.agrees is False)

    @property
    def agreements(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.agrees)


def crosscheck(
    core: Coredump,
    session: GdbSession,
    summary: DumpSummary | None = None,
    code_map: CodeMap | None = None,
) -> CrossCheck:
    """Compare what cuda-gdb said in `session` with what the native reader reads in `core`.

    `summary` and `code_map` are the native reader's summary and code map of `core` when the
    caller has them already (images are read once).
    """
    code_map = code_map or CodeMap(core)
    summary = summary or summarize(core, code_map)
    banner = _value(parse_exception_banner(session.banner))
    opened = not _REFUSED & {d.code for d in session.diagnoses}
    faults = [f for f in summary.faults if f.source is FaultSource.LANE]
    checks: list[Check] = []
    if faults:
        checks += _banner_checks(faults, banner)
        checks.append(_symbol_check(code_map, faults[0], session))
    checks.append(_kernels_check(summary, session))
    checks += _focus_table_checks(core, session)
    if not opened:  # what it printed after refusing the dump says nothing about the dump
        checks = [Check(c.fact, c.native, None) for c in checks]
    handled = _HANDLED_BY_RETRY if session.retried else frozenset()
    notes = tuple(d for d in session.diagnoses if d.code not in handled)
    frames = _value(parse_backtrace(session.output("bt") or "")) if opened else None
    return CrossCheck(
        session.version, tuple(checks), opened, _longer_rows(core), notes, frames or (),
        session.seconds, session.peak_rss_kib,
    )  # fmt: skip


def _value(result: Parsed[T] | Unparsed) -> T | None:
    return result.value if isinstance(result, Parsed) else None


def _banner_checks(faults: Sequence[Fault], banner: CudaException | None) -> list[Check]:
    first = faults[0]
    said = banner.name if banner else None
    if banner is not None and banner.assertion_failed:
        said = describe_exception(12)  # 11.8 prints "Assertion failed." for WARP_ASSERT
    pc = banner.error_pc if banner else None
    focus = banner.focus if banner else None
    faulting = {_coords(f.block_idx, f.thread_idx, f.device_index, f.sm_id, f.warp_id, f.lane)
                for f in faults}  # fmt: skip
    focus_text = None
    if focus is not None:
        focus_text = _coords(
            focus.block, focus.thread, focus.device, focus.sm, focus.warp, focus.lane
        )
    checks = [
        Check("exception", describe_exception(first.exception or 0), said),
        Check("focus is a faulting lane", "yes", None if focus_text is None else (
            "yes" if focus_text in faulting else f"no: {focus_text}"
        )),
    ]  # fmt: skip
    if first.exception != 12:  # 11.8 prints no PC in its assertion banner
        checks.insert(1, Check("error PC", _hex(first.error_pc), None if pc is None else _hex(pc)))
    return checks


SYMBOL_FACT = "kernel + offset of the error PC"


def _symbol_check(code_map: CodeMap, fault: Fault, session: GdbSession) -> Check:
    # cuda-gdb names the innermost function symbol holding the PC (a called function's
    # clone, with its own offset), as `function_label` does.
    location, pc = fault.location, fault.error_pc
    native = "outside every module"
    if location is not None and location.function is not None:
        summary = code_map.summary(location.module) if pc is not None else None
        inner = summary.find_function(pc) if summary and pc is not None else None
        native = (
            f"{function_label(inner.name)} + {pc - inner.address}"
            if inner is not None and pc is not None
            else f"{demangle(location.function)} + {location.offset}"
        )
    symbol = _value(parse_info_symbol(session.output("info symbol $errorpc") or ""))
    said = None if symbol is None else f"{symbol.symbol} + {symbol.offset}"
    return Check(SYMBOL_FACT, native, said)


def _kernels_check(summary: DumpSummary, session: GdbSession) -> Check:
    native = sorted(
        f"grid {x.grid.grid_id} {without_parameters(demangle(x.kernel or '?'))}"
        f"<<<{dim3_text(x.grid.grid_dim)},{dim3_text(x.grid.block_dim)}>>>"
        for x in summary.launches
    )
    rows = _value(parse_kernels(session.output("info cuda kernels") or ""))
    said = None if rows is None else sorted(
        f"grid {r.grid} {r.name}<<<{dim3_text(r.grid_dim)},{dim3_text(r.block_dim)}>>>"
        for r in rows
    )  # fmt: skip
    return Check("kernels", "; ".join(native), None if said is None else "; ".join(said))


def _focus_table_checks(core: Coredump, session: GdbSession) -> list[Check]:
    lanes = _value(parse_lanes(session.output("info cuda lanes") or ""))
    current = next((r for r in lanes or () if r.current), None)
    if current is None or current.device is None:
        return []
    device, sm_id, warp_id = current.device, current.sm, current.warp
    warps = [w for w in core.iter_warps(core.device(device)) if w.sm_id == sm_id]
    native_warps = sorted(_warp_row(core, w) for w in warps)
    rows = _value(parse_warps(session.output("info cuda warps") or ""))
    said_warps = None if rows is None else sorted(
        f"warp {r.warp} mask 0x{r.active_lanes_mask or 0:08x} pc 0x{r.active_pc or 0:x}"
        for r in rows
    )  # fmt: skip
    warp = next((w for w in warps if w.warp_id == warp_id), None)
    native_lanes = [] if warp is None else sorted(
        f"lane {x.lane} pc 0x{x.function_offset or 0:x} thread {dim3_text(x.thread_idx)}"
        for x in core.lanes(warp)
        if x.lane is not None and (warp.active_lanes_mask or 0) >> x.lane & 1
    )  # fmt: skip
    said_lanes = sorted(
        f"lane {r.lane} pc 0x{r.pc or 0:x} thread {dim3_text(r.thread_idx)}" for r in lanes or ()
    )
    return [
        Check(f"warps of device {device} SM {sm_id}", _join(native_warps), _maybe(said_warps)),
        Check(f"lanes of SM {sm_id} warp {warp_id}", _join(native_lanes), _join(said_lanes)),
    ]


def _warp_row(core: Coredump, warp: Warp) -> str:
    lanes = {x.lane: x for x in core.lanes(warp) if x.lane is not None}
    mask = warp.active_lanes_mask or 0
    first = min((i for i in lanes if mask >> i & 1), default=None)
    pc = (lanes[first].function_offset or 0) if first is not None else 0
    return f"warp {warp.warp_id} mask 0x{mask:08x} pc 0x{pc:x}"


def _longer_rows(core: Coredump) -> tuple[str, ...]:
    longer = []
    for section_type, size in _OLD_ROW_SIZES.items():
        sections = core.tables.of_type(section_type)
        if len(sections) and int(core.sections.entsize[sections[0]]) > size:
            longer.append(t.LAYOUTS[section_type].table)
    return tuple(longer)


def _coords(
    block: tuple[int, int, int] | None, thread: tuple[int, int, int] | None, *rest: object
) -> str:
    # block (5,0,0) thread (64,0,0) device 0 sm 3 warp 2 lane 0, as the reports spell them
    device, sm, warp, lane = (("?" if p is None else p) for p in rest)
    where = f"block {dim3_text(block)} thread {dim3_text(thread)}"
    return f"{where} device {device} sm {sm} warp {warp} lane {lane}"


def _hex(value: int | None) -> str:
    return "none" if value is None else f"0x{value:x}"


def _join(items: Sequence[str]) -> str:
    return "; ".join(items)


def _maybe(items: Sequence[str] | None) -> str | None:
    return None if items is None else _join(items)


def named_by_gdb(
    sites: Sequence[FaultSite], check: CrossCheck | None
) -> tuple[tuple[FaultSite, ...], CrossCheck | None]:
    """The sites and the cross-check, with cuda-gdb's function name put to use.

    cuda-gdb's `bt` says `at F:L in X inlined from …` for one inlined function X, at the
    focus lane (a lane of the first site). Where the line table has named the frame at F:L,
    X becomes a check of that name; where nothing has (no line table), X names that frame.
    """
    if check is None or not check.backtrace or not sites:
        return tuple(sites), check
    top, first = check.backtrace[0], sites[0]
    if not first.chain:
        return tuple(sites), _with_call_stack(first, check)
    depth = next(
        (
            depth for depth, frame in enumerate(first.chain)
            if top.line == frame.line
            and PurePosixPath(top.file or "").name == PurePosixPath(frame.file).name
        ),
        None,
    )  # fmt: skip
    check = _with_call_stack(first, check)
    if depth is None or not top.inline_function:
        return tuple(sites), check
    names = list(first.frame_names or (None,) * len(first.chain))
    known = names[depth]
    if known is None:
        names[depth] = FrameName(top.inline_function, CUDA_GDB)
        return (replace(first, frame_names=tuple(names)), *sites[1:]), check
    frame = first.chain[depth]
    agreement = Check(
        f"function at {PurePosixPath(frame.file).name}:{frame.line}",
        known.demangled, demangle(top.inline_function),
    )  # fmt: skip
    return tuple(sites), replace(check, checks=(*check.checks, agreement))


def _with_call_stack(site: FaultSite, check: CrossCheck) -> CrossCheck:
    """The call stack checked against cuda-gdb's `bt` where the PC lies in a called
    function."""
    frames = site.calls.frames if site.calls else ()
    inner = frames[0] if frames else None
    if inner is None or inner.function is None or not site.calls or not site.calls.is_called:
        return check
    checks = list(check.checks)
    ours = " < ".join(_frame_key(f.function.name if f.function else "?", f.chain) for f in frames)
    theirs = " < ".join(
        _frame_key(f.function, (SourceFrame(f.file, f.line),) if f.file and f.line else ())
        for f in check.backtrace
    )
    checks.append(Check("call stack (function at file:line)", ours, theirs))
    return replace(check, checks=tuple(checks))


def _frame_key(function: str, chain: tuple[SourceFrame, ...]) -> str:
    # Both sides reduced to the function's base name and the innermost line: cuda-gdb
    # prints a kernel frame as `k<<<…>>>`, a clone as `f(…) [clone k(…)]`.
    name = without_parameters(function_name(function).split(" [clone ", 1)[0])
    where = f"{PurePosixPath(chain[0].file).name}:{chain[0].line}" if chain else "?"
    return f"{name} at {where}"
