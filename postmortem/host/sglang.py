"""SGLang's kernel API log (`SGLANG_KERNEL_API_LOGLEVEL` 1, 3, 5, 10), read into calls.

The log is written by `python/sglang/kernel_api_logging.py` (sgl-project/sglang), one entry
per call of a covered kernel boundary, *before* the call runs, so the last entries survive
a crash::

    ================================================================================
    [2026-03-19 00:47:30] SGLang Kernel API Call: sglang.quant_method.UnquantizedLinearMethod.apply
    Positional input arguments:
      arg[1]=Tensor(
          shape=(1, 1024)
          dtype=torch.bfloat16
          ...
        )
    Output:
      return=Tensor(
      ...
    [2026-04-01 15:42:32] SGLang Kernel API Exception: NAME (AcceleratorError: ...)

Level 3 adds the arguments, level 5 each tensor's min/max/mean/nan_count/inf_count, level 10
a ``Dumped inputs to: DIR`` line naming the folder its inputs were saved to. An older form
writes a tensor on one line: ``arg[0]=Tensor(shape=(2,), dtype=torch.int64, device=cuda:0)``
(fixtures/hostlogs/sglang_level3_assert_blog.txt).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from postmortem.host.lines import bounded, numbered
from postmortem.host.model import ApiArgument, ApiCall, SglangLog, TensorInfo

KEPT_CALLS = 32
"""Calls kept from the end of a log."""
_KEPT_ARGUMENTS = 32

# An entry's first line: ``[TIMESTAMP] SGLang Kernel API Call: NAME`` or ``... Exception: NAME
# (DETAIL)``, read by `_entry` in time linear in the line. As patterns, the optional
# ``\[([^\]]{1,40})\]\s+`` tried at every ``[`` and the ``(.*)\)\s*$`` tried at every marker
# took seconds on an 8 MB log of crafted lines (tests/unit/test_host_linear.py).
_CALL = "SGLang Kernel API Call: "
_EXCEPTION = "SGLang Kernel API Exception: "
_NAME = re.compile(r"\S{1,512}")
_TIMESTAMP_CHARS = 40
_SECTIONS = {
    "Positional input arguments:": "positional",
    "Keyword input arguments:": "keyword",
    "Output:": "output",
}
# An argument, and a field of a multi-line tensor, as SGLang indents them (2 and 6 spaces) or
# not at all (as they reach us through a log that strips indentation, or pasted): inside an
# open `Tensor(` a `key=value` line is its field, elsewhere an argument.
_ARGUMENT = re.compile(r"^\s{0,8}([A-Za-z_][\w\[\].]{0,127})=(.*)$")
_FIELD = re.compile(r"^\s{0,16}([a-z_]{1,32})=(.*)$")
_INLINE_FIELD = re.compile(
    r"\b(shape|dtype|device|requires_grad|is_contiguous|min|max|mean|nan_count|inf_count)="
    r"(\([^()]*\)|[^,()\s]+)"
)
_DUMPED = re.compile(r"^Dumped inputs to: (.+)$")
_DUMP_SKIPPED = re.compile(r"^Tensor dump skipped: (.+)$")


@dataclass
class _Call:
    """A call while its lines are read."""

    line: int
    timestamp: str | None
    name: str
    arguments: list[ApiArgument] = field(default_factory=list)
    returned: bool = False
    exception: str | None = None
    dump_dir: str | None = None
    dump_note: str | None = None
    section: str | None = None
    tensor_name: str | None = None
    tensor_fields: dict[str, str] = field(default_factory=dict)
    object_depth: int = 0
    """Inside a multi-line argument that is no tensor (``arg[0]=QKVParallelLinear(``): its
    lines are its own, not arguments, until its ``)``."""

    def close_tensor(self) -> None:
        if self.tensor_name is not None and self.section is not None:
            self._add(self.tensor_name, _tensor(self.tensor_fields), "Tensor(…)")
        self.tensor_name = None
        self.tensor_fields = {}

    def argument(self, name: str, value: str) -> None:
        self.close_tensor()
        if value.startswith("Tensor(") and "shape=" in value:
            fields = dict(_INLINE_FIELD.findall(value))
            self._add(name, _tensor(fields), value)
        elif value.rstrip() == "Tensor(":
            self.tensor_name = name
        else:
            self._add(name, None, value)
            if value.rstrip().endswith("("):
                self.object_depth = 1

    def _add(self, name: str, tensor: TensorInfo | None, text: str) -> None:
        if len(self.arguments) < _KEPT_ARGUMENTS and self.section is not None:
            self.arguments.append(ApiArgument(name, self.section, tensor, bounded(text, 160)))

    def frozen(self) -> ApiCall:
        self.close_tensor()
        return ApiCall(
            self.line, self.timestamp, self.name, tuple(self.arguments), self.returned,
            self.exception, self.dump_dir, self.dump_note,
        )  # fmt: skip


@dataclass
class _State:
    calls: deque[ApiCall] = field(default_factory=lambda: deque(maxlen=KEPT_CALLS))
    current: _Call | None = None
    seen: int = 0
    level: int = 1
    unread: int = 0
    first_unread: int | None = None

    def finish(self) -> None:
        if self.current is not None:
            self.calls.append(self.current.frozen())
        self.current = None


def parse_sglang_api_log(lines: Iterable[str]) -> SglangLog | None:
    """The calls of an SGLang kernel API log, or None when the lines hold no call entry.

    Never raises; a line it does not understand is skipped.
    """
    state = _State()
    for number, text in numbered(lines):
        _read_line(state, number, text)
    state.finish()
    if not state.seen:
        return None
    return SglangLog(tuple(state.calls), state.seen, state.level, state.unread, state.first_unread)


def _read_line(state: _State, number: int, text: str) -> None:
    if "SGLang Kernel API" in text:
        _read_boundary(state, number, text)
        return
    call = state.current
    if call is None:
        return
    stripped = text.strip()
    if stripped in _SECTIONS:
        call.close_tensor()
        call.object_depth = 0
        call.section = _SECTIONS[stripped]
        call.returned = call.returned or call.section == "output"
        state.level = max(state.level, 3)
        return
    if _dump_line(state, call, text):
        return
    if call.object_depth:
        if stripped == ")":
            call.object_depth -= 1
        elif stripped.endswith("("):
            call.object_depth += 1
        return
    field_line = _FIELD.match(text) if call.tensor_name is not None else None
    if field_line is not None:
        key, value = field_line.groups()
        call.tensor_fields.setdefault(key, value.strip())
        if key in ("min", "statistics"):
            state.level = max(state.level, 5)
        return
    argument = _ARGUMENT.match(text)
    if argument is not None and call.section is not None:
        call.argument(*argument.groups())
        if "min=" in text or "statistics=" in text:
            state.level = max(state.level, 5)
        return
    if stripped == ")" or text.startswith("    "):
        if stripped == ")":
            call.close_tensor()
        elif stripped and call.section is not None:  # an argument line no rule reads
            state.unread += 1
            state.first_unread = state.first_unread or number
        return
    if stripped and not stripped.startswith("="):
        call.close_tensor()
        call.section = None  # another program's line: the entry's sections are over


def _read_boundary(state: _State, number: int, text: str) -> None:
    call = _entry(text, _CALL, details=False)
    if call is not None:
        state.finish()
        state.seen += 1
        state.current = _Call(number, *call[:2])
        return
    raised = _entry(text, _EXCEPTION, details=True)
    if raised is None:
        return
    _, name, detail = raised
    what = bounded(detail, 200) if detail else ""
    current = state.current
    if current is not None and current.name == name:
        current.exception = what
        return
    for index in range(len(state.calls) - 1, -1, -1):
        if state.calls[index].name == name:
            state.calls[index] = replace(state.calls[index], exception=what)
            return


def _entry(text: str, marker: str, *, details: bool) -> tuple[str | None, str, str | None] | None:
    """(timestamp, name, detail) of the first `marker` in `text` followed by a name of 1 to
    512 characters that ends the line or (with `details`) is followed by `` (DETAIL)`` that
    does; None when no marker is."""
    end = len(text.rstrip())
    at = text.find(marker)
    while at >= 0:
        name = _NAME.match(text, at + len(marker))
        if name is not None:
            stop = name.end()
            if stop == end:
                return _timestamp(text, at), name.group(), None
            if details and text.startswith(" (", stop) and stop + 2 < end and text[end - 1] == ")":
                return _timestamp(text, at), name.group(), text[stop + 2 : end - 1]
        at = text.find(marker, at + 1)
    return None


def _timestamp(text: str, at: int) -> str | None:
    """What the ``[...]`` right before `at` holds, with blanks between them: the leftmost
    ``[`` of 1 to 40 characters without a ``]`` before the last ``]``; None when there is none."""
    head = text[:at].rstrip()
    close = len(head) - 1
    if close < 2 or close == at - 1 or not head.endswith("]"):
        return None
    low = max(close - _TIMESTAMP_CHARS - 1, 0)
    inner = text.rfind("]", low, close)  # the timestamp holds none: it starts after this one
    opening = text.find("[", max(low, inner + 1), close - 1)
    return text[opening + 1 : close] if opening >= 0 else None


def _dump_line(state: _State, call: _Call, text: str) -> bool:
    dumped = _DUMPED.match(text)
    if dumped is not None:
        call.dump_dir = bounded(dumped.group(1), 1024)
        state.level = 10
        return True
    skipped = _DUMP_SKIPPED.match(text)
    if skipped is not None:
        call.dump_note = bounded(skipped.group(1), 200)
        state.level = 10
        return True
    return text.startswith("Dumped outputs to: ")


def _tensor(fields: dict[str, str]) -> TensorInfo:
    statistics = fields.get("statistics")
    return TensorInfo(
        shape=_shape(fields.get("shape")),
        shape_text=fields.get("shape"),
        dtype=fields.get("dtype"),
        device=fields.get("device"),
        requires_grad=_bool(fields.get("requires_grad")),
        contiguous=_bool(fields.get("is_contiguous")),
        minimum=_float(fields.get("min")),
        maximum=_float(fields.get("max")),
        mean=_float(fields.get("mean")),
        nan_count=_int(fields.get("nan_count")),
        inf_count=_int(fields.get("inf_count")),
        statistics_note=statistics.strip("[]") if statistics else None,
    )


def _shape(text: str | None) -> tuple[int, ...] | None:
    if text is None or not text.startswith("(") or not text.endswith(")"):
        return None
    parts = [p.strip() for p in text[1:-1].split(",")]
    parts = parts[:-1] if parts and parts[-1] == "" else parts
    if not all(p.isascii() and p.isdigit() and len(p) <= 19 for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _bool(text: str | None) -> bool | None:
    return {"True": True, "False": False}.get(text or "")


def _float(text: str | None) -> float | None:
    if text is None or len(text) > 64:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    return int(text)
