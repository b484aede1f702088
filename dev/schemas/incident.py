"""`postmortem.incident/1`: what `postmortem analyze CORE... --format json` writes for
several dumps of one job (report/incident.py `build_incident_report`)."""

from __future__ import annotations

from dev.schemas import shared
from dev.schemas.shared import Schema
from postmortem.analysis.hang.motion import Motion
from postmortem.model import TimeSource

MOTION: Schema = {
    "description": (
        "Dumps of one process without an exception, compared (earliest with latest, per "
        "process): a warp (device, SM, warp id, grid, block) that did not move kept the PC of "
        "every lane, its valid and active masks and, where both dumps hold them, its registers; "
        "one that moved changed any of them; gone: in the earlier dump only; new: in the later "
        "only. Null when fewer than two dumps without an exception were analyzed."
    ),
    "type": "object",
    "additionalProperties": False,
    "required": ["compared", "not_compared"],
    "$defs": {
        "counts": {
            "type": "object",
            "additionalProperties": False,
            "required": ["did-not-move", "gone", "moved", "new"],
            "properties": {
                "did-not-move": {"type": "integer", "minimum": 0},
                "gone": {"type": "integer", "minimum": 0},
                "moved": {"type": "integer", "minimum": 0},
                "new": {"type": "integer", "minimum": 0},
            },
        },
    },
    "properties": {
        "compared": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "counts",
                    "earlier",
                    "grids",
                    "groups",
                    "later",
                    "notes",
                    "process",
                    "registers_compared",
                    "seconds",
                    "seconds_text",
                    "time_source",
                    "warps",
                    "warps_total",
                ],
                "properties": {
                    "counts": {"$ref": "#/$defs/motion/$defs/counts"},
                    "earlier": {"type": "string"},
                    "grids": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "counts",
                                "device",
                                "grid_id",
                                "kernel",
                                "moved_blocks",
                                "moved_blocks_total",
                                "stuck_blocks",
                                "stuck_blocks_total",
                            ],
                            "properties": {
                                "counts": {"$ref": "#/$defs/motion/$defs/counts"},
                                "device": {"type": "integer"},
                                "grid_id": {"type": ["integer", "null"]},
                                "kernel": {"type": ["string", "null"]},
                                "moved_blocks": {
                                    "type": "array",
                                    "items": {
                                        "type": "array",
                                        "items": {"type": "integer"},
                                        "minItems": 3,
                                        "maxItems": 3,
                                    },
                                },
                                "moved_blocks_total": {"type": "integer", "minimum": 0},
                                "stuck_blocks": {
                                    "type": "array",
                                    "items": {
                                        "type": "array",
                                        "items": {"type": "integer"},
                                        "minItems": 3,
                                        "maxItems": 3,
                                    },
                                },
                                "stuck_blocks_total": {"type": "integer", "minimum": 0},
                            },
                        },
                    },
                    "groups": {
                        "description": (
                            "The warps per PC (function-relative) of the later dump (gone ones: "
                            "of the earlier), those that did not move first, with the later "
                            "dump's instruction and source line there."
                        ),
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "barrier",
                                "blocks",
                                "blocks_total",
                                "counts",
                                "device",
                                "grid_id",
                                "in_polling_loop",
                                "instruction",
                                "offset",
                                "source",
                            ],
                            "properties": {
                                "barrier": shared.barrier(),
                                "blocks": {
                                    "type": "array",
                                    "items": {
                                        "type": "array",
                                        "items": {"type": "integer"},
                                        "minItems": 3,
                                        "maxItems": 3,
                                    },
                                },
                                "blocks_total": {"type": "integer", "minimum": 0},
                                "counts": {"$ref": "#/$defs/motion/$defs/counts"},
                                "device": {"type": "integer"},
                                "grid_id": {"type": ["integer", "null"]},
                                "in_polling_loop": {"type": "boolean"},
                                "instruction": {"type": ["string", "null"]},
                                "offset": {"type": "integer", "minimum": 0},
                                "source": {"type": ["string", "null"]},
                            },
                        },
                    },
                    "later": {"type": "string"},
                    "notes": {"type": "array", "items": {"type": "string"}},
                    "process": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["evidence", "host", "pid", "why"],
                        "properties": {
                            "evidence": {"type": "array", "items": {"type": "string"}},
                            "host": {"type": ["string", "null"]},
                            "pid": {"type": ["integer", "null"]},
                            "why": {"type": "string"},
                        },
                    },
                    "registers_compared": {
                        "description": (
                            "Warps whose registers were compared (both dumps hold them)."
                        ),
                        "type": "integer",
                        "minimum": 0,
                    },
                    "seconds": {"type": "number", "minimum": 0},
                    "seconds_text": {"type": "string"},
                    "time_source": {
                        "description": (
                            "What ordered the two dumps: their metadata timestamps, the %t of "
                            "their names, or their files' modification times."
                        ),
                        "enum": shared.values(TimeSource),
                    },
                    "warps": {
                        "description": (
                            "The warps compared (at most 256: those that did not move first)."
                        ),
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "block_idx",
                                "changed",
                                "device",
                                "grid_id",
                                "motion",
                                "offsets",
                                "registers_compared",
                                "sm",
                                "warp",
                            ],
                            "properties": {
                                "block_idx": {
                                    "oneOf": [
                                        {"type": "null"},
                                        {
                                            "type": "array",
                                            "items": {"type": "integer"},
                                            "minItems": 3,
                                            "maxItems": 3,
                                        },
                                    ],
                                },
                                "changed": {
                                    "type": "array",
                                    "items": {
                                        "enum": ["PC", "valid mask", "active mask", "registers"],
                                    },
                                },
                                "device": {"type": "integer"},
                                "grid_id": {"type": ["integer", "null"]},
                                "motion": {
                                    "enum": shared.values(Motion),
                                },
                                "offsets": {
                                    "type": "array",
                                    "items": {
                                        "type": "array",
                                        "items": {"type": "integer", "minimum": 0},
                                        "minItems": 2,
                                        "maxItems": 2,
                                    },
                                },
                                "registers_compared": {"type": "boolean"},
                                "sm": {"type": ["integer", "null"]},
                                "warp": {"type": ["integer", "null"]},
                            },
                        },
                    },
                    "warps_total": {"type": "integer", "minimum": 0},
                },
            },
        },
        "not_compared": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["dumps", "why"],
                "properties": {
                    "dumps": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 2,
                        "maxItems": 2,
                    },
                    "why": {"type": "string"},
                },
            },
        },
    },
}
"""The comparison of two dumps of one process (analysis/hang/motion.py)."""


def schema() -> Schema:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "postmortem.incident/1",
        "title": "postmortem incident report",
        "description": (
            "What `postmortem analyze CORE... --format json` writes for several dumps of one "
            "job: each dump with its role (first-fault, fault, collateral, stuck, unreadable) in "
            "the order the dumps were written (metadata timestamp, else file modification time; "
            "never the file name), one verdict for the incident, and the on-call summary of the "
            "dump that leads it."
        ),
        "type": "object",
        "additionalProperties": False,
        "required": ["counts", "dumps", "motion", "notes", "oncall", "schema", "tool", "verdict"],
        "$defs": {"oncall": shared.oncall("#/$defs/oncall"), "motion": MOTION},
        "properties": {
            "schema": {"const": "postmortem.incident/1"},
            "tool": shared.TOOL,
            **shared.incident_properties("#/$defs/oncall"),
            "motion": shared.null_or({"$ref": "#/$defs/motion"}),
        },
    }
