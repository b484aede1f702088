"""The forensics, the fault census and the build provenance as plain report data."""

from __future__ import annotations

import math
import struct
from collections.abc import Collection, Sequence

from postmortem.analysis.fault.census import CensusRow, CoordinateRange
from postmortem.analysis.fault.counts import FaultCounts
from postmortem.analysis.forensics.address import AddressSpread
from postmortem.analysis.forensics.argument import KernelArgument
from postmortem.analysis.forensics.arguments import KernelArguments
from postmortem.analysis.forensics.forensics import Forensics
from postmortem.analysis.provenance import BuildInfo
from postmortem.report.values import Json, dim_or_none, exception_json, hex_or_none, kernel_json


def forensics_json(forensics: Forensics | None, lanes: int | None = None) -> Json | None:
    """One site's forensics, with at most `lanes` lane addresses (all when None; the count
    stays whole); None when there was no instruction to decode."""
    if forensics is None:
        return None
    access = forensics.access
    spread = forensics.spread
    return {
        "access": None
        if access is None
        else {
            "space": access.space,
            "kind": access.kind,
            "width_bytes": access.width_bytes,
            "operand": access.address.raw if access.address else None,
        },
        "formula": forensics.formula,
        "lane_set": forensics.lane_set,
        "lanes": [
            {
                "device": a.device_index,
                "sm": a.sm_id,
                "warp": a.warp_id,
                "lane": a.lane,
                "block": dim_or_none(a.block_idx),
                "thread": dim_or_none(a.thread_idx),
                "address": a.address,
                "address_hex": hex_or_none(a.address),
                "missing": list(a.missing),
                "registers": [{"name": n, "value_hex": f"0x{v:x}"} for n, v in a.registers],
            }
            for a in forensics.lanes[:lanes]
        ],  # fmt: skip
        "lane_count": len(forensics.lanes),
        "spread": None if spread is None else _spread(spread),
        "checks": [
            {
                "check": c.check,
                "verdict": c.verdict,
                "message": c.message,
                "excess_bytes": c.excess_bytes,
            }
            for c in forensics.checks
        ],  # fmt: skip
        "arguments": _arguments(forensics.arguments),
        "notes": [n.message for n in forensics.notes],
    }


def _spread(spread: AddressSpread) -> Json:
    group = spread.lanes_per_address
    return {
        "count": spread.count,
        "min_hex": f"0x{spread.minimum:x}",
        "max_hex": f"0x{spread.maximum:x}",
        "span_bytes": spread.maximum - spread.minimum,
        "distinct": spread.distinct,
        "stride_bytes": spread.stride_bytes,
        "irregular_lanes": [list(x) for x in spread.irregular_lanes],
        "pattern": spread.pattern,
        "address_step_bytes": spread.address_step_bytes,
        "lanes_per_address": None if group is None else list(group),
        "description": spread_text(spread),
    }


def spread_text(spread: AddressSpread) -> str:
    """The pattern of the lanes' addresses in words: ``4 distinct addresses 4 bytes apart,
    8 lanes each``, ``stride 4096 bytes per lane; 1 lane off the stride``."""
    group = spread.lanes_per_address
    each = ""
    if group is not None:
        fewest, most = group
        each = f"{fewest} lanes each" if fewest == most else f"{fewest} to {most} lanes each"
    if spread.pattern == "single":
        return "one lane"
    if spread.pattern == "uniform":
        return f"all {spread.count} lanes at one address"
    if spread.pattern == "broadcast":
        step = spread.address_step_bytes
        return f"{spread.distinct} distinct addresses {step} bytes apart, {each}"
    if spread.pattern == "grouped":
        return f"{spread.distinct} distinct addresses, unevenly spaced, {each}"
    if spread.pattern == "strided" and spread.stride_bytes is not None:
        text = f"stride {spread.stride_bytes} bytes per lane"
        off = len(spread.irregular_lanes)
        if off:
            text += f"; {off} lane{'s' if off != 1 else ''} off the stride"
        return text
    return f"{spread.distinct} distinct addresses, no common stride"


def _arguments(arguments: KernelArguments | None) -> Json | None:
    if arguments is None:
        return None
    culprit = arguments.culprit
    return {
        "source": arguments.source,
        "layout": arguments.layout,
        "items": [_argument(a, a is culprit) for a in arguments.arguments],
        "attribution": None if culprit is None else f"fault = {culprit.relation}",
        "reasoning": arguments.reasoning,
        "runner_up": None if arguments.runner_up is None else arguments.runner_up.relation,
        "types_unknown": arguments.types_unknown,
    }


def _argument(argument: KernelArgument, nearest: bool) -> Json:
    as_int, as_float = _numbers(argument)
    return {
        "name": argument.name,
        "label": argument.label,
        "type": argument.type_name,
        "kind": argument.kind,
        "offset": argument.offset,
        "size_bytes": argument.size_bytes,
        "value_hex": f"0x{argument.value:x}",
        "pointer_like": argument.is_pointer_like,
        "distance": argument.distance,
        "relation": argument.relation,
        "nearest": nearest,
        "as_int": as_int,
        "as_float": as_float,
    }


def _numbers(argument: KernelArgument) -> tuple[int | None, float | None]:
    """A 4- or 8-byte non-pointer read as its type says (an integer, signed unless the type is
    unsigned; a float or double), or, when the type is not known, as a signed integer and,
    when that makes a plausible number, as an IEEE float."""
    kind = argument.kind
    if argument.is_pointer_like or argument.size_bytes not in (4, 8):
        return None, None
    if kind not in ("integer", "floating", "unknown"):
        return None, None
    size = argument.size_bytes
    raw = argument.value.to_bytes(8, "little")[:size]
    unsigned = (argument.type_name or "").startswith("unsigned")
    as_int = int.from_bytes(raw, "little", signed=not unsigned)
    (as_float,) = struct.unpack("<f" if size == 4 else "<d", raw)
    if kind == "integer":
        return as_int, None
    if kind == "floating":
        return None, as_float if math.isfinite(as_float) else None
    # An integer read as a float is usually a denormal: only a plausible float is shown.
    plausible = as_float == 0 or (math.isfinite(as_float) and 1e-30 < abs(as_float) < 1e30)
    return as_int, as_float if plausible else None


def counts_json(counts: FaultCounts) -> Json:
    """Records, lanes, warps, CTAs, SMs and devices of a set of faults."""
    return {
        "records": counts.records,
        "lanes": counts.lanes,
        "warps": counts.warps,
        "ctas": counts.ctas,
        "sms": counts.sms,
        "devices": counts.devices,
    }


def census_json(rows: Sequence[CensusRow]) -> list[Json]:
    """The fault census, one entry per kernel and offset."""
    return [
        {
            "kernel": kernel_json(row.kernel),
            "offset_hex": hex_or_none(row.offset),
            "exceptions": [exception_json(c) for c in row.exceptions],
            **counts_json(row.counts),
            "blocks": _range(row.blocks),
            "threads": _range(row.threads),
            "sms_seen": [list(x) for x in row.sms_seen],
        }  # fmt: skip
        for row in rows
    ]


def builds_json(builds: Sequence[BuildInfo], ran: Collection[str] = ()) -> list[Json]:
    """How each module that matters was built; its kernels that `ran` (were launched or
    faulted) first, so a heading can name them and count the rest of a 300-kernel module."""
    found = []
    for build in builds:
        toolkit = build.toolkit
        kernels = sorted(build.kernels, key=lambda k: k not in ran)
        found.append(
            {
                "module_handle": hex_or_none(build.module_handle),
                "kernels": [kernel_json(k) for k in kernels],
                "kernels_ran": sum(1 for k in kernels if k in ran),
                "elf_abi_version": build.abi_version,
                "sm_arch": toolkit.arch_name(build.sm_arch) if toolkit else f"sm_{build.sm_arch}",
                "tool": toolkit.tool_name if toolkit else None,
                "tool_version": toolkit.tool_version if toolkit else None,
                "build_id": toolkit.tool_branch if toolkit else None,
                "options": toolkit.options.strip() if toolkit and toolkit.options else None,
                "cuda_version": ".".join(map(str, toolkit.cuda_version))
                if toolkit and toolkit.cuda_version
                else None,
                "device_debug": toolkit.has_device_debug if toolkit else None,
                "has_line_info": build.has_line_info,
                "line_info": build.line_info,
            }
        )
    return found


def _range(box: CoordinateRange | None) -> Json | None:
    return None if box is None else {"low": list(box.low), "high": list(box.high)}
