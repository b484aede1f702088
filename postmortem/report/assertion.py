"""A decoded device assert as report data (`postmortem.analysis.fault.assertion`)."""

from __future__ import annotations

from typing import Any

from postmortem.analysis.fault.assertion import DeviceAssert

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
