"""A lane's call stack as report data: one entry per called function, innermost first."""

from __future__ import annotations

from postmortem.analysis.fault.calls import CallFrame, CallStack
from postmortem.demangle import brief_name, without_parameters
from postmortem.report.values import Json, hex_or_none


def calls_json(stack: CallStack | None) -> Json | None:
    """The stack, its call depth and what limits it; None where no lane row was read."""
    if stack is None:
        return None
    return {
        "call_depth": stack.call_depth,
        "hidden_system_frames": stack.hidden,
        "notes": list(stack.notes),
        "frames": [_frame(f) for f in stack.frames],
    }


def _frame(frame: CallFrame) -> Json:
    innermost = frame.chain[0] if frame.chain else None
    return {
        "level": frame.level,
        "pc_hex": hex_or_none(frame.pc),
        "function": _function(frame),
        "brief_location": None
        if frame.name is None or frame.offset is None
        else f"{brief_name(frame.name)}+0x{frame.offset:x}",
        "offset_hex": hex_or_none(frame.offset),
        "section_offset_hex": hex_or_none(frame.section_offset),
        "instruction": frame.instruction.text if frame.instruction else None,
        "file": innermost.file if innermost else None,
        "line": innermost.line if innermost else None,
        "chain": [
            {
                "file": f.file,
                "line": f.line,
                "function": name.demangled if name else None,
            }
            for f, name in zip(
                frame.chain, frame.frame_names or (None,) * len(frame.chain), strict=True
            )
        ],
    }


def _function(frame: CallFrame) -> Json | None:
    if frame.function is None or frame.name is None:
        return None
    return {
        "mangled": frame.function.name,
        "demangled": frame.name,
        "short": without_parameters(frame.name),
        "brief": brief_name(frame.name),
        "clone_in": None if frame.clone_in is None else without_parameters(frame.clone_in),
    }
