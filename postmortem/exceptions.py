"""CUDA exception codes: one table of everything the tool knows of each.

Every place that asks something of an exception code reads `EXCEPTIONS`: its name, whether
the debugger header reserves it, the problem class an on-call summary files it under,
whether only a memory access raises it (an instruction that touches no memory then means an
imprecise PC), whether it is a misalignment, and the words a host's CUDA error uses for it.
Adding code 37 is one row here and its tests (tests/unit/test_exceptions.py walks every code
through every reader).

The host's words cover fewer codes than a class does, deliberately: the driver reports an
illegal instruction (`cudaErrorIllegalInstruction`) for 4, 26 and 27, but a PC gone wrong
(8, 23, 24) as `cudaErrorInvalidPc`, and 25 and 28 under neither; so each row names its own
host words rather than a class standing for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "EXCEPTIONS",
    "PROBLEM_WORDS",
    "ExceptionKind",
    "ProblemClass",
    "codes_for_host_words",
    "describe_exception",
    "find_exception",
    "is_memory_exception",
    "is_misaligned",
]


class ProblemClass(Enum):
    """What kind of problem a dump shows; the value is the stable code reports print."""

    ILLEGAL_ADDRESS = "illegal-memory-access"
    MISALIGNED_ADDRESS = "misaligned-address"
    DEVICE_ASSERT = "device-side-assert"
    ILLEGAL_INSTRUCTION = "illegal-instruction"
    STACK_OVERFLOW = "stack-overflow"
    TRAP = "trap"
    OTHER_EXCEPTION = "other-exception"
    HANG_AT_BARRIER = "hang-at-barrier"
    HANG_AT_CONVERGENCE = "hang-at-convergence-barrier"
    SPIN_WAIT = "spin-wait"
    COLLECTIVE_WAIT = "collective-wait"
    HANG = "hang-unexplained"
    NO_EXCEPTION = "no-exception"
    DAMAGED = "damaged-dump"
    """No exception in what could be read, but rows that could hold one were lost."""


PROBLEM_WORDS: dict[ProblemClass, str] = {
    ProblemClass.ILLEGAL_ADDRESS: "illegal memory access in a kernel",
    ProblemClass.MISALIGNED_ADDRESS: "misaligned memory access in a kernel",
    ProblemClass.DEVICE_ASSERT: "device-side assert",
    ProblemClass.ILLEGAL_INSTRUCTION: "illegal instruction or PC in a kernel",
    ProblemClass.STACK_OVERFLOW: "stack overflow in a kernel",
    ProblemClass.OTHER_EXCEPTION: "an exception in a kernel",
}
"""A fault's class in words, for the on-call summary's first line."""


@dataclass(frozen=True, slots=True)
class ExceptionKind:
    """One exception code and what it means."""

    code: int
    name: str
    """cuda-gdb's and LLDB's words (what users search for), not always the enum's."""
    problem: ProblemClass
    memory: bool = False
    """Only a memory access raises it."""
    misaligned: bool = False
    """It says an address was misaligned."""
    host_words: tuple[str, ...] = ()
    """The kinds of host CUDA error (`postmortem.host.cudaerror`) that stand for it."""
    reserved: bool = False
    """The CUDA 13.4 debugger header reserves it: older drivers wrote it, meaning `name`."""


_ADDRESS = ProblemClass.ILLEGAL_ADDRESS
_INSTRUCTION = ProblemClass.ILLEGAL_INSTRUCTION
_STACK = ProblemClass.STACK_OVERFLOW
_OTHER = ProblemClass.OTHER_EXCEPTION
_ILLEGAL = ("illegal-address",)

EXCEPTIONS: tuple[ExceptionKind, ...] = (
    ExceptionKind(0, "None", _OTHER),
    ExceptionKind(1, "Lane Illegal Address", _ADDRESS, memory=True, host_words=_ILLEGAL,
                  reserved=True),
    ExceptionKind(2, "Lane User Stack Overflow", _STACK, reserved=True),
    ExceptionKind(3, "Device Hardware Stack Overflow", _STACK, reserved=True),
    ExceptionKind(4, "Warp Illegal Instruction", _INSTRUCTION, host_words=("illegal-instruction",)),
    ExceptionKind(5, "Warp Out-of-range Address", _ADDRESS, memory=True, host_words=_ILLEGAL),
    ExceptionKind(6, "Warp Misaligned Address", ProblemClass.MISALIGNED_ADDRESS, memory=True,
                  misaligned=True, host_words=("misaligned-address",)),
    ExceptionKind(7, "Warp Invalid Address Space", _ADDRESS, memory=True,
                  host_words=("illegal-address", "invalid-address-space")),
    ExceptionKind(8, "Warp Invalid PC", _INSTRUCTION, host_words=("invalid-pc",)),
    ExceptionKind(9, "Warp Hardware Stack Overflow", _STACK),
    ExceptionKind(10, "Device Illegal Address", _ADDRESS, memory=True, host_words=_ILLEGAL),
    ExceptionKind(11, "Lane Misaligned Address", ProblemClass.MISALIGNED_ADDRESS, memory=True,
                  misaligned=True, host_words=("misaligned-address",), reserved=True),
    ExceptionKind(12, "Warp Assert", ProblemClass.DEVICE_ASSERT, host_words=("device-assert",)),
    ExceptionKind(13, "Lane Syscall Error", _OTHER, reserved=True),
    ExceptionKind(14, "Warp Illegal Address", _ADDRESS, memory=True, host_words=_ILLEGAL),
    # System-scope atomics on memory that cannot take them: raised by the atomic itself.
    ExceptionKind(15, "Lane Nonmigratable Atomsys", _OTHER, memory=True, reserved=True),
    ExceptionKind(16, "Lane Invalid Atomsys", _OTHER, memory=True, reserved=True),
    ExceptionKind(17, "Cluster Out-of-range Address", _ADDRESS, memory=True, host_words=_ILLEGAL),
    ExceptionKind(18, "Cluster Block Not Present", _OTHER),
    ExceptionKind(19, "Warp Stack Canary", _STACK),
    ExceptionKind(20, "Warp Tensor Memory Access Check", _OTHER),
    ExceptionKind(21, "Warp Tensor Memory Leak", _OTHER),
    ExceptionKind(22, "Warp Call Requires Newer Driver", _OTHER),
    ExceptionKind(23, "Warp Misaligned PC", _INSTRUCTION, host_words=("invalid-pc",)),
    ExceptionKind(24, "Warp PC Overflow", _INSTRUCTION, host_words=("invalid-pc",)),
    ExceptionKind(25, "Warp Misaligned Register", _INSTRUCTION),
    ExceptionKind(26, "Warp Illegal Instruction Encoding", _INSTRUCTION,
                  host_words=("illegal-instruction",)),
    ExceptionKind(27, "Warp Illegal Instruction Parameter", _INSTRUCTION,
                  host_words=("illegal-instruction",)),
    ExceptionKind(28, "Warp Out-of-range Register", _INSTRUCTION),
    # A constant-bank load (LDC) out of its bank, and a page the MMU refused: both raised by
    # a memory access, and reported to the host as an illegal address.
    ExceptionKind(29, "Warp Invalid Constant Address", _ADDRESS, memory=True, host_words=_ILLEGAL),
    ExceptionKind(30, "Warp MMU Fault", _ADDRESS, memory=True, host_words=_ILLEGAL),
    ExceptionKind(31, "Warp Barrier Arrival Mismatch", _OTHER),
    ExceptionKind(32, "Cluster Shared Memory Issue", _OTHER),
    ExceptionKind(33, "Warp API Stack Error", _STACK),
    ExceptionKind(34, "Warp Block Not Present", _OTHER),
    ExceptionKind(35, "Warp User Stack Overflow", _STACK),
    ExceptionKind(36, "TMA Syscall", _OTHER),
    ExceptionKind(0xFFFFFFFF, "Device Unknown Exception", _OTHER),
)  # fmt: skip
"""Every code of the public debugger header (CUDBGException_t), in the words cuda-gdb and
LLDB print (LLDB's CUDAExceptionToString): 29, 31 and 32 differ from the enum's names
(WARP_INVALID_CONST_ADDR_LDC, WARP_ARRIVE, CLUSTER_POISON)."""

_BY_CODE = {kind.code: kind for kind in EXCEPTIONS}


def find_exception(code: int | None) -> ExceptionKind | None:
    """The table's row for `code`; None for a code it does not know (or None)."""
    return None if code is None else _BY_CODE.get(code)


def describe_exception(code: int) -> str:
    """The exception's name in words, as cuda-gdb spells it; a reserved code says so, and
    an unknown one is given by number."""
    kind = _BY_CODE.get(code)
    if kind is None:  # cuda-gdb's words for a code it does not know, and the code
        return f"Device Unknown Exception (code {code}, 0x{code:x})"
    if kind.reserved:
        return f"{kind.name} (a code reserved since CUDA 13.4)"
    return kind.name


def codes_for_host_words(kind: str) -> frozenset[int]:
    """The codes a host CUDA error of this kind (``illegal-address``) stands for."""
    return frozenset(k.code for k in EXCEPTIONS if kind in k.host_words)


def is_memory_exception(code: int | None) -> bool:
    """Only a memory access raises it."""
    found = find_exception(code)
    return found is not None and found.memory


def is_misaligned(code: int | None) -> bool:
    """It says an address was misaligned."""
    found = find_exception(code)
    return found is not None and found.misaligned
