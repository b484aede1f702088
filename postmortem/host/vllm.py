r"""vLLM's engine dump in a host log: the config and the batch the V1 engine core died on.

When the engine core's step raises, vLLM logs what it was running
(``vllm/logging_utils/dump_input.py``, ``dump_engine_exception``), each piece one
``logger.error`` call (fixtures/hostlogs/vllm_dump_ascend_issue.txt)::

    (EngineCore_DP0 pid=16899) ERROR 11-25 12:06:16 [dump_input.py:69] Dumping input data for
        V1 LLM engine (v0.11.0) with config: model='…', dtype=torch.bfloat16, max_seq_len=4096,
        tensor_parallel_size=4, …, enforce_eager=False, …, compilation_config={…},
    (…) [dump_input.py:76] Dumping scheduler output for model execution:
        SchedulerOutput(scheduled_new_reqs=[NewRequestData(req_id=cmpl-…,prompt_token_ids_len=5,
        …,num_computed_tokens=0,…)], scheduled_cached_reqs=CachedRequestData(req_ids=[], …),
        num_scheduled_tokens={cmpl-…: 5}, total_num_scheduled_tokens=5, …)
    (…) [dump_input.py:79] Dumping scheduler stats: SchedulerStats(num_running_reqs=1,
        num_waiting_reqs=0, …, kv_cache_usage=0.00021758050478681845, …)

Before v0.9 the block opens with a bare ``Dumping input data`` line, the config line reads
``V1 LLM engine (v…) with config: …``, the scheduler output sits on the line after its
``Dumping scheduler output for model execution:`` and the stats line is a bare
``SchedulerStats(…)``; later versions say ``(v…, reason=exception)``. Before v0.10 the cached
requests are a list of ``CachedRequestData(req_id='…', …)``, one per request. A value whose
repr spans lines (a numpy array) is logged as more lines under the same prefix: they are
read as one text.

The values are reprs of Python objects, read one nesting level at a time by
`postmortem.host.reprs` (``name=value`` pairs, never evaluated), in time linear in the text.
A first pass only looks for the markers near each line's start; the last `_KEPT_DUMPS` blocks
alone are read further. Each piece is bounded in characters (`_CONFIG_CHARS`,
`_OUTPUT_CHARS`) and in scanning steps (`_OUTPUT_STEPS`…), as is what is kept (their first
`_KEPT_REQUESTS` requests). Lines are read whole, not cut at `lines.MAX_LINE_CHARS`:
``total_num_scheduled_tokens`` comes after every request of the batch.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from postmortem.host.lines import bounded
from postmortem.host.model import (
    VllmConfig,
    VllmEngineDump,
    VllmLog,
    VllmRequest,
    VllmSchedulerOutput,
    VllmSchedulerStats,
)
from postmortem.host.reprs import (
    Repr,
    Span,
    collection_items,
    count_items,
    find_object,
    named_values,
    object_fields,
    skip_blanks,
    split_items,
    unquoted,
    value_text,
)

_KEPT_DUMPS = 4
_KEPT_REQUESTS = 32
_SCHEDULED_ENTRIES = 4096
"""Entries of ``num_scheduled_tokens`` read to give the kept requests their counts."""
_WINDOW = 1024
"""How far into a line its markers are looked for (after the log's own prefix)."""
_CONFIG_CHARS = 64 << 10
_OUTPUT_CHARS = 4 << 20
"""Of the scheduler output, its continuation lines included."""
_STATS_CHARS = 16 << 10
_CONTINUATION_LINES = 4096
_NEAR = _CONTINUATION_LINES + 64
"""Lines within which an output or stats line belongs to the block before it (a scheduler
output logged over many lines included)."""
_VALUE_CHARS = 256
_ID_CHARS = 128
# Scanning steps (brackets, quotes, commas) per piece: a real dump of hundreds of requests
# takes tens of thousands; a crafted one stops here, in a few tenths of a second.
_CONFIG_STEPS = 50_000
_OUTPUT_STEPS = 150_000
_STATS_STEPS = 10_000

_HEADER = "LLM engine (v"
_CONFIG = "with config:"
_OUTPUT = "Dumping scheduler output for model execution:"
_STATS = "Dumping scheduler stats:"
_BARE_STATS = "SchedulerStats("
_TAG = "dump_input.py:"
_HEADER_LINES = ("# source:", "# note:", "# tool-version:")

_PROCESS = re.compile(r"\(([A-Za-z][\w.-]{0,40} pid=\d{1,10})\)")


@dataclass
class _Block:
    """The lines of one dump, found by the first pass (indexes into the lines)."""

    process: str | None
    last: int
    header: int | None = None
    output: int | None = None
    stats: int | None = None


def parse_vllm_dump(lines: Iterable[str]) -> VllmLog | None:
    """The engine dumps vLLM logged in `lines` (the last few), or None when there is none.

    Never raises; what it does not understand is left out.
    """
    text = lines if isinstance(lines, Sequence) else list(lines)
    blocks: deque[_Block] = deque(maxlen=_KEPT_DUMPS + 4)
    seen = 0
    for index in range(_first_log_line(text), len(text)):
        kind = _kind(text[index][:_WINDOW])
        if kind is None:
            continue
        process = _process(text[index])
        if kind == "header":
            blocks.append(_Block(process, index, header=index))
            seen += 1
            continue
        block = _owner(blocks, kind, process, index)
        if block is None and kind != "bare-stats":
            block = _Block(process, index)
            blocks.append(block)
            seen += 1
        if block is not None and kind.endswith("stats"):
            block.stats = block.last = index
        elif block is not None:
            block.output = block.last = index
    if not seen:
        return None
    kept = list(blocks)[-_KEPT_DUMPS:]
    return VllmLog(tuple(_dump(text, block) for block in kept), seen)


def _first_log_line(text: Sequence[str]) -> int:
    index = 0
    while index < len(text) and text[index].startswith(_HEADER_LINES):
        index += 1
    return index


def _kind(window: str) -> str | None:
    if _OUTPUT in window:
        return "output"
    if _STATS in window:
        return "stats"
    if _HEADER in window and _CONFIG in window:
        return "header"
    if _BARE_STATS in window and _TAG in window:
        return "bare-stats"
    return None


def _process(line: str) -> str | None:
    found = _PROCESS.search(line, 0, 256)
    return found.group(1) if found else None


def _owner(blocks: deque[_Block], kind: str, process: str | None, index: int) -> _Block | None:
    """The block a scheduler output or stats line belongs to: the last one of its process
    (other processes' blocks may come between), when near enough and still lacking it."""
    block = next((b for b in reversed(blocks) if b.process == process), None)
    if block is None or index - block.last > _NEAR or block.stats is not None:
        return None  # the stats come last: after them, a new block
    return block if kind.endswith("stats") or block.output is None else None


def _dump(text: Sequence[str], block: _Block) -> VllmEngineDump:
    version = reason = None
    config = scheduler = stats = None
    first = min(i for i in (block.header, block.output, block.stats) if i is not None)
    if block.header is not None:
        version, reason, config = _header(text[block.header])
    if block.output is not None:
        scheduler = _scheduler_output(block.output + 1, _output_text(text, block.output))
    if block.stats is not None:
        line = text[block.stats]
        stats = _stats(block.stats + 1, line[: _STATS_CHARS + _WINDOW])
    return VllmEngineDump(first + 1, version, reason, config, scheduler, stats, block.process)


# --- The config line ---------------------------------------------------------------------


def _header(line: str) -> tuple[str | None, str | None, VllmConfig | None]:
    at = line.find(_HEADER, 0, _WINDOW)
    start = at + len(_HEADER)
    close = line.find(")", start, start + 128) if at >= 0 else -1
    if close < 0:
        return None, None, None
    version, _, rest = line[start:close].partition(",")
    reason = rest.strip().removeprefix("reason=").strip() or None
    config_at = line.find(_CONFIG, close, close + 64)
    if config_at < 0:
        return bounded(version, 64), reason, None
    body = line[config_at + len(_CONFIG) : config_at + len(_CONFIG) + _CONFIG_CHARS]
    return bounded(version, 64), reason, _config(body)


def _config(body: str) -> VllmConfig:
    text = Repr(body, _CONFIG_STEPS)
    spans, seen, _ = split_items(text, 0, keep=512)
    pairs = named_values(body, spans, join_loose=True)
    values = {key: value_text(body, span, _VALUE_CHARS) for key, span in pairs.items()}
    given = {key: value for key, value in values.items() if value is not None}
    return VllmConfig(
        model=given.get("model"),
        served_model_name=given.get("served_model_name"),
        dtype=given.get("dtype"),
        quantization=given.get("quantization"),
        kv_cache_dtype=given.get("kv_cache_dtype"),
        tensor_parallel_size=_int(given.get("tensor_parallel_size")),
        pipeline_parallel_size=_int(given.get("pipeline_parallel_size")),
        data_parallel_size=_int(given.get("data_parallel_size")),
        max_model_len=_int(given.get("max_seq_len", given.get("max_model_len"))),
        enforce_eager=_bool(given.get("enforce_eager")),
        enable_prefix_caching=_bool(given.get("enable_prefix_caching")),
        chunked_prefill_enabled=_bool(given.get("chunked_prefill_enabled")),
        device=given.get("device_config"),
        speculative_config=_none_word(given.get("speculative_config")),
        load_format=given.get("load_format"),
        fields_seen=seen,
    )


# --- The scheduler output ----------------------------------------------------------------


def _output_text(text: Sequence[str], index: int) -> str:
    """The scheduler output of the line at `index`: the rest of that line, or (before v0.9)
    the next line's text, with the lines logged under the same prefix after it."""
    line = text[index]
    rest = line[line.find(_OUTPUT) + len(_OUTPUT) : _OUTPUT_CHARS + _WINDOW]
    if not rest.strip() and index + 1 < len(text):
        index += 1
        line = text[index]
        rest = _after_prefix(line)[:_OUTPUT_CHARS]
    pieces, size = [rest], len(rest)
    prefix = _prefix(line)
    following = range(index + 1, min(len(text), index + 1 + _CONTINUATION_LINES))
    for later in following:
        if prefix is None or size >= _OUTPUT_CHARS or not text[later].startswith(prefix):
            break
        if _kind(text[later][:_WINDOW]) is not None:
            break
        piece = text[later][len(prefix) : len(prefix) + _OUTPUT_CHARS - size]
        pieces.append(piece)
        size += len(piece) + 1
    return "\n".join(pieces)[:_OUTPUT_CHARS]


def _prefix(line: str) -> str | None:
    """The log's prefix of a line, through the ``[dump_input.py:N]`` tag and its blank."""
    tag = line.find(_TAG, 0, _WINDOW)
    end = line.find("] ", tag, tag + 64) if tag >= 0 else -1
    return line[: end + 2] if end >= 0 else None


def _after_prefix(line: str) -> str:
    prefix = _prefix(line)
    return line[len(prefix) :] if prefix is not None else line


def _scheduler_output(number: int, body: str) -> VllmSchedulerOutput:
    text = Repr(body, _OUTPUT_STEPS)
    start = find_object(text, 0, 256)
    if start is None:
        return VllmSchedulerOutput(number, None, None, (), None, complete=False)
    spans, _, close = split_items(text, start, keep=128)
    fields = named_values(body, spans)
    new, new_count = _new_requests(text, fields.get("scheduled_new_reqs"))
    cached, cached_count = _cached_requests(text, fields.get("scheduled_cached_reqs"))
    scheduled, entries = _scheduled_tokens(text, fields.get("num_scheduled_tokens"))
    requests = tuple(
        VllmRequest(rid, is_new, prompt, computed, scheduled.get(rid))
        for rid, is_new, prompt, computed in (new + cached)[:_KEPT_REQUESTS]
    )
    total = value_text(body, fields.get("total_num_scheduled_tokens"), _VALUE_CHARS)
    return VllmSchedulerOutput(
        line=number,
        new_requests=new_count,
        cached_requests=cached_count,
        requests=requests,
        total_scheduled_tokens=_int(total),
        scheduled_entries=entries,
        spec_decode_requests=count_items(text, fields.get("scheduled_spec_decode_tokens")),
        finished_requests=count_items(text, fields.get("finished_req_ids")),
        complete=close is not None,
    )


_Request = tuple[str, bool, int | None, int | None]
"""(id, new, prompt tokens, computed tokens)."""


def _new_requests(text: Repr, span: Span | None) -> tuple[list[_Request], int | None]:
    items, count = collection_items(text, span, _KEPT_REQUESTS)
    requests: list[_Request] = []
    for item in items:
        fields = object_fields(text, item)
        rid = _field(text, fields, "req_id")
        if rid is None:
            continue
        prompt = _int(_field(text, fields, "prompt_token_ids_len"))
        if prompt is None:  # the full repr (not the anonymized one): count the ids
            prompt = count_items(text, fields.get("prompt_token_ids"))
        computed = _int(_field(text, fields, "num_computed_tokens"))
        requests.append((bounded(rid, _ID_CHARS), True, prompt, computed))
    return requests, count


def _cached_requests(text: Repr, span: Span | None) -> tuple[list[_Request], int | None]:
    if span is None:
        return [], None
    if text.text.startswith("[", skip_blanks(text.text, span[0])):
        # Before v0.10: a list of CachedRequestData(req_id='…', …), one per request.
        items, count = collection_items(text, span, _KEPT_REQUESTS)
        each = [object_fields(text, item) for item in items]
        ids = [_field(text, fields, "req_id") for fields in each]
        computed = [_int(_field(text, fields, "num_computed_tokens")) for fields in each]
    else:  # one CachedRequestData of columns: req_ids=[…], num_computed_tokens=[…]
        columns = object_fields(text, span)
        id_items, count = collection_items(text, columns.get("req_ids"), _KEPT_REQUESTS)
        counts, _ = collection_items(text, columns.get("num_computed_tokens"), _KEPT_REQUESTS)
        ids = [value_text(text.text, item, _ID_CHARS) for item in id_items]
        computed = [_int(value_text(text.text, item, _VALUE_CHARS)) for item in counts]
    computed += [None] * (len(ids) - len(computed))
    return [
        (bounded(rid, _ID_CHARS), False, None, tokens)
        for rid, tokens in zip(ids, computed[: len(ids)], strict=True)
        if rid is not None
    ], count


def _scheduled_tokens(text: Repr, span: Span | None) -> tuple[dict[str, int], int | None]:
    """``{req-a: 241, req-b: 1}``: each request's tokens this step (a request id may hold a
    colon, the count never does)."""
    items, count = collection_items(text, span, _SCHEDULED_ENTRIES)
    scheduled: dict[str, int] = {}
    for start, end in items:
        key, _, value = text.text[start:end].rpartition(":")
        tokens = _int(value.strip())
        if key.strip() and tokens is not None:
            scheduled[bounded(unquoted(key.strip()), _ID_CHARS)] = tokens
    return scheduled, count


def _field(text: Repr, fields: dict[str, Span], name: str) -> str | None:
    return value_text(text.text, fields.get(name), _VALUE_CHARS)


# --- The stats line ----------------------------------------------------------------------


def _stats(number: int, line: str) -> VllmSchedulerStats:
    at = line.find(_BARE_STATS)
    if at < 0:
        return VllmSchedulerStats(number, None, None, None)
    text = Repr(line, _STATS_STEPS)
    spans, _, _ = split_items(text, at + len(_BARE_STATS), keep=64)
    fields = named_values(line, spans)
    usage = fields.get("kv_cache_usage", fields.get("gpu_cache_usage"))
    return VllmSchedulerStats(
        number,
        _int(_field(text, fields, "num_running_reqs")),
        _int(_field(text, fields, "num_waiting_reqs")),
        _fraction(value_text(line, usage, _VALUE_CHARS)),
    )


# --- Values ------------------------------------------------------------------------------


def _int(value: str | None) -> int | None:
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 15:
        return None
    return int(value)


def _bool(value: str | None) -> bool | None:
    return {"true": True, "false": False}.get((value or "").lower())


def _none_word(value: str | None) -> str | None:
    return None if value in (None, "None", "null") else value


def _fraction(value: str | None) -> float | None:
    if value is None or len(value) > 32:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and 0.0 <= number <= 1.0 else None
