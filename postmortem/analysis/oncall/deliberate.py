"""What a deliberate stop contributes to the on-call summary: a failed assert, a trap.

A failed `assert()` names its own place: the file, line and function the compiler wrote
into the call's arguments, exact even in a build without line info. A trap names none, but
the message printed just before it often does. When the dump holds them, they are the best
guess and the next step, before any advice to rebuild with `-lineinfo`.
"""

from __future__ import annotations

from postmortem.analysis.fault.assertion import DeviceAssert
from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.oncall.evidence import Statement

ASSERT_SOURCE = "device assert: the __assertfail call's arguments"
TRAP_SOURCE = "trap: the instruction, and the printf before it"


def assert_signal(site: FaultSite) -> Statement | None:
    """``Assertion `c` failed at f.cu:12 in k``, with how many lanes, when the message is known."""
    found = site.assertion
    if found is None or not found.message.known:
        return None
    lanes = f" ({found.lanes} lane{'s' if found.lanes != 1 else ''})" if found.lanes else ""
    return Statement(f"{found.text}{lanes}", ASSERT_SOURCE)


def assert_frame(site: FaultSite) -> tuple[Statement, Statement | None] | None:
    """The assert's place as the best guess's frame, and its condition as the line's text;
    None unless the file and line are both known."""
    found = site.assertion
    if found is None or found.place is None:
        return None
    function = f" in {found.function.value}" if found.function.known else ""
    frame = Statement(f"{found.place}{function}", ASSERT_SOURCE)
    condition = (
        Statement(f"assert({found.message.value})", ASSERT_SOURCE) if found.message.known else None
    )
    return frame, condition


def assert_step(site: FaultSite) -> Statement | None:
    """Where to read: the assert's line, and what made its condition false."""
    found = site.assertion
    if found is None or found.place is None:
        return None
    return Statement(_read(found), ASSERT_SOURCE)


def _read(found: DeviceAssert) -> str:
    function = f" in {found.function.value}" if found.function.known else ""
    condition = f"`{found.message.value}`" if found.message.known else "its condition"
    lanes = "lanes" if found.lanes != 1 else "lane"
    return (
        f"read {found.place}{function}: {condition} was false for {found.lanes} {lanes}; find "
        "which input broke it (the block and thread of each asserting lane are listed below); "
        "no rebuild is needed for the place: the assert names it"
    )


def trap_signal(site: FaultSite) -> Statement | None:
    """``stopped at BPT.TRAP 0x1 (a trap …), after printing "…"``."""
    trap = site.trap
    if trap is None:
        return None
    printed = (
        f', after printing "{_format(trap.printed.value)}"'
        if trap.printed and trap.printed.known
        else ""
    )
    return Statement(f"stopped at {trap.instruction.text}: {trap.kind}{printed}", TRAP_SOURCE)


def trap_frame(site: FaultSite) -> Statement | None:
    """The place the printed message names, as the best guess's frame."""
    trap = site.trap
    if trap is None or trap.place is None:
        return None
    return Statement(
        f"{trap.place[0]}:{trap.place[1]} (named by the message printed before the trap)",
        TRAP_SOURCE,
    )


def trap_step(site: FaultSite) -> Statement | None:
    """Where to read: the place the message names, and the message's own words."""
    trap = site.trap
    if trap is None or trap.place is None or trap.printed is None:
        return None
    file, line = trap.place
    return Statement(
        f'read {file}:{line}: the kernel printed "{_format(trap.printed.value)}" and trapped on '
        "purpose; the printed values are in the process's output",
        TRAP_SOURCE,
    )


def _format(value: object) -> str:
    # A printf format ends with its newline: shown without it, on one line.
    return str(value).rstrip("\n").replace("\n", " ")
