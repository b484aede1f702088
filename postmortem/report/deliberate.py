"""Deliberate stops as report data: a decoded device assert
(`postmortem.analysis.fault.assertion`) and a trap (`postmortem.analysis.fault.trap`)."""

from __future__ import annotations

from typing import Any

from postmortem.analysis.fault.assertion import DeviceAssert
from postmortem.analysis.fault.trap import TrapStop

Json = dict[str, Any]


def assert_json(found: DeviceAssert | None) -> Json | None:
    """The assert's parts (None when unknown), and per part where it came from or why it is
    unknown; None when the site is no assert."""
    if found is None:
        return None
    return {
        "message": found.message.value,
        "file": found.file.value,
        "line": found.line.value,
        "function": found.function.value,
        "text": found.text,
        "place": found.place,
        "sources": {
            name: part.source
            for name, part in (
                ("message", found.message),
                ("file", found.file),
                ("line", found.line),
                ("function", found.function),
            )
        },
        "call_offset": found.call_offset,
        "call_offset_hex": f"0x{found.call_offset:04x}",
        "callee": found.callee,
        "lanes": found.lanes,
        "lanes_in_call": found.lanes_in_call,
        "other_messages": [{"message": m, "lanes": n} for m, n in found.other_messages],
    }


def trap_json(trap: TrapStop | None) -> Json | None:
    """The trap instruction the lanes stopped at and the message printed before it; None when
    they did not stop at a trap."""
    if trap is None:
        return None
    printed = trap.printed
    return {
        "instruction": trap.instruction.text,
        "offset_hex": f"0x{trap.instruction.offset:04x}",
        "kind": trap.kind,
        "printed": printed.value if printed else None,
        "printed_source": printed.source if printed else None,
        "place": None if trap.place is None else f"{trap.place[0]}:{trap.place[1]}",
    }
