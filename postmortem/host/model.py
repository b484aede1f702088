"""Typed facts read from host logs: frozen data, no I/O.

Every fact carries the 1-based line number it was read from, so a report can point at it.
A value the log did not give is None; numbers are ints (addresses too), and dimensions are
``(x, y, z)`` tuples. Collections are tuples, bounded by the parsers (a log may hold
millions of calls; only the last ones matter next to a crash). A pickle has no lines: its
summary is `postmortem.host.crashpickle`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from postmortem.host.crashpickle.model import CrashPickleLayout, CrashPickleSummary

Dim3 = tuple[int, int, int]


class HostLogKind(Enum):
    """What a host log holds; the value is the stable name reports print."""

    SGLANG_API = "sglang-kernel-api"
    """SGLang's kernel API log (`SGLANG_KERNEL_API_LOGLEVEL`)."""
    CUDA_ERROR = "cuda-error"
    """A CUDA error as the host reported it: a Python traceback, a device-side assert."""
    DRIVER = "driver"
    """The driver's words: `NVRM: Xid` kernel-log lines, coredump progress, CUDA exceptions."""
    SANITIZER = "compute-sanitizer"
    """A compute-sanitizer (or cuda-memcheck) text report."""
    VLLM_DUMP = "vllm-engine-dump"
    """vLLM's "Dumping input data for V1 LLM engine" block: its config and the batch in flight."""
    SGLANG_CRASH_DUMP = "sglang-crash-dump"
    """SGLang's ``crash_dump_*.pkl`` (``--crash-dump-folder``): the requests in flight when its
    scheduler crashed and the server arguments, summarized from the pickle's opcodes."""


# --- SGLang kernel API log -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A tensor as the kernel API log describes it (level 3: metadata, level 5: statistics)."""

    shape: tuple[int, ...] | None
    """None when the log elides it (``shape=(..., 128)``) or does not say."""
    shape_text: str | None
    """The shape as written."""
    dtype: str | None
    device: str | None
    requires_grad: bool | None
    contiguous: bool | None
    minimum: float | None = None
    maximum: float | None = None
    mean: float | None = None
    nan_count: int | None = None
    inf_count: int | None = None
    statistics_note: str | None = None
    """Why there are no statistics (``skipped: graph capture in progress``), when it says."""

    @property
    def has_nan_or_inf(self) -> bool:
        """True when the statistics count a NaN or an Inf (or the mean itself is one)."""
        if (self.nan_count or 0) > 0 or (self.inf_count or 0) > 0:
            return True
        return self.mean is not None and self.mean != self.mean


@dataclass(frozen=True, slots=True)
class ApiArgument:
    """One value logged at a call boundary: an input argument or the output."""

    name: str
    """``arg[1]``, a keyword's name, or ``return``."""
    section: str
    """"positional", "keyword" or "output"."""
    tensor: TensorInfo | None
    """None for a value that is not a tensor."""
    text: str
    """The first line of the value as logged (bounded)."""


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One ``SGLang Kernel API Call`` entry."""

    line: int
    timestamp: str | None
    """As logged: ``2026-03-19 00:47:06``."""
    name: str
    """The API's name: ``sglang.custom_op.fused_inplace_qknorm``, ``RMSNorm.forward``."""
    arguments: tuple[ApiArgument, ...] = ()
    """Inputs and output, in log order (level 3 and above)."""
    returned: bool = False
    """An ``Output:`` section was logged: the call returned."""
    exception: str | None = None
    """What the ``SGLang Kernel API Exception`` line says when the call raised
    (``AcceleratorError: …``; empty when the line names no exception); None: it did not."""
    dump_dir: str | None = None
    """The folder its inputs were saved to (level 10), as logged."""
    dump_note: str | None = None
    """Why its inputs were not saved (``graph capture in progress``), when the log says."""

    @property
    def flagged(self) -> tuple[ApiArgument, ...]:
        """The tensors whose statistics count a NaN or an Inf."""
        return tuple(a for a in self.arguments if a.tensor is not None and a.tensor.has_nan_or_inf)


@dataclass(frozen=True, slots=True)
class SglangLog:
    """What a kernel API log says: the last calls before the log ends."""

    calls: tuple[ApiCall, ...]
    """The last calls, oldest first (at most `KEPT_CALLS` of them)."""
    calls_seen: int
    """Every call entry read, kept or not."""
    level: int
    """The logging level the entries show: 1 names, 3 metadata, 5 statistics, 10 dumps."""
    unread_lines: int = 0
    """Indented lines inside call entries that no rule read (an argument block in a format
    not known): the calls are still there, those details are not."""
    first_unread: int | None = None
    """The line number of the first of them."""


# --- CUDA errors as the host reported them ----------------------------------------------


@dataclass(frozen=True, slots=True)
class PythonFrame:
    """One ``File "x.py", line 76, in f`` frame of a Python traceback."""

    file: str
    line: int
    function: str
    code: str | None
    """The source line Python printed under it, when it did."""


@dataclass(frozen=True, slots=True)
class CudaErrorReport:
    """A CUDA error the host reported (a Python exception, a C++ check, a printf)."""

    line: int
    text: str
    """The error line as printed (bounded)."""
    exception_type: str | None
    """``RuntimeError``, ``torch.AcceleratorError``; None when not a Python exception."""
    error: str
    """The CUDA error's own words: ``an illegal memory access was encountered``."""
    kind: str
    """"illegal-address", "device-assert", "misaligned-address", "illegal-instruction",
    "launch-failure" or "other"."""
    asynchronous: bool
    """The report says kernel errors may be reported asynchronously, at another call."""
    frames: tuple[PythonFrame, ...]
    """The Python traceback printed above it, outermost first (the last frames only)."""


@dataclass(frozen=True, slots=True)
class DeviceAssert:
    """A device-side ``assert`` message: ``file:line: kernel: block: [..], thread: [..]``."""

    line: int
    source_file: str
    source_line: int
    function: str
    """The function that asserted, as the device printed it."""
    block: Dim3
    thread: Dim3
    condition: str


@dataclass(frozen=True, slots=True)
class CudaErrorLog:
    """The CUDA errors and device asserts a log holds."""

    errors: tuple[CudaErrorReport, ...]
    """The first errors reported, in log order (bounded)."""
    asserts: tuple[DeviceAssert, ...]
    """The first device asserts (bounded)."""
    errors_seen: int
    asserts_seen: int


# --- The driver: kernel log, coredump progress, CUDA exceptions -------------------------


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One ``NVRM: Xid (PCI:…): N, …`` kernel-log line."""

    line: int
    pci: str
    """The GPU's PCI address as logged: ``0000:3b:00``."""
    xid: int
    pid: int | None
    process: str | None
    channel: int | None
    fault_address: int | None
    """The MMU fault's address (Xid 31), page-aligned as the driver reports it."""
    fault_type: str | None
    """``FAULT_PDE``, ``FAULT_PTE``…"""
    access_type: str | None
    """``ACCESS_TYPE_VIRT_READ``…"""
    engine: str | None
    """``GRAPHICS GPCCLIENT_T1_0``: the engine and client that faulted."""
    detail: str
    """The rest of the line after the Xid number (bounded)."""


@dataclass(frozen=True, slots=True)
class CudaException:
    """A CUDA exception as the driver's coredump progress or cuda-gdb printed it."""

    line: int
    source: str
    """"coredump-progress" (``CUDA_COREDUMP_SHOW_PROGRESS``) or "cuda-gdb"."""
    code: int | None
    name: str
    """``CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS`` or ``Warp Illegal Address``, as printed."""
    device: int | None = None
    sm: int | None = None
    warp: str | None = None
    """The warp as printed: a number, or why there is none (``exception was detected after
    the warp has exited``)."""
    pc: int | None = None
    function: str | None = None
    """The kernel cuda-gdb names at the PC."""
    block: Dim3 | None = None
    thread: Dim3 | None = None


@dataclass(frozen=True, slots=True)
class CoredumpWritten:
    """``coredump: Writing ELF file to PATH``: the dump this run wrote."""

    line: int
    path: str


@dataclass(frozen=True, slots=True)
class DriverLog:
    """The driver's lines in a log."""

    xids: tuple[XidEvent, ...]
    exceptions: tuple[CudaException, ...]
    dumps_written: tuple[CoredumpWritten, ...]
    xids_seen: int
    attach_conflicts: tuple[int, ...] = ()
    """The line numbers (the first ones) where the driver said "CUDA coredump is not supported
    with CUDA attach on exception": CUDA_DEVICE_WAITS_ON_EXCEPTION was set beside
    CUDA_ENABLE_COREDUMP_ON_EXCEPTION, and on an exception neither a dump is written nor does
    the process wait."""


# --- compute-sanitizer ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SanitizerError:
    """One ``Invalid __global__ write of size 4 bytes`` record of a memcheck report."""

    line: int
    what: str
    """The headline as printed, without the ``=========`` prefix."""
    space: str | None
    """"global", "shared", "local"…"""
    access: str | None
    """"read", "write", "atomic"…"""
    size_bytes: int | None
    kernel: str | None = None
    """The function as the report names it (demangled, with parameters)."""
    offset: int | None = None
    """The function-relative PC: the ``+0x70`` of ``at kernel+0x70``."""
    source_file: str | None = None
    source_line: int | None = None
    thread: Dim3 | None = None
    block: Dim3 | None = None
    address: int | None = None
    address_note: str | None = None
    """What the report says of the address: ``is out of bounds``, ``is misaligned``."""
    allocation_note: str | None = None
    """``and is 85 bytes after the nearest allocation at 0x… of size 4 bytes``."""


@dataclass(frozen=True, slots=True)
class SanitizerLog:
    """A memcheck report: its first errors and its summary."""

    errors: tuple[SanitizerError, ...]
    errors_seen: int
    summary_errors: int | None
    """``ERROR SUMMARY: N errors``, when the report got that far."""


# --- vLLM's engine dump -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VllmConfig:
    """The fields of the engine's config line that a triager reads (``model='…', dtype=…``).

    Values are as printed (a quoted value without its quotes), bounded; None when the line
    does not hold the field.
    """

    model: str | None = None
    served_model_name: str | None = None
    dtype: str | None = None
    """``torch.bfloat16``."""
    quantization: str | None = None
    """``None`` as printed when the model is not quantized, ``fp8``, ``compressed-tensors``…"""
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    max_model_len: int | None = None
    """Printed as ``max_seq_len``."""
    enforce_eager: bool | None = None
    """False: CUDA graphs may replay the kernels (a fault inside one surfaces at the replay)."""
    enable_prefix_caching: bool | None = None
    chunked_prefill_enabled: bool | None = None
    device: str | None = None
    """``device_config``: ``cuda``, ``npu``, ``cpu``…"""
    speculative_config: str | None = None
    """As printed (``SpeculativeConfig(method='eagle3', …)``), bounded; None when ``None``."""
    load_format: str | None = None
    fields_seen: int = 0
    """Items read at the top level of the line (its ``name=value`` pairs), kept or not."""


@dataclass(frozen=True, slots=True)
class VllmRequest:
    """One request of the batch the scheduler had in flight."""

    request_id: str
    """As printed (bounded)."""
    new: bool
    """Scheduled for the first time (``scheduled_new_reqs``); False: scheduled before
    (``scheduled_cached_reqs``)."""
    prompt_tokens: int | None = None
    """``prompt_token_ids_len`` of a new request."""
    computed_tokens: int | None = None
    """``num_computed_tokens``: tokens already in the KV cache before this step."""
    scheduled_tokens: int | None = None
    """Its entry of ``num_scheduled_tokens``: the tokens this step runs for it."""


@dataclass(frozen=True, slots=True)
class VllmSchedulerOutput:
    """``Dumping scheduler output for model execution: SchedulerOutput(…)``."""

    line: int
    new_requests: int | None
    """How many ``scheduled_new_reqs``; None when the dump did not get that far."""
    cached_requests: int | None
    """How many ``scheduled_cached_reqs``."""
    requests: tuple[VllmRequest, ...]
    """The first requests, new ones first (bounded)."""
    total_scheduled_tokens: int | None
    """``total_num_scheduled_tokens``."""
    scheduled_entries: int | None = None
    """Entries of ``num_scheduled_tokens``: the requests this step runs."""
    spec_decode_requests: int | None = None
    """Entries of ``scheduled_spec_decode_tokens``: requests with draft tokens to verify."""
    finished_requests: int | None = None
    """Entries of ``finished_req_ids``."""
    complete: bool = True
    """False: the text ended (or was cut at the bound) before the closing parenthesis."""


@dataclass(frozen=True, slots=True)
class VllmSchedulerStats:
    """``Dumping scheduler stats: SchedulerStats(…)``."""

    line: int
    running: int | None
    """``num_running_reqs``."""
    waiting: int | None
    """``num_waiting_reqs``."""
    kv_cache_usage: float | None
    """A fraction, 0 to 1 (``kv_cache_usage``; ``gpu_cache_usage`` before v0.9)."""


@dataclass(frozen=True, slots=True)
class VllmEngineDump:
    """One block vLLM's V1 engine core logs when it dies on an exception (or, since the
    ``reason=`` form, on a timeout): its version and config, the scheduler's output in flight
    and the scheduler's stats (``vllm/logging_utils/dump_input.py``)."""

    line: int
    """The ``V1 LLM engine (v…) with config:`` line, else the first line of the block read."""
    version: str | None
    """``0.11.0``; None when the config line was not read."""
    reason: str | None
    """``exception``, ``timeout``…: what the ``(v…, reason=…)`` form says; None before it."""
    config: VllmConfig | None
    scheduler: VllmSchedulerOutput | None
    stats: VllmSchedulerStats | None
    process: str | None = None
    """The logging process as printed before the level (``EngineCore_DP0 pid=16899``)."""


@dataclass(frozen=True, slots=True)
class VllmLog:
    """vLLM's engine dumps in a log: the last ones."""

    dumps: tuple[VllmEngineDump, ...]
    """Oldest first (the last few of the log)."""
    dumps_seen: int


# --- One file ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostLogFile:
    """One host log, read and parsed."""

    path: Path
    size_bytes: int
    read_from: int
    """The byte offset reading started at: 0 when the whole file was read, else the start
    of the tail that was."""
    lines: int
    """Lines read."""
    sglang: SglangLog | None
    cuda_errors: CudaErrorLog | None
    driver: DriverLog | None
    sanitizer: SanitizerLog | None
    vllm: VllmLog | None = None
    crash_pickle: CrashPickleSummary | None = None
    """The file is a pickle (`postmortem.host.crashpickle`, never loaded), read instead of
    lines: its summary, whatever it holds (it is an SGLang crash dump when `kinds` says so)."""

    @property
    def cut(self) -> bool:
        """Only the tail was read."""
        return self.read_from > 0

    @property
    def kinds(self) -> tuple[HostLogKind, ...]:
        """What the file was recognized to hold, by its content."""
        pickled = self.crash_pickle
        sglang_pickle = pickled is not None and is_sglang_pickle(pickled)
        found = (
            (HostLogKind.SGLANG_API, self.sglang),
            (HostLogKind.CUDA_ERROR, self.cuda_errors),
            (HostLogKind.DRIVER, self.driver),
            (HostLogKind.SANITIZER, self.sanitizer),
            (HostLogKind.VLLM_DUMP, self.vllm),
            (HostLogKind.SGLANG_CRASH_DUMP, pickled if sglang_pickle else None),
        )
        return tuple(kind for kind, parsed in found if parsed is not None)


def is_sglang_pickle(summary: CrashPickleSummary) -> bool:
    """Whether a pickle holds what SGLang writes: a crash dump, or the bare list of requests
    its replay script also reads, naming no callable that runs code when loaded."""
    return summary.layout in _SGLANG_LAYOUTS and not summary.code_calls


_SGLANG_LAYOUTS = (CrashPickleLayout.CRASH_DUMP, CrashPickleLayout.REQUEST_LIST)
