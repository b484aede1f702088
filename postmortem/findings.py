"""Findings: everything postmortem says is wrong or limited, as one typed value.

A finding is what we saw (`message`, one line), the evidence for it, what it does not
prove (`caveat`), and what to do (`remedy`). Its `code` comes from `FindingCode`, whose
values are the stable strings reports and scripts use ("no-line-info"), so no finding is
ever recognised by matching its text. Every layer makes them: the cubin and dump
diagnoses, the known failures of cuda-gdb read from its output, the deadlock patterns of a
hang, the limits of forensics, the salvage of a damaged dump.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(Enum):
    """How much a finding limits the answer."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class FindingCode(Enum):
    """What a finding is about; the value is the stable code reports print."""

    # The build of the faulting code (analysis/fault/diagnose.py).
    NO_LINE_INFO = "no-line-info"
    LINE_INFO_REMOVED = "line-info-removed"
    DEVICE_DEBUG_BUILD = "device-debug-build"
    # Where the PC is.
    PC_OUTSIDE_MODULES = "pc-outside-modules"
    IMAGE_MISSING = "image-missing"
    LANE_OFFSET_MISMATCH = "lane-offset-mismatch"
    IMPRECISE_PC = "imprecise-pc"
    # nvdisasm.
    NVDISASM_MISSING = "nvdisasm-missing"
    NVDISASM_FAILED = "nvdisasm-failed"
    # The line table (analysis/fault/inline.py).
    LINE_TABLE_DISAGREES = "line-table-disagrees"
    # What the reader set aside (salvage.py).
    PARTIAL_DUMP = "partial-dump"
    ROOT_LEVEL_IMAGE = "root-level-image"
    TOO_MANY_ROWS = "too-many-rows"
    UNREADABLE_IMAGE = "unreadable-image"
    BAD_STRING = "bad-string"
    # Deadlock patterns of a hang (analysis/hang/hang.py).
    DIVERGENT_BARRIER = "divergent-barrier"
    CONVERGENCE_SPLIT = "convergence-split"
    SPIN_WAIT = "spin-wait"
    NAMED_BARRIER_WAIT = "named-barrier-wait"
    """Warps at a named barrier while other live warps of the block may still arrive."""
    NAMED_BARRIER_STARVED = "named-barrier-starved"
    """Warps at a named barrier that fewer threads remain in the block to complete."""
    MBARRIER_WAIT = "mbarrier-wait"
    """Warps waiting on mbarriers in a pipeline that other live warps may still feed."""
    CIRCULAR_WAIT = "circular-wait"
    """Every live warp of a block waits on an mbarrier, producer and consumers alike."""
    PIPELINE_STALLED = "pipeline-stalled"
    """Consumers wait on mbarriers and no live warp is left on the producer's path."""
    COLLECTIVE_WAIT = "collective-wait"
    """Lanes poll a word that no code of their grid writes: a peer GPU, the host or another
    kernel should."""
    LOOP_BOUND = "loop-bound"
    """Warps running a loop whose exit compares against an absurd bound (negative as signed,
    over 2^31): evidence of a runaway loop, not proof."""
    BUSY_SNAPSHOT = "busy-snapshot"
    """Warps wait at a barrier or poll while every warp they wait for can still arrive: a
    running kernel caught in one instant, no deadlock claimed."""
    HANG_LIMITED = "hang-limited"
    MOTION_LIMITED = "motion-limited"
    """What limits a comparison of two dumps (warps judged by PCs alone, a loop that moves)."""
    INCIDENT_ORDER_LIMITED = "incident-order-limited"
    """What limits the order of an incident's dumps (undated dumps, equal timestamps)."""
    # Forensics that could not be done in full (analysis/forensics/forensics.py).
    FORENSICS_LIMITED = "forensics-limited"
    ASSERT_IN_CALL = "assert-in-call"
    """A failed device assert's lane is inside `__assertfail`: its PC is the return address."""
    LANES_MOVED_ON = "lanes-moved-on"
    """The faulting lanes ran on past the faulting instruction before the dump, so their
    registers no longer hold its operands: no address is computed from them."""
    # Known cuda-gdb failures, recognised by their text (gdb/faults.py).
    GDB_PYTHON_UNWINDER_FAULT = "python-unwinder-fault"
    GDB_CUBIN_ABI_TOO_NEW = "cubin-abi-too-new"
    GDB_INTERNAL_ERROR = "cuda-gdb-internal-error"
    GDB_NO_PYTHON_SUPPORT_FILES = "no-python-support-files"
    GDB_CUOBJDUMP_MISSING = "cuobjdump-missing"
    GDB_NEEDS_MEMCHECK_ADDRESS = "needs-memcheck-address"
    GDB_COREDUMP_REFUSED = "gpu-coredump-refused"
    GDB_NOT_A_COREDUMP = "not-a-gpu-coredump"
    # What the host printed, joined to the dump (analysis/host/: one module per log kind).
    HOST_LOG_NOT_RECOGNIZED = "host-log-not-recognized"
    HOST_LOG_CUT = "host-log-cut"
    HOST_DISAGREES = "host-log-disagrees"
    ERROR_SURFACED_ELSEWHERE = "error-surfaced-elsewhere"
    NAN_OR_INF_INPUT = "nan-or-inf-input"
    REPLAYABLE_INPUTS = "replayable-inputs"
    GPU_LOST = "gpu-fell-off-the-bus"
    COREDUMP_ATTACH_CONFLICT = "coredump-attach-conflict"
    """The driver refused to write a coredump: CUDA_DEVICE_WAITS_ON_EXCEPTION was set beside
    CUDA_ENABLE_COREDUMP_ON_EXCEPTION (analysis/host/driver.py)."""
    VLLM_BATCH_IN_FLIGHT = "vllm-batch-in-flight"
    """What vLLM's engine core was running when it died: its config and the batch scheduled
    (analysis/host/vllm.py)."""
    SGLANG_REQUESTS_IN_FLIGHT = "sglang-requests-in-flight"
    """What SGLang's scheduler was serving when it crashed: the requests in flight in its
    crash dump pickle, and the server's arguments (analysis/host/crashpickle.py)."""
    CRASH_PICKLE_RUNS_CODE = "crash-pickle-runs-code"
    """A pickle given as a host log names callables that run code when it is loaded: it must
    not be loaded (analysis/host/crashpickle.py)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing postmortem found wrong or limited, with its evidence and remedy."""

    code: FindingCode
    severity: Severity
    message: str
    """What we saw, in one line."""
    evidence: tuple[str, ...] = ()
    """What shows it (a tool's output line, the warps at a barrier)."""
    remedy: str | None = None
    """What to do about it, when something can be done."""
    caveat: str | None = None
    """What the evidence does not prove, when it stops short of proof."""
