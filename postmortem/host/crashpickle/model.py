"""What an SGLang crash pickle says, as typed facts: its layout, requests and server."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path


class CrashPickleLayout(Enum):
    """What the pickle holds, at its top; the value is the stable name reports print."""

    CRASH_DUMP = "crash-dump"
    """A dict with ``requests`` (and ``server_args``, ``launch_command``): SGLang's."""
    REQUEST_LIST = "request-list"
    """A bare list of request tuples, which SGLang's replay script also reads."""
    OTHER = "other"
    """Something else: not an SGLang crash dump."""
    NOTHING = "nothing"
    """No value could be read at all."""


@dataclass(frozen=True, slots=True)
class CrashRequest:
    """One entry of the dump's ``requests`` list."""

    index: int
    """Its position in the list (finished requests come first, in-flight ones last)."""
    request_class: str | None
    """The request's class, ``module.qualname`` (``…io_struct.GenerateReqInput``)."""
    rid: str | None
    """The request id (the first one of a batch request)."""
    batch_size: int | None
    """How many prompts a batch request holds; None for a single request."""
    input_chars: int | None
    """Characters of the prompt text (all prompts of a batch kept), when given as text."""
    input_tokens: int | None
    """Tokens of the prompt, when given as ``input_ids``."""
    max_new_tokens: int | None
    stream: bool | None
    created_time: float | None
    """When the request arrived, seconds since the epoch."""
    end_time: float | None
    """When it finished, or, in flight, when the dump was written."""
    age_s: float | None
    """The dump's time less `created_time`: how long it had been there."""
    finished: bool | None
    """Whether it had finished (its output has a finish reason); None when unknown."""
    finish_reason: str | None
    """The finish reason's type (``stop``, ``length``, ``abort``)."""
    output_tokens: int | None
    """Tokens generated: ``completion_tokens``, else the length of ``output_ids``."""


@dataclass(frozen=True, slots=True)
class ServerArgsSummary:
    """The fields of ``ServerArgs`` that say how the server ran; None where absent."""

    class_name: str | None
    model_path: str | None
    tp_size: int | None
    dp_size: int | None
    pp_size: int | None
    ep_size: int | None
    quantization: str | None
    dtype: str | None
    kv_cache_dtype: str | None
    attention_backend: str | None
    mem_fraction_static: float | None
    max_running_requests: int | None
    chunked_prefill_size: int | None
    cuda_graph: bool | None
    """False with ``disable_cuda_graph``."""
    other: tuple[tuple[str, str], ...]
    """More fields that matter to a crash, where present: (name, value as text)."""


@dataclass(frozen=True, slots=True)
class CrashPickleSummary:
    """What an SGLang crash pickle says, read without loading it."""

    path: Path
    size_bytes: int
    protocol: int | None
    """The pickle protocol (its PROTO opcode); None when it has none (protocol 0 or 1)."""
    layout: CrashPickleLayout
    keys: tuple[str, ...]
    """The top dict's string keys, in order."""
    name_time: str | None
    """The time in the file's name (``2025-06-04_20-13-18``, the host's local time)."""
    dump_time: float | None
    """The latest time the requests record (the dump's, when one was in flight)."""
    request_count: int | None
    """Entries of ``requests``; None when there is no list."""
    requests: tuple[CrashRequest, ...]
    """The entries kept (the first and the last ones past `CrashPickleLimits.kept_items`)."""
    server_args: ServerArgsSummary | None
    launch_command: str | None
    """The command line, with secrets and home folders hidden (`host.redact`)."""
    classes: tuple[str, ...]
    """The classes and functions the pickle names, in order, up to a cap."""
    classes_total: int
    code_calls: tuple[str, ...]
    """Callables named that run commands or code when the pickle is loaded, or that exploit
    pickles use to reach them (``posix.system``, ``builtins.eval``, ``operator.attrgetter``):
    SGLang's dump names none; the file must not be loaded."""
    opcodes_read: int
    stopped: str | None
    """Why reading stopped before the pickle's end (damaged, truncated, a limit); None
    when it was read to its STOP."""
    caps_hit: tuple[str, ...]
    """The limits that cut what is kept without stopping the reading."""
    notes: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """Whether the pickle was read to its end."""
        return self.stopped is None

    @property
    def finished_count(self) -> int:
        """Requests kept that had finished."""
        return sum(1 for r in self.requests if r.finished)

    @property
    def in_flight_count(self) -> int:
        """Requests kept that were still running at the dump."""
        return sum(1 for r in self.requests if r.finished is False)
