"""The definitions that more than one shipped schema carries, each written here once.

Closed sets of values come from the code's own enums (`values`), so a member added there
reaches every schema that lists the set the next time they are generated.
"""

from __future__ import annotations

import copy
import typing
from enum import Enum
from typing import Any

from postmortem.analysis.fleet.incident import Role
from postmortem.exceptions import ProblemClass
from postmortem.findings import FindingCode, Severity
from postmortem.model import TimeSource

Schema = dict[str, Any]

DRAFT = "https://json-schema.org/draft/2020-12/schema"

BARRIER_KINDS = ("cta", "named", "mbarrier", "cluster", "convergence")
"""What a hung warp group waits at (`HangGroup.barrier`): analysis/hang/barriers.py's
`barrier_kind` and the pipeline's "mbarrier"; the code spells them as strings, not an enum."""

HANG_FINDINGS = (
    FindingCode.DIVERGENT_BARRIER,
    FindingCode.CONVERGENCE_SPLIT,
    FindingCode.SPIN_WAIT,
    FindingCode.NAMED_BARRIER_WAIT,
    FindingCode.NAMED_BARRIER_STARVED,
    FindingCode.MBARRIER_WAIT,
    FindingCode.CIRCULAR_WAIT,
    FindingCode.PIPELINE_STALLED,
    FindingCode.COLLECTIVE_WAIT,
    FindingCode.LOOP_BOUND,
    FindingCode.BUSY_SNAPSHOT,
)
"""The findings a hang analysis makes (`HangAnalysis.findings`): its deadlock patterns,
the runaway-loop bound (hang.py `_bound_findings`) and the busy snapshot (verdicts.py)."""


def values(kind: Any, *, null: bool = False) -> list[Any]:
    """The values of an enum class or a `Literal` alias, in their declared order; with `null`,
    None after them."""
    found = (
        [m.value for m in kind]
        if isinstance(kind, type) and issubclass(kind, Enum)
        else [*typing.get_args(kind)]
    )
    return [*found, None] if null else found


def nullable(schema: Schema) -> Schema:
    """`schema` with null allowed by its `type`."""
    shown = copy.deepcopy(schema)
    kind = shown["type"]
    shown["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
    return shown


def null_or(schema: Schema) -> Schema:
    """null, or `schema`."""
    return {"oneOf": [{"type": "null"}, schema]}


def severity(**more: Any) -> Schema:
    return {"enum": values(Severity), **more}


def barrier() -> Schema:
    return {"enum": [*BARRIER_KINDS, None]}


TOOL: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "version"],
    "properties": {"name": {"const": "postmortem"}, "version": {"type": "string"}},
}

FINDING: Schema = {
    "description": "Something the reader had to set aside or read in part, and why.",
    "type": "object",
    "additionalProperties": False,
    "required": ["caveat", "code", "evidence", "message", "remedy", "severity"],
    "properties": {
        "code": {
            "type": "string",
            "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$",
            "description": (
                'The stable code of what was found ("partial-dump"); new codes may be added.'
            ),
        },
        "severity": severity(),
        "message": {"type": "string", "description": "What was seen, in one line."},
        "evidence": {"type": "array", "items": {"type": "string"}, "description": "What shows it."},
        "remedy": {
            "type": ["string", "null"],
            "description": "What to do about it, when something can be done.",
        },
        "caveat": {
            "type": ["string", "null"],
            "description": "What the evidence does not prove, when it stops short of proof.",
        },
    },
}
"""A finding in full (`Finding`): `info`'s findings and the host evidence's."""


def oncall(at: str) -> Schema:
    """The on-call summary, placed at the JSON pointer `at` of its document (its statements
    refer to its own `$defs`)."""
    statement = {"$ref": f"{at}/$defs/statement"}
    return {
        "description": (
            "The on-call summary (SGLang's serving-debug output contract): problem class, "
            "strongest signal, best guess, what was ruled out, next step; each statement names "
            "its source. A part with no basis is null (ruled_out: an empty list means none "
            "checked)."
        ),
        "type": "object",
        "additionalProperties": False,
        "required": [
            "best_guess", "next_step", "problem", "problem_class", "ruled_out", "strongest_signal"
        ],
        "$defs": {
            "statement": {
                "type": "object",
                "additionalProperties": False,
                "required": ["source", "text"],
                "properties": {"text": {"type": "string"}, "source": {"type": "string"}},
            },
        },
        "properties": {
            "problem_class": {"enum": values(ProblemClass)},
            "problem": {"type": "string"},
            "strongest_signal": null_or(statement),
            "best_guess": null_or(
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "address", "frame", "instruction", "kernel", "source_line", "unknown"
                    ],
                    "properties": {
                        **{
                            part: null_or(statement)
                            for part in ("kernel", "instruction", "frame", "source_line", "address")
                        },
                        "unknown": {"type": "array", "items": {"type": "string"}},
                    },
                }
            ),
            "ruled_out": {"type": "array", "items": statement},
            "next_step": null_or(statement),
        },
    }  # fmt: skip


INCIDENT_REQUIRED = ("counts", "dumps", "notes", "oncall", "verdict")


def incident_properties(oncall_at: str) -> Schema:
    """The incident of several dumps of one job (report/incident.py `incident_json`): what
    `analyze` writes for them and the line `scan --incident` adds, with its on-call summary
    at `oncall_at`."""
    count = {"type": "integer", "minimum": 0}
    return {
        "verdict": {
            "type": "object",
            "additionalProperties": False,
            "required": ["agree", "headline", "kind", "lead", "of"],
            "properties": {
                "kind": {"enum": ["fault", "hang", "collateral", "unreadable"]},
                "headline": {"type": "string"},
                "lead": {"type": ["string", "null"]},
                "agree": count,
                "of": count,
            },
        },
        "counts": {
            "type": "object",
            "additionalProperties": False,
            "required": values(Role),
            "properties": dict.fromkeys(values(Role), count),
        },
        "dumps": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "error", "exception", "exception_name", "headline", "kernels", "path", "role",
                    "signature", "time", "time_source", "time_utc", "why",
                ],
                "properties": {
                    "path": {"type": "string"},
                    "role": {"enum": values(Role)},
                    "why": {"type": "string"},
                    "time": {"type": ["number", "null"]},
                    "time_utc": {"type": ["string", "null"]},
                    # An incident orders by metadata timestamp, else modification time.
                    "time_source": {
                        "enum": [TimeSource.METADATA.value, TimeSource.MTIME.value, None]
                    },
                    "error": {"type": ["string", "null"]},
                    "exception": {"type": ["integer", "null"]},
                    "exception_name": {"type": ["string", "null"]},
                    "headline": {"type": ["string", "null"]},
                    "signature": {"type": ["string", "null"]},
                    "kernels": {"type": "array", "items": {"type": ["string", "null"]}},
                },
            },
        },
        "notes": {"type": "array", "items": {"type": "string"}},
        "oncall": null_or({"$ref": oncall_at}),
    }  # fmt: skip


FRAME: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["file", "library", "line"],
    "properties": {
        "file": {
            "type": "string",
            "description": "The source path after `--map-path` and normalization.",
        },
        "line": {"type": "integer"},
        "library": {
            "type": "boolean",
            "description": "The path matches a library pattern of the rules.",
        },
    },
}
"""One frame of a signature's inline chain."""

SIGNATURE_COMPONENTS = ("exception", "kernel", "offset", "function", "frames", "assert")


def signature_properties(frame: Schema) -> Schema:
    """A crash signature (scan/outputs/index.py `signature_view`): what `signature --json`
    prints for a dump (with its path) and what a scan's rows and groups carry; `frame` is
    the schema of one of its frames, or a reference to it."""
    short_hash = {"type": "string", "pattern": "^[0-9a-f]{12}$"}
    key = {"type": "string", "pattern": "^v[0-9]+\\|"}
    return {
        "version": {
            "type": "integer",
            "minimum": 1,
            "description": (
                "The signature algorithm's version; keys of different versions never match."
            ),
        },
        "rules": {
            "type": "string",
            "description": "The rules' name and digest, e.g. `default@3f2a…`.",
        },
        "id": {
            **short_hash,
            "description": "A short hash of `key`: the group's name in `postmortem scan`.",
        },
        "key": {
            **key,
            "description": (
                "The full key, readable: `v2|exception|kernel|+0xoffset|function|frames`, `?` "
                "for a part that is unknown."
            ),
        },
        "coarse_id": {**short_hash, "description": "A short hash of `coarse_key`."},
        "coarse_key": {
            **key,
            "description": (
                "Version, exception and kernel only: signatures that share it are near-duplicates."
            ),
        },
        "exception": {
            "type": "string",
            "description": (
                'The exception in words; "no exception" for a dump that records none (a hang).'
            ),
        },
        "kernel": {
            "type": "string",
            "description": (
                "The kernel, demangled and normalized (return type and parameters dropped, "
                "template argument lists collapsed to `<>`); `<unknown kernel>` when no symbol "
                "holds the PC."
            ),
        },
        "function": {
            "type": ["string", "null"],
            "description": (
                "The innermost in-app frame's function, normalized; null when no source names it."
            ),
        },
        "offset": {
            "type": ["integer", "null"],
            "minimum": 0,
            "description": "Offset of the PC in the kernel's code section.",
        },
        "offset_hex": {
            "type": ["string", "null"],
            "pattern": "^0x[0-9a-f]+$",
            "description": "`offset` in hex.",
        },
        "frames": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The frames in the key (`file:line`), innermost first.",
        },
        "all_frames": {
            "type": "array",
            "description": "Every frame of the inline chain, normalized, innermost first.",
            "items": frame,
        },
        "skipped": {
            "type": "integer",
            "minimum": 0,
            "description": "Library frames skipped before the first in-app frame.",
        },
        "components": {
            "type": "array",
            "items": {"enum": list(SIGNATURE_COMPONENTS)},
            "description": (
                "Which parts contributed to the key (the others are unknown for this dump)."
            ),
        },
        "quality": {
            "type": "object",
            "description": "How much the signature can be trusted.",
            "additionalProperties": False,
            "required": ["advice", "function_resolved", "in_app_frame", "line_info", "score"],
            "properties": {
                "score": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 3,
                    "description": (
                        "One point each for a resolved function, line info, an in-app frame."
                    ),
                },
                "function_resolved": {"type": "boolean"},
                "line_info": {"type": "boolean", "description": "The signature has source frames."},
                "in_app_frame": {"type": "boolean"},
                "advice": {
                    "type": ["string", "null"],
                    "description": (
                        'What would make the signature precise (e.g. "rebuild with -lineinfo"), '
                        "when it is not."
                    ),
                },
            },
        },
    }
