"""The kernel's arguments, read from the grid's parameter memory and typed from the kernel's
demangled signature, and which one the faulting address most plausibly came from
("fault = arg0 + 0x543000"), with the reasoning.

Only a pointer is an origin. When the signature's types are known (matched to `.nv.info`'s
parameters by ordinal), only a pointer-typed argument is a candidate, and a struct passed by
value never is: its fields are not known from the dump, and two small integers packed in 8
bytes read as a value in the pointer range. A CUTLASS or FlashAttention kernel takes every
pointer inside one `Params` struct, so the word of the struct nearest below the address is
reported as a fact beside the verdict (``arg0@0x10`` holds 0x7f…, 0x45430 below the address),
never as the culprit. Without types, any 8-byte value in the pointer range counts, and the
reasoning says so.

The culprit is not simply the numerically nearest pointer. An out-of-bounds access lands at
or above the buffer it indexes (past its end, or inside it); one below a buffer is a negative
index only when it is close. An address on the end of a count argument's elements (or of the
rows of two counts) is the strongest evidence there is, and it decides; but among many integer
arguments some product lands on an offset by chance, so it is said only under strict rules
(`postmortem.analysis.forensics.extent`), and as a hypothesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from postmortem.analysis.forensics.argument import KernelArgument
from postmortem.analysis.forensics.extent import index_relation
from postmortem.analysis.forensics.paramtypes import argument_kind
from postmortem.coredump import Coredump
from postmortem.cubin.nvinfo import KernelInfo, KernelParam, read_kernel_info
from postmortem.demangle import demangle, parameter_types
from postmortem.errors import NvInfoError
from postmortem.model import Grid

# Device pointers are user-space virtual addresses above 4 GiB (the driver maps device
# memory high) and below the 57-bit limit of 5-level paging. Anything else in an 8-byte slot
# is a count, a size, a float pair or a flag.
_LOWEST_POINTER = 1 << 32
_HIGHEST_POINTER = 1 << 57
# Without the cubin's parameter layout, the slots shown: parameters beyond this are rare,
# and constant bank 0 goes on for 64 KiB.
_UNLAID_SLOTS = 64
# How far below a buffer a negative index plausibly lands (a few rows of a large tensor), and
# how much less plausible than the same distance above it: `out[-1]` beats `in + 100 MiB`, and
# 128 MiB below one buffer loses to 1 GiB past the end of another.
_BELOW_REACH = 1 << 20
_BELOW_PENALTY = 16
# No buffer spans a terabyte: an address further past a base (a garbage index, a pointer
# read from freed memory) is not that argument's.
_ABOVE_REACH = 1 << 40
# A runner-up is shown when its score is within this factor of the culprit's.
_CLOSE_CALL = 8
# Counts an index is compared with: from 2 (a 0 or 1 matches anything) up to 2**31.
_SMALLEST_COUNT = 2
_LARGEST_COUNT = 1 << 31
# The words of one by-value struct weighed as possible pointer fields (a CUTLASS `Params`
# holds a few dozen; a 4 KiB struct is mostly not pointers).
_MOST_FIELDS = 64


@dataclass(frozen=True, slots=True)
class KernelArguments:
    """The grid's arguments and the pointer the faulting address is attributed to."""

    source: str
    """Where the bytes came from: ".cudbg.param" or "constant bank 0"."""
    layout: str
    """".nv.info" (the cubin's parameter offsets and sizes) or "8-byte slots"."""
    arguments: tuple[KernelArgument, ...]
    culprit: KernelArgument | None
    """The pointer the address most plausibly came from; None when no pointer argument is a
    plausible origin (no address, or every pointer far above it)."""
    reasoning: str | None = None
    """Why the culprit was chosen, in words (or why none was, when a by-value struct was left
    out)."""
    gist: str | None = None
    """The reasoning in a few words, for a summary line: ``index = arg2: one past the end?``."""
    runner_up: KernelArgument | None = None
    """The next most plausible pointer, when the call is close."""
    types_unknown: str | None = None
    """Why the arguments' types are not known, so that positions and values alone were
    weighed; None when they came from the demangled signature."""


def read_arguments(
    core: Coredump,
    grid: Grid,
    cubin: bytes | None,
    kernel: str | None,
    address: int | None,
    width_bytes: int | None = None,
) -> tuple[KernelArguments | None, str | None]:
    """Decode the grid's parameters, typed from the demangled name of `kernel` (mangled), and
    attribute `address` (accessed `width_bytes` at a time) to one of them; None and the reason
    when the dump holds no parameter memory."""
    data, source = _parameter_bytes(core, grid)
    if data is None:
        return None, (
            "the dump holds no parameter memory for the grid (no .cudbg.param section, and "
            "constant bank 0 was not captured)"
        )
    info = _kernel_info(cubin, kernel)
    spans: list[tuple[int | None, int, int]]
    if info is not None and info.params:
        spans = [(p.ordinal, p.offset, p.size_bytes) for p in info.params]
        layout = ".nv.info"
        types, unknown = _signature(kernel, info.params)
    else:
        usable = min(len(data) - len(data) % 8, 8 * _UNLAID_SLOTS)
        spans = [(None, offset, 8) for offset in range(0, usable, 8)]
        layout = "8-byte slots"
        types, unknown = None, "no parameter layout to match the signature to"
    arguments = decode_arguments(data, spans, types, address)
    return attribute(
        source, layout, arguments, width_bytes, types_unknown=unknown, address=address
    ), None


def _parameter_bytes(core: Coredump, grid: Grid) -> tuple[bytes | None, str]:
    data = core.params(grid)
    if data is not None:
        return data, ".cudbg.param"
    offset = grid.params_offset
    for bank in core.constbanks(grid):
        if offset is not None and bank.bank_id == 0 and bank.size_bytes > offset:
            size = bank.size_bytes - offset
            captured = core.read_memory(bank.addr + offset, size)
            if captured is not None:
                return captured, "constant bank 0"
    return None, ""


def _kernel_info(cubin: bytes | None, kernel: str | None) -> KernelInfo | None:
    if cubin is None or kernel is None:
        return None
    try:
        return read_kernel_info(cubin, kernel)
    except NvInfoError:
        return None


def _signature(
    kernel: str | None, params: Sequence[KernelParam]
) -> tuple[tuple[str, ...] | None, str | None]:
    # The signature's types, one per `.nv.info` parameter by ordinal, or why there are none.
    types = parameter_types(demangle(kernel)) if kernel else None
    if types is None:
        return None, "the kernel's name carries no parameter list"
    if len(types) != len(params):
        return None, f"the signature lists {len(types)} parameters, .nv.info {len(params)}"
    if sorted(p.ordinal for p in params) != list(range(len(types))):
        return None, f".nv.info's parameter ordinals do not run from 0 to {len(types) - 1}"
    return types, None


def decode_arguments(
    data: bytes,
    spans: Sequence[tuple[int | None, int, int]],
    types: Sequence[str] | None,
    address: int | None,
) -> tuple[KernelArgument, ...]:
    """The arguments in parameter memory `data` at `spans` (ordinal, offset, size), typed by
    ordinal from `types` when given, each pointer measured against `address`. With types, only
    a pointer type is a pointer; without, any 8-byte value in the pointer range is."""
    found = []
    for ordinal, offset, size in spans:
        if offset >= len(data):
            continue
        type_name = None
        if types is not None and ordinal is not None and 0 <= ordinal < len(types):
            type_name = types[ordinal]
        kind = argument_kind(type_name)
        raw = data[offset : offset + min(size, 8)]
        value = int.from_bytes(raw, "little")
        pointer = _in_range(raw) and (kind == "pointer" or types is None)
        distance = address - value if pointer and address is not None else None
        argument = KernelArgument(ordinal, offset, size, value, pointer, distance, type_name, kind)
        if kind == "aggregate":
            argument = replace(argument, words=_pointer_words(data, offset, size))
        found.append(argument)
    return tuple(found)


def _in_range(raw: bytes) -> bool:
    value = int.from_bytes(raw, "little")
    return len(raw) == 8 and _LOWEST_POINTER <= value < _HIGHEST_POINTER


def _pointer_words(data: bytes, offset: int, size: int) -> tuple[tuple[int, int], ...]:
    # A by-value struct's aligned words in the pointer range: each a pointer field, perhaps.
    end = min(offset + size, len(data))
    found = [
        (at - offset, int.from_bytes(data[at : at + 8], "little"))
        for at in range(offset + (-offset % 8), end - 7, 8)
        if _in_range(data[at : at + 8])
    ]
    return tuple(found[:_MOST_FIELDS])


def attribute(
    source: str,
    layout: str,
    arguments: tuple[KernelArgument, ...],
    width_bytes: int | None,
    *,
    types_unknown: str | None = None,
    address: int | None = None,
) -> KernelArguments:
    """The arguments with their culprit chosen (the rules are in the module docstring). The
    types are known when the arguments carry them; else `types_unknown` says why not. With
    the faulting `address`, the reasoning names each by-value struct that was left out."""
    typed = any(a.type_name is not None for a in arguments)
    unknown = None if typed else (types_unknown or "no signature was read")
    ranked = _ranked(arguments, typed, width_bytes)
    asides = _left_out(arguments, address) if typed and address is not None else []
    if not ranked:
        why = "; ".join(["no pointer argument is a plausible origin", *asides]) if asides else None
        return KernelArguments(
            source, layout, arguments, None, reasoning=why, types_unknown=unknown
        )
    (best_score, culprit, index), *rest = ranked
    runner_up = None
    if rest and rest[0][0][0] == best_score[0] and rest[0][0][1] <= _CLOSE_CALL * best_score[1]:
        runner_up = rest[0][1]
    reasoning, gist = _reasoning(culprit, index, runner_up)
    if unknown is not None:
        asides.append(
            f"the types were not known ({unknown}), so any 8-byte value in the pointer range "
            "counted as a pointer"
        )
    return KernelArguments(
        source, layout, arguments, culprit, reasoning="; ".join([reasoning, *asides]),
        gist=gist, runner_up=runner_up, types_unknown=unknown,
    )  # fmt: skip


_Ranked = tuple[tuple[int, int], KernelArgument, tuple[str, str] | None]


def _ranked(
    arguments: Sequence[KernelArgument], typed: bool, width_bytes: int | None
) -> list[_Ranked]:
    # The candidates, most plausible first, each with its index relation: with types, only
    # pointer-typed arguments; without, any argument whose value is in the pointer range.
    counts = [a for a in arguments if _is_count(a, typed)]
    candidates = [a for a in arguments if a.kind == "pointer" or not typed]
    return sorted(
        (
            (_score(a.distance, index), a, index)
            for a in candidates
            if a.distance is not None and _plausible(a.distance)
            for index in (index_relation(a, counts, width_bytes),)
        ),
        key=lambda entry: entry[0],
    )


def _left_out(arguments: Sequence[KernelArgument], address: int) -> list[str]:
    # A struct passed by value may hold the pointer the address came from, but which of its
    # words is a pointer is not known from the dump: it is named, with the word nearest below
    # the address as a fact, never weighed.
    said = []
    for a in arguments:
        if a.kind != "aggregate" or a.size_bytes < 8:
            continue
        line = f"{a.label} is left out: a by-value struct; its fields are not known"
        below = [(address - v, at, v) for at, v in a.words if 0 <= address - v <= _ABOVE_REACH]
        if below:
            gap, at, value = min(below)
            line += (
                f" (its word at 0x{at:x} holds 0x{value:x}, 0x{gap:x} below the address: a "
                "pointer field, perhaps)"
            )
        said.append(line)
    return said


def _plausible(distance: int) -> bool:
    return -_BELOW_REACH <= distance <= _ABOVE_REACH


def _score(distance: int, index: tuple[str, str] | None) -> tuple[int, int]:
    # An index relation first; then the distance, a distance below the buffer counting more.
    weight = distance if distance >= 0 else -distance * _BELOW_PENALTY
    return (0 if index is not None else 1, weight)


def _is_count(argument: KernelArgument, typed: bool) -> bool:
    # With types, only an integer argument is a count (a float's bits are no count).
    return (
        (argument.kind == "integer" if typed else not argument.is_pointer_like)
        and argument.size_bytes in (4, 8)
        and _SMALLEST_COUNT <= argument.value < _LARGEST_COUNT
    )


def _reasoning(
    culprit: KernelArgument, index: tuple[str, str] | None, runner_up: KernelArgument | None
) -> tuple[str, str]:
    """Why `culprit` was chosen, in full and in a few words."""
    distance = culprit.distance or 0
    label = culprit.label
    if index is not None:
        why, gist = index
    elif distance < 0:
        why = gist = f"just below {label}: a negative index?"
    elif distance == 0:
        why = gist = f"exactly at {label}"
    else:
        why = f"the closest pointer below: past the end of {label}, or inside it"
        gist = f"past the end of {label}, or inside it"
    if runner_up is not None:
        why += f"; runner-up: {runner_up.relation}"
    return why, gist
