"""The crash pickle's summary as text, on one terminal screen."""

from __future__ import annotations

from datetime import datetime, timezone

from postmortem.host.crashpickle.model import (
    CrashPickleLayout,
    CrashPickleSummary,
    CrashRequest,
    ServerArgsSummary,
)
from postmortem.spelling import size_text

_SHOWN_REQUESTS = 8
_WIDTH = 100
_WRAPPED_LINES = 3


def crash_pickle_text(summary: CrashPickleSummary) -> str:
    """The summary on one terminal screen (100 columns): the server, the requests in flight
    (oldest first) and the last ones finished, and what stopped or limited the reading."""
    lines = [_clip(_heading(summary), _WIDTH), *_server_lines(summary.server_args)]
    if summary.launch_command is not None:
        lines += _wrapped(summary.launch_command.split(" "), "launch: ", separator=" ")
    lines += _request_lines(summary)
    tail = []
    if summary.classes:
        more = summary.classes_total - len(summary.classes)
        tail.append(
            ("classes: ", ", ".join(summary.classes) + (f" (+{more} more)" if more > 0 else ""))
        )
    if summary.code_calls:
        tail.append(("DANGER: ", f"loading this file would call {', '.join(summary.code_calls)}: "
                     "it is not SGLang's; never unpickle it"))  # fmt: skip
    if summary.stopped is not None:
        tail.append(("stopped: ", summary.stopped))
    tail += [("limit: ", cap) for cap in summary.caps_hit]
    tail += [("note: ", note) for note in summary.notes]
    for prefix, text in tail:
        lines += _wrapped(text.split(" "), prefix, separator=" ")
    return "\n".join(lines) + "\n"


_LAYOUT_WORDS = {
    CrashPickleLayout.CRASH_DUMP: "SGLang crash dump",
    CrashPickleLayout.REQUEST_LIST: "SGLang request list",
    CrashPickleLayout.OTHER: "not an SGLang crash dump",
    CrashPickleLayout.NOTHING: "nothing read",
}


def _heading(summary: CrashPickleSummary) -> str:
    protocol = "no protocol" if summary.protocol is None else f"protocol {summary.protocol}"
    return (f"{summary.path.name}: {_LAYOUT_WORDS[summary.layout]}, "
            f"{size_text(summary.size_bytes)}, pickle {protocol}")  # fmt: skip


def _server_lines(args: ServerArgsSummary | None) -> list[str]:
    if args is None:
        return ["server: no server arguments"]
    graph = {None: None, True: "on", False: "off"}[args.cuda_graph]
    named = (
        ("tp", args.tp_size), ("dp", args.dp_size), ("pp", args.pp_size), ("ep", args.ep_size),
        ("dtype", args.dtype), ("quantization", args.quantization),
        ("kv cache", args.kv_cache_dtype), ("attention", args.attention_backend),
        ("mem fraction", args.mem_fraction_static),
        ("max running", args.max_running_requests),
        ("chunked prefill", args.chunked_prefill_size), ("cuda graph", graph),
        *args.other,
    )  # fmt: skip
    parts = [f"{name} {value}" for name, value in named if value is not None]
    return [f"server: {_clip(args.model_path or '?', _WIDTH - 8)}", *_wrapped(parts, " " * 8)]


def _wrapped(parts: list[str], first: str, separator: str = "  ") -> list[str]:
    """`parts` joined into lines of at most `_WIDTH` columns, the first starting `first`, the
    others indented as deep, at most `_WRAPPED_LINES` of them."""
    indent = " " * len(first)
    lines = [first]
    for part in parts:
        part = _clip(part, _WIDTH - len(indent))
        if len(lines[-1]) > len(indent) and len(lines[-1]) + len(separator) + len(part) > _WIDTH:
            if len(lines) == _WRAPPED_LINES:
                lines[-1] = _clip(lines[-1] + " …", _WIDTH)
                break
            lines.append(indent)
        lines[-1] += (separator if len(lines[-1]) > len(indent) else "") + part
    return [line for line in lines if line.strip()]


def _request_lines(summary: CrashPickleSummary) -> list[str]:
    if summary.request_count is None:
        return ["requests: none read"]
    kept = len(summary.requests)
    line = (f"requests: {summary.request_count:,} ({summary.finished_count} finished, "
            f"{summary.in_flight_count} in flight")  # fmt: skip
    line += f", {kept:,} kept)" if kept < summary.request_count else ")"
    if summary.dump_time is not None:
        line += f"; latest time recorded {_when(summary.dump_time)}"
    running = sorted((r for r in summary.requests if r.finished is False),
                     key=lambda r: -(r.age_s or 0.0))  # fmt: skip
    finished = [r for r in summary.requests if r.finished][-_SHOWN_REQUESTS // 2 :]
    lines = [line]
    for title, rows in (("in flight, oldest first", running), ("finished, last", finished)):
        if rows:
            lines.append(f"  {title}:  rid / input / max new / output / age")
            lines += [_request_row(r) for r in rows[:_SHOWN_REQUESTS]]
            if len(rows) > _SHOWN_REQUESTS:
                lines.append(f"    … {len(rows) - _SHOWN_REQUESTS} more")
    return lines


def _request_row(request: CrashRequest) -> str:
    if request.input_tokens is not None:
        given = f"{request.input_tokens:,} tokens"
    elif request.input_chars is not None:
        given = f"{request.input_chars:,} chars"
    else:
        given = "?"
    batch = f" x{request.batch_size}" if request.batch_size is not None else ""
    age = "?" if request.age_s is None else f"{request.age_s:.1f} s"
    reason = f" ({request.finish_reason})" if request.finish_reason else ""
    return (f"    {_clip(request.rid or '?', 34):34} {given}{batch} / "
            f"{_or_unknown(request.max_new_tokens)} / {_or_unknown(request.output_tokens)} / "
            f"{age}{reason}")  # fmt: skip


def _or_unknown(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _when(seconds: float) -> str:
    try:
        moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{seconds:.3f}"
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _clip(text: str, limit: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
