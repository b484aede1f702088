"""The host evidence as plain report data: the logs read, the facts compared, what they hold.

Every string that came from a log is passed on as it is (each format escapes it); a float
that is not finite (a tensor's ``mean=nan``) is given as its word, so the JSON stays JSON.
"""

from __future__ import annotations

import math

from postmortem.analysis.host.check import HostCheck
from postmortem.analysis.host.crashpickle import (
    CrashPickleJoin,
    input_words,
    server_words,
    utc_words,
)
from postmortem.analysis.host.join import HostJoin
from postmortem.analysis.host.sglang import ApiJoin
from postmortem.analysis.host.vllm import BatchShape, VllmJoin
from postmortem.findings import Finding
from postmortem.host.crashpickle import CrashRequest, ServerArgsSummary
from postmortem.host.driver import XID_MEANINGS
from postmortem.host.model import (
    ApiCall,
    CudaErrorLog,
    DriverLog,
    HostLogFile,
    SanitizerLog,
    TensorInfo,
    VllmConfig,
    VllmEngineDump,
    VllmSchedulerOutput,
)
from postmortem.report.values import Json, dim_or_none, hex_or_none, kernel_json, size_text

_SHOWN = 4
"""Errors, asserts and events of one kind shown per log."""
_FRAMES = 5
_PICKLE_REQUESTS = 32
"""Requests in flight given per crash pickle (the oldest first); finished: the last `_SHOWN`."""


def host_json(join: HostJoin | None) -> Json | None:
    """What the host logs add to a report; None when no host log was given."""
    if join is None:
        return None
    checks = join.checks
    return {
        "files": [_file(f) for f in join.files],
        "checks": [_check(c) for c in checks],
        "agreements": sum(1 for c in checks if c.agrees is True),
        "disagreements": sum(1 for c in checks if c.agrees is False),
        "sglang": [_api(a) for a in join.api],
        "cuda_errors": [
            _cuda_errors(f.path.name, f.cuda_errors) for f in join.files if f.cuda_errors
        ],
        "driver": [_driver(f.path.name, f.driver) for f in join.files if f.driver],
        "sanitizer": [_sanitizer(f.path.name, f.sanitizer) for f in join.files if f.sanitizer],
        "vllm": [_vllm(engine) for engine in join.vllm],
        "crash_pickles": [_crash_pickle(pickled) for pickled in join.crash_pickles],
        "findings": [_finding(f) for f in join.findings],
    }


def _file(file: HostLogFile) -> Json:
    read = file.size_bytes - file.read_from
    return {
        "path": str(file.path),
        "size_bytes": file.size_bytes,
        "read_from": file.read_from,
        "cut": file.cut,
        "read_note": f"the last {size_text(read)} of {size_text(file.size_bytes)} read"
        if file.cut
        else None,
        "lines": file.lines,
        "pickle": file.crash_pickle is not None,
        "recognized": [kind.value for kind in file.kinds],
    }


def _check(check: HostCheck) -> Json:
    return {
        "file": check.path.name,
        "line": check.line,
        "source": check.source,
        "fact": check.fact,
        "host": check.host,
        "dump": check.dump,
        "agrees": check.agrees,
        "how": check.how,
    }


def _api(joined: ApiJoin) -> Json:
    match = joined.match
    return {
        "file": joined.path.name,
        "level": joined.log.level,
        "calls_seen": joined.log.calls_seen,
        "unread_lines": joined.log.unread_lines,
        "first_unread": joined.log.first_unread,
        "last_calls": [_call(c) for c in joined.last_calls],
        "match": None if match is None else _call(match),
        "kernel": kernel_json(joined.kernel),
        "how": joined.how,
    }


def _call(call: ApiCall) -> Json:
    return {
        "line": call.line,
        "timestamp": call.timestamp,
        "name": call.name,
        "returned": call.returned,
        "exception": call.exception,
        "dump_dir": call.dump_dir,
        "dump_note": call.dump_note,
        "arguments": [
            {"name": a.name, "section": a.section, "text": a.text, "tensor": _tensor(a.tensor)}
            for a in call.arguments
        ],
        "flagged": [a.name for a in call.flagged],
    }


def _tensor(tensor: TensorInfo | None) -> Json | None:
    if tensor is None:
        return None
    return {
        "shape": None if tensor.shape is None else list(tensor.shape),
        "shape_text": tensor.shape_text,
        "dtype": tensor.dtype,
        "device": tensor.device,
        "requires_grad": tensor.requires_grad,
        "contiguous": tensor.contiguous,
        "min": _number(tensor.minimum),
        "max": _number(tensor.maximum),
        "mean": _number(tensor.mean),
        "nan_count": tensor.nan_count,
        "inf_count": tensor.inf_count,
        "statistics_note": tensor.statistics_note,
        "has_nan_or_inf": tensor.has_nan_or_inf,
    }


def _cuda_errors(name: str, log: CudaErrorLog) -> Json:
    return {
        "file": name,
        "errors_seen": log.errors_seen,
        "asserts_seen": log.asserts_seen,
        "errors": [
            {
                "line": e.line,
                "text": e.text,
                "exception_type": e.exception_type,
                "error": e.error,
                "kind": e.kind,
                "asynchronous": e.asynchronous,
                "frames": [
                    {"file": f.file, "line": f.line, "function": f.function, "code": f.code}
                    for f in e.frames[-_FRAMES:]
                ],
                "surfaced_at": (
                    f"{e.frames[-1].file}:{e.frames[-1].line} in {e.frames[-1].function}"
                    if e.frames
                    else None
                ),
            }
            for e in log.errors[:_SHOWN]
        ],
        "asserts": [
            {
                "line": a.line,
                "source_file": a.source_file,
                "source_line": a.source_line,
                "function": a.function,
                "block": list(a.block),
                "thread": list(a.thread),
                "condition": a.condition,
            }
            for a in log.asserts[:_SHOWN]
        ],
    }


def _driver(name: str, log: DriverLog) -> Json:
    return {
        "file": name,
        "xids_seen": log.xids_seen,
        "xids": [
            {
                "line": x.line,
                "pci": x.pci,
                "xid": x.xid,
                "meaning": XID_MEANINGS.get(x.xid),
                "pid": x.pid,
                "process": x.process,
                "channel": x.channel,
                "fault_address": x.fault_address,
                "fault_address_hex": hex_or_none(x.fault_address),
                "fault_type": x.fault_type,
                "access_type": x.access_type,
                "engine": x.engine,
                "detail": x.detail,
            }
            for x in log.xids[: _SHOWN * 2]
        ],
        "exceptions": [
            {
                "line": e.line,
                "source": e.source,
                "code": e.code,
                "name": e.name,
                "device": e.device,
                "sm": e.sm,
                "warp": e.warp,
                "pc_hex": hex_or_none(e.pc),
                "function": e.function,
                "block": dim_or_none(e.block),
                "thread": dim_or_none(e.thread),
            }
            for e in log.exceptions[:_SHOWN]
        ],
        "dumps_written": [{"line": w.line, "path": w.path} for w in log.dumps_written[:_SHOWN]],
        "attach_conflicts": list(log.attach_conflicts[:_SHOWN]),
    }


def _sanitizer(name: str, log: SanitizerLog) -> Json:
    return {
        "file": name,
        "errors_seen": log.errors_seen,
        "summary_errors": log.summary_errors,
        "errors": [
            {
                "line": e.line,
                "what": e.what,
                "space": e.space,
                "access": e.access,
                "size_bytes": e.size_bytes,
                "kernel": e.kernel,
                "offset_hex": hex_or_none(e.offset),
                "source": None if e.source_file is None else f"{e.source_file}:{e.source_line}",
                "block": dim_or_none(e.block),
                "thread": dim_or_none(e.thread),
                "address_hex": hex_or_none(e.address),
                "address_note": e.address_note,
                "allocation_note": e.allocation_note,
            }
            for e in log.errors[:_SHOWN]
        ],
    }


def _vllm(engine: VllmJoin) -> Json:
    return {
        "file": engine.path.name,
        "dumps_seen": engine.log.dumps_seen,
        "dumps": [_engine_dump(dump) for dump in engine.log.dumps],
        "batch": _batch(engine.batch),
    }


def _engine_dump(dump: VllmEngineDump) -> Json:
    stats = dump.stats
    return {
        "line": dump.line,
        "version": dump.version,
        "reason": dump.reason,
        "process": dump.process,
        "config": _engine_config(dump.config),
        "scheduler": _scheduler(dump.scheduler),
        "stats": None
        if stats is None
        else {
            "line": stats.line,
            "running": stats.running,
            "waiting": stats.waiting,
            "kv_cache_usage": stats.kv_cache_usage,
        },
    }


def _engine_config(config: VllmConfig | None) -> Json | None:
    if config is None:
        return None
    return {
        "model": config.model,
        "served_model_name": config.served_model_name,
        "dtype": config.dtype,
        "quantization": config.quantization,
        "kv_cache_dtype": config.kv_cache_dtype,
        "tensor_parallel_size": config.tensor_parallel_size,
        "pipeline_parallel_size": config.pipeline_parallel_size,
        "data_parallel_size": config.data_parallel_size,
        "max_model_len": config.max_model_len,
        "enforce_eager": config.enforce_eager,
        "enable_prefix_caching": config.enable_prefix_caching,
        "chunked_prefill_enabled": config.chunked_prefill_enabled,
        "device": config.device,
        "speculative_config": config.speculative_config,
        "load_format": config.load_format,
        "fields_seen": config.fields_seen,
    }


def _scheduler(output: VllmSchedulerOutput | None) -> Json | None:
    if output is None:
        return None
    return {
        "line": output.line,
        "new_requests": output.new_requests,
        "cached_requests": output.cached_requests,
        "total_scheduled_tokens": output.total_scheduled_tokens,
        "scheduled_entries": output.scheduled_entries,
        "spec_decode_requests": output.spec_decode_requests,
        "finished_requests": output.finished_requests,
        "complete": output.complete,
        "requests": [
            {
                "id": r.request_id,
                "new": r.new,
                "prompt_tokens": r.prompt_tokens,
                "computed_tokens": r.computed_tokens,
                "scheduled_tokens": r.scheduled_tokens,
            }
            for r in output.requests
        ],
    }


def _batch(batch: BatchShape | None) -> Json | None:
    if batch is None:
        return None
    return {
        "words": batch.words,
        "requests": batch.requests,
        "new": batch.new,
        "cached": batch.cached,
        "total_tokens": batch.total_tokens,
        "largest_tokens": batch.largest_tokens,
        "largest_request": batch.largest_request,
        "one_token": batch.one_token,
        "read": batch.read,
        "complete": batch.complete,
    }


def _crash_pickle(joined: CrashPickleJoin) -> Json:
    summary = joined.summary
    latest = summary.dump_time
    return {
        "file": joined.path.name, "size_bytes": summary.size_bytes,
        "protocol": summary.protocol, "layout": summary.layout.value, "sglang": joined.sglang,
        "keys": list(summary.keys), "name_time": summary.name_time, "latest_time": latest,
        "latest_time_utc": None if latest is None else utc_words(latest),
        "dump_time_apart_s": joined.apart_s, "request_count": summary.request_count,
        "requests_kept": len(summary.requests), "in_flight_count": len(joined.in_flight),
        "finished_count": len(joined.finished), "oldest_age_s": joined.oldest_age_s,
        "in_flight": [_pickled_request(r) for r in joined.in_flight[:_PICKLE_REQUESTS]],
        "finished": [_pickled_request(r) for r in joined.finished[-_SHOWN:]],
        "server_args": _server_args(summary.server_args),
        "launch_command": summary.launch_command, "classes": list(summary.classes),
        "classes_total": summary.classes_total, "code_calls": list(summary.code_calls),
        "opcodes_read": summary.opcodes_read, "complete": summary.complete,
        "stopped": summary.stopped, "caps_hit": list(summary.caps_hit),
        "notes": list(summary.notes),
    }  # fmt: skip


def _pickled_request(request: CrashRequest) -> Json:
    return {
        "index": request.index, "rid": request.rid, "request_class": request.request_class,
        "batch_size": request.batch_size, "input_chars": request.input_chars,
        "input_tokens": request.input_tokens, "input_words": input_words(request),
        "max_new_tokens": request.max_new_tokens, "stream": request.stream,
        "created_time": request.created_time, "end_time": request.end_time,
        "age_s": request.age_s, "finished": request.finished,
        "finish_reason": request.finish_reason, "output_tokens": request.output_tokens,
    }  # fmt: skip


def _server_args(args: ServerArgsSummary | None) -> Json | None:
    if args is None:
        return None
    return {
        "class_name": args.class_name, "model_path": args.model_path, "tp_size": args.tp_size,
        "dp_size": args.dp_size, "pp_size": args.pp_size, "ep_size": args.ep_size,
        "quantization": args.quantization, "dtype": args.dtype,
        "kv_cache_dtype": args.kv_cache_dtype, "attention_backend": args.attention_backend,
        "mem_fraction_static": args.mem_fraction_static,
        "max_running_requests": args.max_running_requests,
        "chunked_prefill_size": args.chunked_prefill_size, "cuda_graph": args.cuda_graph,
        "other": [{"name": name, "value": value} for name, value in args.other],
        "words": server_words(args),
    }  # fmt: skip


def _finding(finding: Finding) -> Json:
    return {
        "code": finding.code.value,
        "severity": finding.severity.value,
        "message": finding.message,
        "evidence": list(finding.evidence),
        "remedy": finding.remedy,
        "caveat": finding.caveat,
    }


def _number(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return str(value)
