"""SGLang's crash dump beside the dump: the requests its scheduler had in flight, the server.

SGLang writes ``crash_dump_<time>.pkl`` when its scheduler dies (`postmortem.host.crashpickle`
reads it from its opcodes, never loading it). What it holds is not compared with the dump's
kernels: a request carries a prompt and sampling parameters, not a kernel or a launch, and the
requests are those the scheduler held at the crash, not necessarily those whose kernel
faulted. They are reported beside the dump: how many were in flight and how old the oldest
was, with the server arguments a replay needs.

One fact is compared: the time. The dump's write time (its metadata timestamp, else the
``%t`` of its name) against the latest time the pickle's requests record: the time SGLang
wrote it when a request was in flight, else the last finish, at most the 5 minutes of
finished requests SGLang keeps before that. SGLang writes the pickle once its scheduler has
died, after the driver wrote the dump (which may take minutes): within an hour, the two can be
of one crash; further apart, they are not.

A pickle that names callables that run code when it is loaded (`CrashPickleSummary.code_calls`)
is not what SGLang writes: a warning says never to load it (nor to replay it: SGLang's replay
script loads it), and nothing it says is reported as SGLang's or compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from postmortem.analysis.host.check import HostCheck
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.host.crashpickle import CrashPickleSummary, CrashRequest, ServerArgsSummary
from postmortem.host.model import is_sglang_pickle

SOURCE = "SGLang crash dump"
SAME_CRASH_S = 3600.0
"""How far apart the dump's time and the pickle's may be for the two to be of one crash."""
REPLAY_SCRIPT = "scripts/playground/replay_request_dump.py"
_SHOWN_REQUESTS = 8


@dataclass(frozen=True, slots=True)
class DumpTime:
    """When the dump was written, and what says so."""

    seconds: float
    """Unix seconds."""
    from_metadata: bool
    """True: the metadata's timestamp; False: the ``%t`` of the dump's name. (A bool, not a
    `TimeSource`: `redact_strings` would turn that str enum into a plain str.)"""


@dataclass(frozen=True, slots=True)
class CrashPickleJoin:
    """One crash pickle, read beside the dump."""

    path: Path
    summary: CrashPickleSummary
    in_flight: tuple[CrashRequest, ...]
    """The requests kept that were still running, the oldest first."""
    finished: tuple[CrashRequest, ...]
    """The requests kept that had finished, in the pickle's order (the last ones last)."""
    dump_time: DumpTime | None
    """The dump's write time; None when neither its metadata nor its name gives it."""

    @property
    def sglang(self) -> bool:
        """Whether the pickle holds what SGLang writes (a crash dump or a request list), and
        names no callable that runs code: only then are its requests and time reported."""
        return is_sglang_pickle(self.summary)

    @property
    def oldest_age_s(self) -> float | None:
        """How long the oldest request in flight had been there at the pickle's time."""
        ages = [r.age_s for r in self.in_flight if r.age_s is not None]
        return max(ages) if ages else None

    @property
    def apart_s(self) -> float | None:
        """The pickle's time less the dump's; None when either is unknown."""
        pickled = self.summary.dump_time
        if pickled is None or self.dump_time is None:
            return None
        return pickled - self.dump_time.seconds


def join_crash_pickle(
    path: Path, summary: CrashPickleSummary, dump_time: DumpTime | None
) -> CrashPickleJoin:
    """A crash pickle's requests, in flight (the oldest first) and finished."""
    running = [r for r in summary.requests if r.finished is False]
    running.sort(key=lambda r: -1.0 if r.age_s is None else r.age_s, reverse=True)
    finished = tuple(r for r in summary.requests if r.finished)
    return CrashPickleJoin(path, summary, tuple(running), finished, dump_time)


def crash_pickle_checks(joined: CrashPickleJoin) -> list[HostCheck]:
    """The pickle's time against the dump's, when both are known."""
    apart, dump = joined.apart_s, joined.dump_time
    pickled = joined.summary.dump_time
    if apart is None or dump is None or pickled is None or not joined.sglang:
        return []
    same = abs(apart) <= SAME_CRASH_S
    order = "after" if apart >= 0 else "before"
    how = f"the pickle's {duration_text(abs(apart))} {order} the dump's"
    how += "" if same else f": more than {duration_text(SAME_CRASH_S)} apart, not of one crash"
    where = "metadata" if dump.from_metadata else "file name"
    return [
        HostCheck(
            joined.path, 0, SOURCE, "time",
            f"{utc_words(pickled)} (the latest time its requests record)",
            f"{utc_words(dump.seconds)} (the dump's {where})", same, how,
        )
    ]  # fmt: skip


def crash_pickle_findings(joined: CrashPickleJoin) -> list[Finding]:
    """The requests in flight as one finding; a pickle that names callables that run code
    gets a warning instead (it is not SGLang's: nothing it says is taken as SGLang's)."""
    if joined.summary.code_calls:
        return [_runs_code(joined)]
    return [_in_flight(joined)] if joined.sglang else []


def server_words(args: ServerArgsSummary) -> str:
    """``model ~/m, tp 2, dp 1, pp 1, ep 1, dtype bfloat16, …``: what a replay must match."""
    graph = {None: None, True: "on", False: "off"}[args.cuda_graph]
    named = (
        ("model", args.model_path), ("tp", args.tp_size), ("dp", args.dp_size),
        ("pp", args.pp_size), ("ep", args.ep_size), ("dtype", args.dtype),
        ("quantization", args.quantization), ("kv cache", args.kv_cache_dtype),
        ("attention", args.attention_backend), ("cuda graph", graph),
    )  # fmt: skip
    return ", ".join(f"{name} {value}" for name, value in named if value is not None)


def request_words(request: CrashRequest) -> str:
    """``input 1,003 tokens, max_new_tokens 131, 3 tokens out, 60.0 s old``."""
    given = input_words(request)
    facts = [
        None if given is None else f"input {given}",
        None if request.max_new_tokens is None else f"max_new_tokens {request.max_new_tokens}",
        None if request.output_tokens is None else f"{request.output_tokens:,} tokens out",
        None if request.age_s is None else f"{request.age_s:.1f} s old",
        None if request.finish_reason is None else f"finished ({request.finish_reason})",
    ]
    return ", ".join(fact for fact in facts if fact) or "nothing read of it"


def input_words(request: CrashRequest) -> str | None:
    """``1,003 tokens``, ``36 chars x3`` (a batch of 3 prompts); None when not read."""
    if request.input_tokens is not None:
        given = f"{request.input_tokens:,} tokens"
    elif request.input_chars is not None:
        given = f"{request.input_chars:,} chars"
    else:
        return None
    return given if request.batch_size is None else f"{given} x{request.batch_size}"


def duration_text(seconds: float) -> str:
    """``48 s``, ``12 min``, ``5.2 h``, ``3.1 days``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} days"


def utc_words(seconds: float) -> str:
    """``2025-06-04 20:13:18 UTC``; the seconds as they are when out of a date's range."""
    try:
        moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{seconds:.3f}"
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _in_flight(joined: CrashPickleJoin) -> Finding:
    summary, name = joined.summary, joined.path.name
    running = joined.in_flight
    evidence = [f"{name}: server: {_server_evidence(summary)}"]
    evidence += [
        f"{name}: request {r.rid or '(no rid)'} in flight: {request_words(r)}"
        for r in running[:_SHOWN_REQUESTS]
    ]
    if len(running) > _SHOWN_REQUESTS:
        evidence.append(f"{name}: … and {len(running) - _SHOWN_REQUESTS} more in flight")
    if summary.stopped is not None:
        evidence.append(f"{name}: read in part: {summary.stopped}")
    return Finding(
        FindingCode.SGLANG_REQUESTS_IN_FLIGHT,
        Severity.INFO,
        _in_flight_message(joined),
        tuple(evidence),
        _replay_remedy(joined),
        "these are the requests SGLang's scheduler held when it crashed, not necessarily those "
        "whose kernel faulted: a CUDA error is reported asynchronously, a batch mixes "
        "requests, and nothing in the pickle names a kernel",
    )


def _in_flight_message(joined: CrashPickleJoin) -> str:
    summary = joined.summary
    count = len(joined.in_flight)
    kept_all = summary.request_count is None or len(summary.requests) >= summary.request_count
    at_least = "" if kept_all else "at least "
    if count == 0:
        total = "no request list" if summary.request_count is None else (
            f"{_plural(summary.request_count, 'request')}, {len(joined.finished)} finished"
        )  # fmt: skip
        head = f"SGLang's crash dump records no request in flight ({total})"
    else:
        head = f"SGLang's scheduler had {at_least}{_plural(count, 'request')} in flight"
        oldest = joined.oldest_age_s
        if oldest is not None:
            head += f", the oldest {oldest:.1f} s old,"
        head += " when SGLang wrote its crash dump"
    args = summary.server_args
    if args is not None:
        sizes = [
            f"{label} {value}"
            for label, value in (("tp", args.tp_size), ("dp", args.dp_size), ("ep", args.ep_size))
            if value is not None
        ]
        model = [f"model {args.model_path}"] if args.model_path is not None else []
        if model or sizes:
            head += f" ({', '.join(model + sizes)})"
    return head


def _server_evidence(summary: CrashPickleSummary) -> str:
    if summary.server_args is None:
        return "no server arguments in the pickle"
    return server_words(summary.server_args) or "no field read"


def _replay_remedy(joined: CrashPickleJoin) -> str:
    if joined.summary.launch_command is not None:
        same = "the launch command the pickle records"
    elif joined.summary.server_args is not None:
        same = "the server arguments above"
    else:
        same = "the server's arguments (the pickle does not hold them)"
    return (
        f"replay them with SGLang's {REPLAY_SCRIPT} --input-file {joined.path.name}, against a "
        f"server launched as before ({same}); the script unpickles the file, so run it only "
        "on a file SGLang wrote"
    )


def _runs_code(joined: CrashPickleJoin) -> Finding:
    calls = ", ".join(joined.summary.code_calls)
    return Finding(
        FindingCode.CRASH_PICKLE_RUNS_CODE,
        Severity.WARNING,
        f"{joined.path.name}: loading this pickle would call {calls}: it is not what SGLang "
        "writes; do not load it with pickle",
        (f"{joined.path.name}: callables it names: {', '.join(joined.summary.classes)}",),
        "do not unpickle it, nor replay it with SGLang's replay script (which unpickles it); "
        "this summary was read from its opcodes without loading it; find out who wrote it",
        "naming such a callable is how a pickle runs code when loaded; the file was not "
        "loaded, so what it would do was not seen",
    )


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")
