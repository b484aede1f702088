"""The view model of `postmortem info`: the `DumpSummary` as plain data, with its faults
grouped by exception and PC for the text layout (`report/info_text.py`)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import replace
from enum import Enum
from typing import Any

from postmortem.analysis.fault.counts import count_faults
from postmortem.exceptions import describe_exception
from postmortem.model import Fault, Metadata
from postmortem.report.values import Json, version_or_none
from postmortem.summary import DumpSummary

FAULT_GROUPS_SHOWN = 20
"""(exception, PC) groups the text lists; the JSON has every fault."""


def build_info(summary: DumpSummary, every_fault: bool = True) -> Json:
    """The summary as plain data (what `info --json` prints; stable keys, addresses as
    integers), plus `fault_summary`: the faults counted and grouped by exception and PC.
    Without `every_fault`, `faults` is left empty: the text shows the groups only, and a
    grid-wide fault of a full GPU has a record per lane (270,336 on an H100)."""
    data: Json = _plain(replace(summary, faults=()) if not every_fault else summary)
    data["fault_summary"] = _fault_summary(summary.faults)
    return data


def _fault_summary(faults: tuple[Fault, ...]) -> Json:
    groups: dict[tuple[int | None, int | None], list[Fault]] = defaultdict(list)
    for fault in faults:
        groups[(fault.exception, fault.error_pc)].append(fault)
    counts = count_faults(faults)
    return {
        "pcs": len({(f.device_index, f.error_pc) for f in faults}),
        "codes": len({f.exception for f in faults}),
        "lanes": counts.lanes,
        "warps": counts.warps,
        "without_lane": counts.records - counts.lanes,
        "groups": [
            {"count": len(members), "first": _plain(members[0])}
            for members in list(groups.values())[:FAULT_GROUPS_SHOWN]
        ],
        "groups_left_out": max(0, len(groups) - FAULT_GROUPS_SHOWN),
    }


_ATOMS = (int, str, float, bool, type(None))


def _plain(value: Any) -> Any:
    if type(value) in _ATOMS:  # most values of a dump's rows: checked first
        return value
    names = _field_names(type(value))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names} | _extra(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _field_names(kind: type) -> tuple[str, ...] | None:
    """A dataclass's fields but `ref`, looked up once per class (a dump's tables can hold
    thousands of rows); None for anything else."""
    if kind not in _FIELD_NAMES:
        fields = dataclasses.fields(kind) if dataclasses.is_dataclass(kind) else None
        _FIELD_NAMES[kind] = (
            None if fields is None else tuple(f.name for f in fields if f.name != "ref")
        )
    return _FIELD_NAMES[kind]


def _extra(value: Any) -> dict[str, Any]:
    if isinstance(value, Fault):
        return {"exception_name": value.exception_name}
    if isinstance(value, Metadata):
        return {
            "flag_names": list(value.flag_names),
            "driver_version_text": version_or_none(value.driver_version),
            "cuda_driver_version_text": version_or_none(value.cuda_driver_version),
        }
    if isinstance(getattr(value, "exception", None), int):  # noqa: B009
        return {"exception_name": describe_exception(value.exception)}
    return {}
