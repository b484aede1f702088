"""vLLM's engine dump beside the dump: the engine's config and the batch it was running.

What the dump block says is not compared with the dump's kernels: the scheduler output names
requests and token counts, not kernels or launches, and a CUDA error reaches the engine
asynchronously, so the faulting kernel may belong to this step or to an earlier one. It is
reported beside the dump as the batch in flight (how many requests, new and running, the
tokens scheduled, the largest share), with the config a reproduction needs. One fact is
compared: the device the engine ran on (``device_config``), since a CUDA coredump comes from a
CUDA GPU and a log of an engine on another device (``npu``, ``cpu``) is not of its run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.host.check import HostCheck
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.host.model import VllmEngineDump, VllmLog, VllmSchedulerOutput

SOURCE = "vLLM engine dump"
_SHOWN_REQUESTS = 4


@dataclass(frozen=True, slots=True)
class BatchShape:
    """The batch the scheduler output says the engine was running."""

    requests: int | None
    """Requests this step runs (entries of ``num_scheduled_tokens``, else new and cached)."""
    new: int | None
    """Of them, scheduled for the first time (a prefill, or its first chunk)."""
    cached: int | None
    """Scheduled before: running on (decode steps, or a prefill's later chunks)."""
    total_tokens: int | None
    """``total_num_scheduled_tokens``."""
    largest_tokens: int | None
    """The most tokens one request runs, among the requests read."""
    largest_request: str | None
    one_token: int | None
    """Requests read that run one token (a decode step without draft tokens)."""
    read: int
    """Requests whose scheduled tokens were read (the dump's first ones)."""
    complete: bool
    """False: the scheduler output was cut before its end; counts may be missing."""

    @property
    def words(self) -> str:
        """``3 requests (1 new, 2 running), 518 tokens scheduled``."""
        head = "" if self.requests is None else _plural(self.requests, "request")
        if self.new is not None and self.cached is not None:
            head += f" ({self.new} new, {self.cached} running)"
        tokens = self.total_tokens
        scheduled = None if tokens is None else f"{_plural(tokens, 'token')} scheduled"
        return ", ".join(p for p in (head.strip(), scheduled) if p) or "a batch of a size not read"


@dataclass(frozen=True, slots=True)
class VllmJoin:
    """One log's vLLM engine dumps, read beside the dump."""

    path: Path
    log: VllmLog
    last: VllmEngineDump
    """The last dump of the log: the one nearest the crash."""
    batch: BatchShape | None
    """Of the last dump; None when it has no scheduler output."""


def join_vllm(path: Path, log: VllmLog) -> VllmJoin:
    """The last engine dump of a log and the shape of its batch."""
    last = log.dumps[-1]
    batch = None if last.scheduler is None else batch_shape(last.scheduler)
    return VllmJoin(path, log, last, batch)


def batch_shape(output: VllmSchedulerOutput) -> BatchShape:
    """How many requests and tokens a scheduler output runs."""
    counted = [r for r in output.requests if r.scheduled_tokens is not None]
    largest = max(counted, key=lambda r: r.scheduled_tokens or 0, default=None)
    both = output.new_requests is not None and output.cached_requests is not None
    requests = output.scheduled_entries
    if requests is None and both:
        requests = (output.new_requests or 0) + (output.cached_requests or 0)
    return BatchShape(
        requests=requests,
        new=output.new_requests,
        cached=output.cached_requests,
        total_tokens=output.total_scheduled_tokens,
        largest_tokens=None if largest is None else largest.scheduled_tokens,
        largest_request=None if largest is None else largest.request_id,
        one_token=sum(1 for r in counted if r.scheduled_tokens == 1) if counted else None,
        read=len(counted),
        complete=output.complete,
    )


def vllm_checks(path: Path, log: VllmLog) -> list[HostCheck]:
    """The device each engine dump says the engine ran on, against the dump's CUDA GPU."""
    checks: list[HostCheck] = []
    for dump in log.dumps:
        device = None if dump.config is None else dump.config.device
        if device is None:
            continue
        same = device.lower() == "cuda"
        how = "a CUDA device, as the dump's" if same else "another kind of device than a CUDA GPU"
        checks.append(HostCheck(path, dump.line, SOURCE, "device", device, "cuda", same, how))
    return checks


def vllm_findings(joined: VllmJoin) -> list[Finding]:
    """What the engine was running when it died, as one finding."""
    last, batch = joined.last, joined.batch
    evidence = [f"{joined.path.name}:{last.line}: {_engine_words(last)}"]
    if last.scheduler is not None:
        evidence += _request_lines(joined.path, last.scheduler)
    if last.stats is not None:
        evidence.append(f"{joined.path.name}:{last.stats.line}: {_stats_words(last)}")
    when = "timed out" if last.reason == "timeout" else "died"
    running = f"was running {batch.words}" if batch is not None else "logged no batch"
    config = last.config
    eager = config.enforce_eager if config is not None else None
    remedy = "replay a batch of this shape on the same model and config"
    if batch is None:
        remedy = "keep the engine core's log whole: vLLM logs the batch after its config line"
    if eager is False:
        remedy += (
            "; the engine ran with CUDA graphs (enforce_eager=False): a rerun with "
            "--enforce-eager tells a kernel replayed in a graph from one launched alone"
        )
    return [
        Finding(
            FindingCode.VLLM_BATCH_IN_FLIGHT,
            Severity.INFO,
            f"vLLM {_version(last)} {running} when its engine core {when}",
            tuple(evidence),
            remedy,
            "this is the step the engine had scheduled when it caught the error; a CUDA error "
            "is reported asynchronously, so the faulting kernel may belong to it or to an "
            "earlier step, and nothing here names the kernel",
        )
    ]


def _version(dump: VllmEngineDump) -> str:
    return f"v{dump.version}" if dump.version else "(version not read)"


def _engine_words(dump: VllmEngineDump) -> str:
    """``model /m, torch.bfloat16, tensor parallel 4, pipeline parallel 1, …``."""
    config = dump.config
    if config is None:
        return f"engine {_version(dump)}: config not read"
    named = (
        ("model", config.model),
        ("dtype", config.dtype),
        ("quantization", config.quantization),
        ("tensor parallel", config.tensor_parallel_size),
        ("pipeline parallel", config.pipeline_parallel_size),
        ("data parallel", config.data_parallel_size),
        ("max_model_len", config.max_model_len),
        ("enforce_eager", config.enforce_eager),
        ("device", config.device),
    )
    return f"engine {_version(dump)}: " + ", ".join(
        f"{name} {value}" for name, value in named if value is not None
    )


def _request_lines(path: Path, output: VllmSchedulerOutput) -> list[str]:
    lines = []
    for request in output.requests[:_SHOWN_REQUESTS]:
        facts = [
            "new" if request.new else "running",
            None if request.prompt_tokens is None else f"prompt {request.prompt_tokens}",
            None if request.computed_tokens is None else f"computed {request.computed_tokens}",
            None if request.scheduled_tokens is None else f"scheduled {request.scheduled_tokens}",
        ]
        shown = ", ".join(fact for fact in facts if fact)
        lines.append(f"{path.name}:{output.line}: request {request.request_id}: {shown}")
    return lines


def _stats_words(dump: VllmEngineDump) -> str:
    stats = dump.stats
    if stats is None:
        return ""
    facts = [
        None if stats.running is None else f"{stats.running} running",
        None if stats.waiting is None else f"{stats.waiting} waiting",
        None if stats.kv_cache_usage is None else f"KV cache {_percent(stats.kv_cache_usage)} used",
    ]
    return "scheduler stats: " + (", ".join(f for f in facts if f) or "not read")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _percent(fraction: float) -> str:
    """``52.2%``; ``0.022%`` under one percent."""
    percent = fraction * 100
    return f"{percent:.1f}%" if percent >= 1 else f"{percent:.2g}%"
