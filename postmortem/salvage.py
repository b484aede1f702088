"""What reading the dump cost: the damage the reader worked around, as diagnoses.

A truncated, overlapping or badly linked section is set aside when the dump is opened
(`coredump/survey.py`), an image that is not a readable cubin when the code is mapped
(`CodeMap.unreadable`), a name whose string offset is bad when it is read. None of these
stops a report; each becomes one line saying what was lost.
"""

from __future__ import annotations

from postmortem.codemap import CodeMap
from postmortem.coredump import tables as t
from postmortem.coredump.reader import Coredump
from postmortem.coredump.survey import DamageKind
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.model import Module

_CODES = {
    DamageKind.ROOT_IMAGE: (FindingCode.ROOT_LEVEL_IMAGE, Severity.INFO),
    DamageKind.TOO_MANY_ROWS: (FindingCode.TOO_MANY_ROWS, Severity.WARNING),
}
_REMEDY = (
    "the rest of the dump is reported; if the dump was cut short (disk full, the process "
    "killed while writing), write it again"
)


def dump_findings(core: Coredump, code_map: CodeMap) -> tuple[Finding, ...]:
    """Every salvage the reader made on this dump, most serious first."""
    found = []
    for damage in core.damage:
        code, severity = _CODES.get(damage.kind, (FindingCode.PARTIAL_DUMP, Severity.WARNING))
        remedy = None if damage.kind is DamageKind.ROOT_IMAGE else _REMEDY
        found.append(Finding(code, severity, damage.message, remedy=remedy))
    code_map.modules()  # the images are read once, here or earlier
    for module, reason in code_map.unreadable:
        handle = _module_name(module)
        found.append(
            Finding(
                FindingCode.UNREADABLE_IMAGE,
                Severity.WARNING,
                f"partial dump: the relocated image of {handle} is not a readable cubin "
                f"({reason}); the code of that module is unknown",
                remedy=_REMEDY,
            )
        )
    for module, reason in code_map.unreadable_lines.items():
        found.append(
            Finding(
                FindingCode.UNREADABLE_IMAGE,
                Severity.WARNING,
                f"the debug line info of {_module_name(module)} cannot be decoded ({reason}); "
                "its inline chains come from nvdisasm alone, without function names",
            )
        )
    found.extend(_zero_filled(core))
    found.extend(
        Finding(
            FindingCode.BAD_STRING,
            Severity.WARNING,
            f"partial dump: a name could not be read: {problem}; it is shown as unknown",
        )
        for problem in core.string_problems
    )
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return tuple(sorted(found, key=lambda d: order[d.severity]))


_HIDING = frozenset({FindingCode.PARTIAL_DUMP, FindingCode.TOO_MANY_ROWS})
"""Salvage findings after which an exception may have been in what was lost."""


def lost_rows(findings: tuple[Finding, ...]) -> str | None:
    """When the dump lost rows that could have held an exception, what was lost (the first
    such finding's message); None when nothing that could hold one was lost."""
    return next(
        (f.message for f in findings if f.code in _HIDING and f.severity is Severity.WARNING),
        None,
    )


_WARP_TABLES = frozenset({t.SM_TABLE, t.CTA_TABLE, t.WP_TABLE, t.LN_TABLE})
"""The tables whose rows are warps and lanes, or hold them."""


def lost_warps(core: Coredump) -> str | None:
    """When rows of warps or lanes were lost (their tables set aside, cut short or
    zero-filled), what was lost (one line); None when every one was read. A pattern read off
    the warps left proves nothing: a lost warp may be the one the others wait for."""
    for damage in core.damage:
        if damage.section_type in _WARP_TABLES and damage.kind is not DamageKind.ROOT_IMAGE:
            return damage.message
    return next((f.message for f in _zero_filled(core)), None)


def _zero_filled(core: Coredump) -> list[Finding]:
    """Warp and lane tables whose every byte is zero: no driver writes one (a warp row names
    its valid lanes, a lane row its PC), so what they held was lost (a dump zeroed by a
    failing disk or copy, or cut while written into a preallocated file)."""
    found = []
    for kind, rows in ((t.WP_TABLE, "warp"), (t.LN_TABLE, "lane")):
        sections = core.tables.of_type(kind)
        zeroed = sum(1 for s in sections if not core.tables.data(int(s)).strip(b"\0"))
        if zeroed:
            found.append(
                Finding(
                    FindingCode.PARTIAL_DUMP,
                    Severity.WARNING,
                    f"partial dump: {zeroed} of {len(sections)} {rows} tables are zero-filled: "
                    f"the {rows}s they held are lost, and with them any exception they recorded",
                    remedy=_REMEDY,
                )
            )
    return found


def _module_name(module: Module) -> str:
    if module.module_handle is None:
        return "a root-level image"
    return f"module 0x{module.module_handle:x}"
