"""SGLang's layout read out of the symbolic values: the top dict or list, the requests,
the server arguments and the launch command (secrets hidden), into the summary."""

from __future__ import annotations

import math
import os
import re
from dataclasses import replace
from pathlib import Path

from postmortem.errors import UnreadableFile
from postmortem.host.crashpickle.limits import DEFAULT_LIMITS, CrashPickleLimits
from postmortem.host.crashpickle.model import (
    CrashPickleLayout,
    CrashPickleSummary,
    CrashRequest,
    ServerArgsSummary,
)
from postmortem.host.crashpickle.reader import Run, open_stream
from postmortem.host.crashpickle.values import Map, Obj, Seq, Text, label_of
from postmortem.host.redact import redact
from postmortem.safefile import open_regular
from postmortem.spelling import size_text


def summarize_crash_pickle(
    path: Path, *, limits: CrashPickleLimits = DEFAULT_LIMITS
) -> CrashPickleSummary:
    """The summary of the SGLang crash pickle at `path`, read statically (never loaded).

    Raises:
        UnreadableFile: `path` is missing, not a regular file (a folder, a FIFO, a device),
            or cannot be read.
    """
    with open_regular(path) as file:
        size = os.fstat(file.fileno()).st_size
        run = Run(limits)
        try:
            run.read(open_stream(file, size, limits))
        except OSError as error:
            raise UnreadableFile(path, error.strerror or str(error)) from None
    if size > limits.max_file_bytes:
        run.caps.append(f"only the first {size_text(limits.max_file_bytes)} were read")
    return _summary(path, size, run, limits)


_NAME_TIME = re.compile(r"crash_dump_(\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d)")
_ROW_SERVER_FIELDS = (
    "served_model_name", "context_length", "nnodes", "enable_dp_attention",
    "speculative_algorithm", "disaggregation_mode", "disable_radix_cache", "cuda_graph_max_bs",
    "moe_a2a_backend", "moe_runner_backend", "sampling_backend", "page_size", "load_format",
    "max_total_tokens", "schedule_policy", "enable_mixed_chunk", "disable_overlap_schedule",
)  # fmt: skip
# Callables that run a command or code when a pickle naming them is loaded: modules whose
# every function does, and the builtins that do.
_CODE_MODULES = frozenset(
    {"os", "posix", "nt", "subprocess", "sys", "shutil", "socket", "pty", "runpy", "importlib",
     "ctypes", "code", "codeop", "marshal", "pickle", "_pickle", "webbrowser", "commands",
     "multiprocessing", "signal", "types", "operator", "functools"}
)  # fmt: skip
_CODE_BUILTINS = frozenset(
    {"eval", "exec", "compile", "__import__", "open", "getattr", "setattr", "delattr",
     "globals", "locals", "vars", "input", "breakpoint", "execfile", "apply", "file"}
)  # fmt: skip


def _summary(path: Path, size: int, run: Run, limits: CrashPickleLimits) -> CrashPickleSummary:
    machine, root = run.machine, run.root
    notes: list[str] = []
    top = root if isinstance(root, Map) else None
    layout = _layout(root, size, notes)
    records = top.named.get("requests") if top is not None else root
    if layout is CrashPickleLayout.OTHER:
        records = None
    requests = _requests(records if isinstance(records, Seq) else None)
    classes = tuple(machine.classes)
    if machine.kept_cut:
        run.caps.append(f"values kept in part (lists past 2 x {limits.kept_items:,} items, "
                        f"strings past {limits.kept_chars:,} characters)")  # fmt: skip
    if machine.protocol is None and size:
        notes.append("no PROTO opcode: not written by pickle protocol 2 or later, as SGLang's is")
    return CrashPickleSummary(
        path=path, size_bytes=size, protocol=machine.protocol, layout=layout,
        keys=tuple(top.named) if top is not None else (),
        name_time=_name_time(path), dump_time=_dump_time(requests),
        request_count=records.length if isinstance(records, Seq) else None,
        requests=_aged(requests), server_args=_server_args(top, notes),
        launch_command=_launch_command(top), classes=classes[: limits.shown_classes],
        classes_total=len(classes), code_calls=tuple(c for c in classes if _runs_code(c)),
        opcodes_read=run.opcodes, stopped=run.stopped, caps_hit=tuple(run.caps),
        notes=tuple(notes),
    )  # fmt: skip


def _layout(root: object, size: int, notes: list[str]) -> CrashPickleLayout:
    if isinstance(root, Map) and "requests" in root.named:
        return CrashPickleLayout.CRASH_DUMP
    if isinstance(root, Seq) and root.kind == "list":
        first = root.head[0] if root.head else None
        if not root.head or isinstance(first, Seq) and first.kind == "tuple":
            return CrashPickleLayout.REQUEST_LIST
    if size == 0:
        notes.append("the file is empty")
        return CrashPickleLayout.NOTHING
    if root is None:
        return CrashPickleLayout.NOTHING
    notes.append(f"not an SGLang crash dump: the pickle holds {label_of(root)}")
    return CrashPickleLayout.OTHER


def _name_time(path: Path) -> str | None:
    match = _NAME_TIME.search(path.name)
    return match.group(1) if match else None


def _runs_code(label: str) -> bool:
    module, _, name = label.rpartition(".")
    root = module.split(".")[0]
    return root in _CODE_MODULES or (module == "builtins" and name in _CODE_BUILTINS)


def _requests(records: Seq | None) -> list[CrashRequest]:
    if records is None:
        return []
    return [_request(index, record) for index, record in records.kept()]


def _request(index: int, record: object) -> CrashRequest:
    parts = [item for _, item in record.kept()] if isinstance(record, Seq) else []
    obj, output, created, end = (parts + [None] * 4)[:4]
    fields = _fields(obj)
    params = fields.get("sampling_params")
    if isinstance(params, Seq):  # a batch: one dict per prompt
        params = params.head[0] if params.head else None
    meta = _fields(output).get("meta_info")
    finished, reason = _finish(output)
    return CrashRequest(
        index=index, request_class=obj.label if isinstance(obj, Obj) else None,
        rid=_first_text(fields.get("rid")), batch_size=_batch_size(fields),
        input_chars=_text_length(fields.get("text")),
        input_tokens=_token_count(fields.get("input_ids")),
        max_new_tokens=_int(_fields(params).get("max_new_tokens")),
        stream=_bool(fields.get("stream")), created_time=_float(created),
        end_time=_float(end), age_s=None, finished=finished, finish_reason=reason,
        output_tokens=_int(_fields(meta).get("completion_tokens"))
        or _length(_fields(output).get("output_ids")),
    )  # fmt: skip


def _finish(output: object) -> tuple[bool | None, str | None]:
    """Whether a request had finished, and why: SGLang keeps the final output of a finished
    one (``meta_info["finish_reason"]`` set) and the last partial one of a running one."""
    if not isinstance(output, Map):
        return None, None
    meta = output.named.get("meta_info")
    if not isinstance(meta, Map):
        return False, None  # ReqState.get_crash_dump_output, or {}: no reply yet
    reason = meta.named.get("finish_reason")
    if reason is None:
        return False, None
    kind = _fields(reason).get("type") if isinstance(reason, Map) else reason
    return True, _short(kind)


def _aged(requests: list[CrashRequest]) -> tuple[CrashRequest, ...]:
    dump = _dump_time(requests)
    return tuple(
        r if dump is None or r.created_time is None
        else _replace_age(r, dump - r.created_time)
        for r in requests
    )  # fmt: skip


def _replace_age(request: CrashRequest, age_s: float) -> CrashRequest:
    return replace(request, age_s=age_s if math.isfinite(age_s) else None)


def _dump_time(requests: list[CrashRequest] | tuple[CrashRequest, ...]) -> float | None:
    ends = [r.end_time for r in requests if r.end_time is not None]
    return max(ends) if ends else None


def _server_args(top: Map | None, notes: list[str]) -> ServerArgsSummary | None:
    if top is None or "server_args" not in top.named:
        return None
    value = top.named["server_args"]
    fields = _fields(value)
    resolved = _fields(top.named.get("resolved_config"))
    fields = {**resolved, **fields} if fields else resolved
    if not fields:
        notes.append("server_args is None: SGLang writes None when they could not be pickled "
                     "(a --trust-remote-code model)" if value is None
                     else f"server_args is {label_of(value)}, with no fields read")  # fmt: skip
        return None
    return _server_summary(value, fields)


def _server_summary(value: object, fields: dict[str, object]) -> ServerArgsSummary:
    disabled = _bool(fields.get("disable_cuda_graph"))
    other = tuple(
        (name, _shown(fields[name])) for name in _ROW_SERVER_FIELDS
        if name in fields and fields[name] is not None
    )  # fmt: skip
    return ServerArgsSummary(
        class_name=value.label if isinstance(value, Obj) else None,
        model_path=_secret_free(fields.get("model_path")),
        tp_size=_int(fields.get("tp_size")), dp_size=_int(fields.get("dp_size")),
        pp_size=_int(fields.get("pp_size")), ep_size=_int(fields.get("ep_size")),
        quantization=_secret_free(fields.get("quantization")),
        dtype=_secret_free(fields.get("dtype")),
        kv_cache_dtype=_secret_free(fields.get("kv_cache_dtype")),
        attention_backend=_secret_free(fields.get("attention_backend")),
        mem_fraction_static=_float(fields.get("mem_fraction_static")),
        max_running_requests=_int(fields.get("max_running_requests")),
        chunked_prefill_size=_int(fields.get("chunked_prefill_size")),
        cuda_graph=None if disabled is None else not disabled, other=other,
    )  # fmt: skip


def _launch_command(top: Map | None) -> str | None:
    value = top.named.get("launch_command") if top is not None else None
    text = _secret_free(value)
    if text is not None and isinstance(value, Text):
        text += f" … ({value.length:,} characters)"
    return text


# --- reading fields of symbolic values -----------------------------------------------------


def _fields(value: object) -> dict[str, object]:
    """The named fields of a dict, or of an object's state (its ``__dict__``; with slots,
    the two dicts of a ``(dict, slots)`` state), or of a dict subclass's items."""
    if isinstance(value, Map):
        return value.named
    if not isinstance(value, Obj):
        return {}
    found: dict[str, object] = {}
    states = value.state.head if isinstance(value.state, Seq) else [value.state]
    for state in [*states, value.mapping]:
        if isinstance(state, Map):
            found.update(state.named)
    return found


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _length(value: object) -> int | None:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (Text, Seq)):
        return value.length
    return None


def _text_length(value: object) -> int | None:
    if isinstance(value, Seq):  # a batch: the prompts kept
        lengths = [_length(item) for _, item in value.kept()]
        return sum(n for n in lengths if n is not None)
    return _length(value)


def _token_count(value: object) -> int | None:
    if not isinstance(value, Seq):
        return None
    if value.head and isinstance(value.head[0], Seq):  # a batch: one list per prompt
        return sum(_length(item) or 0 for _, item in value.kept())
    return value.length


def _batch_size(fields: dict[str, object]) -> int | None:
    for name in ("rid", "text"):
        if isinstance(fields.get(name), Seq):
            return _length(fields[name])
    ids = fields.get("input_ids")
    if isinstance(ids, Seq) and ids.head and isinstance(ids.head[0], Seq):
        return ids.length
    return None


def _first_text(value: object) -> str | None:
    if isinstance(value, Seq):
        value = value.head[0] if value.head else None
    return _short(value)


def _short(value: object, limit: int = 128) -> str | None:
    if isinstance(value, Text):
        value = value.head
    return value[:limit] if isinstance(value, str) else None


def _secret_free(value: object) -> str | None:
    text = value.head if isinstance(value, Text) else value
    return redact(text) if isinstance(text, str) else None


def _shown(value: object) -> str:
    if isinstance(value, (str, Text)):
        return redact(_short(value, 200) or "")
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    return label_of(value)
