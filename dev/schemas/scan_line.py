"""`postmortem.scan-line/1`: each line `postmortem scan --format json` writes (and
`--jsonl`): the scan, then with `--incident` the incident, then every dump, then every group
(scan/outputs/index.py)."""

from __future__ import annotations

from dev.schemas import shared
from dev.schemas.shared import Schema
from postmortem.model import TimeSource
from postmortem.scan.fleet import hardware
from postmortem.scan.fleet.known.model import CrashState, Mark
from postmortem.scan.row import RowStatus

SIGNATURE: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": sorted(shared.signature_properties(shared.FRAME)),
    "properties": shared.signature_properties({"$ref": "#/$defs/frame"}),
}

INCIDENT: Schema = {
    "description": (
        "With --incident: the dumps taken as those of one job, in the order they were written "
        "(metadata timestamp, else file modification time), each with its role, and one verdict."
    ),
    "type": "object",
    "additionalProperties": False,
    "required": ["type", *shared.INCIDENT_REQUIRED],
    "$defs": {"oncall": shared.oncall("#/$defs/incident/$defs/oncall")},
    "properties": {
        "type": {"const": "incident"},
        **shared.incident_properties("#/$defs/incident/$defs/oncall"),
    },
}


def schema() -> Schema:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "postmortem.scan-line/1",
        "title": "postmortem scan: one JSON line",
        "description": (
            "Each line of `postmortem scan --format json` (or --jsonl) is one of: the scan, a "
            "dump, a group, and with --incident the incident (after the scan)."
        ),
        "oneOf": [
            {"$ref": "#/$defs/scan"},
            {"$ref": "#/$defs/dump"},
            {"$ref": "#/$defs/group"},
            {"$ref": "#/$defs/incident"},
        ],
        "$defs": {
            "dump": {
                "type": "object",
                "required": [
                    "cached",
                    "devices",
                    "driver_version",
                    "earliest_in_group",
                    "error",
                    "exception",
                    "exception_name",
                    "fault_sites",
                    "fingerprint",
                    "host",
                    "id",
                    "kernel",
                    "mtime",
                    "path",
                    "pid",
                    "report",
                    "seconds",
                    "signature",
                    "size_bytes",
                    "status",
                    "time",
                    "time_iso",
                    "time_source",
                    "type",
                ],
                "additionalProperties": False,
                "properties": {
                    "beside": {
                        "description": (
                            "Files in the dump's folder that are not dumps (a crash folder's "
                            "request pickles, py-spy stacks, logs), the first 16 by name; empty "
                            "for a dump in an object store."
                        ),
                        "type": "array",
                        "items": {"type": "string"},
                    },
                    "beside_more": {
                        "description": "How many more files lie there.",
                        "type": "integer",
                        "minimum": 0,
                    },
                    "build_key": {
                        "description": (
                            "The build of the faulting module: 16 hex digits of a hash of its "
                            "cubin's content with its load addresses set to zero; null without a "
                            "located fault or the module's image."
                        ),
                        "$ref": "#/$defs/nullable_string",
                    },
                    "cached": {"type": "boolean"},
                    "devices": {"type": "array", "items": {"type": "string"}},
                    "driver_version": {"$ref": "#/$defs/nullable_string"},
                    "earliest_in_group": {"type": "boolean"},
                    "engine_trigger": {
                        "description": (
                            "log:line of the serving engine's \"Triggered CUDA user coredump for "
                            "PID N\" line naming this dump's process: the engine asked for the "
                            "dump (a hang it saw)."
                        ),
                        "$ref": "#/$defs/nullable_string",
                    },
                    "error": {"$ref": "#/$defs/nullable_string"},
                    "exception": {"type": ["integer", "null"]},
                    "exception_name": {"$ref": "#/$defs/nullable_string"},
                    "fault_sites": {"type": "integer", "minimum": 0},
                    "fingerprint": {
                        "type": ["string", "null"],
                        # An object's is its identity in the store (discover/remote.py
                        # `ObjectInfo.fingerprint`): its bytes are not read to fingerprint it.
                        "pattern": "^([0-9a-f]{32}|object\\|.*)$",
                        "description": (
                            "The dump's content fingerprint (the scan cache's): copies of one "
                            "dump share it; null when the file could not be read. A dump in an "
                            "object store has `object|URL|size|version` instead (the store's "
                            "size and ETag, generation or version id), which copies do not share."
                        ),
                    },
                    "gpu": {
                        "description": (
                            "The GPU that faulted (of a dump without a fault: its first GPU) as "
                            "host/PCI address; null when the dump has no device row."
                        ),
                        "$ref": "#/$defs/nullable_string",
                    },
                    "gpu_name": {"$ref": "#/$defs/nullable_string"},
                    "host": {"$ref": "#/$defs/nullable_string"},
                    "id": {
                        "type": "string",
                        "pattern": "^[0-9a-f]{32}$",
                        "description": (
                            "Stable: the same file (absolute path) with the same content has the "
                            "same id at every scan; a document id for a search index."
                        ),
                    },
                    "instruction": {
                        "description": (
                            "The SASS instruction at the faulting PC, as nvdisasm prints it "
                            "(worked out once per cubin and function and kept in the scan "
                            "cache); null without a located fault or a listing."
                        ),
                        "$ref": "#/$defs/nullable_string",
                    },
                    "instruction_note": {
                        "description": (
                            "Why there is no instruction: nvdisasm refused the function's image "
                            "(every copy tried) or could not run."
                        ),
                        "$ref": "#/$defs/nullable_string",
                    },
                    "kernel": {"$ref": "#/$defs/nullable_string"},
                    "mtime": {"type": "number"},
                    "path": {"type": "string"},
                    "pci_address": {
                        "description": (
                            "That GPU's PCI address as the driver's Xid lines print it "
                            "(0000:bb:dd.0)."
                        ),
                        "$ref": "#/$defs/nullable_string",
                    },
                    "pid": {"type": ["integer", "null"]},
                    "report": {"$ref": "#/$defs/nullable_string"},
                    "seconds": {"type": "number", "minimum": 0},
                    "signature": {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/signature"}]},
                    "size_bytes": {"type": "integer", "minimum": 0},
                    "sm": {
                        "description": "The SM of the first fault.",
                        "type": ["integer", "null"],
                    },
                    "status": {
                        "enum": shared.values(RowStatus),
                    },
                    "time": {"type": "number"},
                    "time_iso": {"type": "string"},
                    "time_source": {
                        "enum": shared.values(TimeSource),
                    },
                    "type": {"const": "dump"},
                },
                "if": {"properties": {"status": {"const": "ok"}}},
                "then": {
                    "properties": {
                        "error": {"type": "null"},
                        "signature": {"$ref": "#/$defs/signature"},
                    },
                },
                "else": {
                    "properties": {
                        "error": {"type": "string", "pattern": "^[^\\n]+$"},
                        "signature": {"type": "null"},
                    },
                },
            },
            "fleet_verdict": {
                "description": (
                    "Hardware or code (NVIDIA's Xid 13/31 guidance applied to dumps): code when "
                    "one signature spans many GPUs, hardware when one GPU or SM faults across "
                    "signatures no other GPU shows; too-few below the minimum counts; unclear "
                    "otherwise. The counts are those it rests on."
                ),
                "type": "object",
                "additionalProperties": False,
                "required": ["dumps", "gpus", "hosts", "kind", "reason", "signatures", "sm"],
                "properties": {
                    "dumps": {"type": "integer", "minimum": 0},
                    "gpus": {"type": "integer", "minimum": 0},
                    "hosts": {"type": "integer", "minimum": 0},
                    "kind": {
                        "enum": [
                            hardware.CODE,
                            hardware.HARDWARE,
                            hardware.TOO_FEW,
                            hardware.UNCLEAR,
                        ],
                    },
                    "reason": {"type": "string"},
                    "signatures": {"type": "integer", "minimum": 0},
                    "sm": {"type": ["integer", "null"]},
                },
            },
            "frame": shared.FRAME,
            "gpu": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "dumps",
                    "fleet_verdict",
                    "host",
                    "id",
                    "name",
                    "pci_address",
                    "signatures",
                    "sms",
                ],
                "properties": {
                    "dumps": {"type": "integer", "minimum": 0},
                    "fleet_verdict": {"$ref": "#/$defs/fleet_verdict"},
                    "host": {"$ref": "#/$defs/nullable_string"},
                    "id": {"type": "string"},
                    "name": {"$ref": "#/$defs/nullable_string"},
                    "pci_address": {"type": "string"},
                    "signatures": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["count", "id"],
                            "properties": {
                                "count": {"type": "integer", "minimum": 1},
                                "id": {"type": "string"},
                            },
                        },
                    },
                    "sms": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["count", "sm"],
                            "properties": {
                                "count": {"type": "integer", "minimum": 1},
                                "sm": {"type": "integer"},
                            },
                        },
                    },
                    "xids": {
                        "description": (
                            "With --host-log: the Xid 13/31/43/79 lines of the host logs joined "
                            "to this GPU by PCI bus and device (and host, where both the line "
                            "and the dump's file name give one), and how many lines each."
                        ),
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["count", "xid"],
                            "properties": {
                                "count": {"type": "integer", "minimum": 1},
                                "xid": {"type": "integer"},
                            },
                        },
                    },
                },
            },
            "group": {
                "type": "object",
                "required": [
                    "count",
                    "devices",
                    "driver_versions",
                    "dumps",
                    "earliest",
                    "earliest_source",
                    "first_seen",
                    "first_seen_iso",
                    "hosts",
                    "id",
                    "kernel",
                    "last_seen",
                    "last_seen_iso",
                    "pids",
                    "rank",
                    "signature",
                    "type",
                ],
                "additionalProperties": False,
                "properties": {
                    "builds": {
                        "description": (
                            "How many distinct builds of the faulting module (build_key) its "
                            "dumps crashed in; 0 when none has a build key."
                        ),
                        "type": "integer",
                        "minimum": 0,
                    },
                    "count": {"type": "integer", "minimum": 1},
                    "devices": {"type": "array", "items": {"type": "string"}},
                    "driver_versions": {"type": "array", "items": {"type": "string"}},
                    "dumps": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["path", "report"],
                            "additionalProperties": False,
                            "properties": {
                                "path": {"type": "string"},
                                "report": {"$ref": "#/$defs/nullable_string"},
                            },
                        },
                    },
                    "earliest": {"type": "string"},
                    "earliest_source": {
                        "enum": shared.values(TimeSource),
                    },
                    "first_build": {
                        "description": (
                            "The build that crashed first: the build_key of the earliest dump "
                            "that has one (by metadata timestamp, else file name, else "
                            "modification time)."
                        ),
                        "$ref": "#/$defs/nullable_string",
                    },
                    "first_seen": {"type": "number"},
                    "first_seen_iso": {"type": "string"},
                    "fleet_verdict": {
                        "oneOf": [{"type": "null"}, {"$ref": "#/$defs/fleet_verdict"}],
                    },
                    "history": {
                        "description": (
                            "With a cache: the signature across the scans of the same roots. "
                            "first/last seen and total span every scan (with --since, count is "
                            "the window's); days: dumps per UTC day, the most any scan found; "
                            "new: no earlier scan of these roots found it (never on their first "
                            "scan); regressed: a dump came back quiet_days or more after its "
                            "last one."
                        ),
                        "oneOf": [
                            {"type": "null"},
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "required": [
                                    "days",
                                    "first_seen",
                                    "first_seen_iso",
                                    "last_seen",
                                    "last_seen_iso",
                                    "new",
                                    "quiet_days",
                                    "regressed",
                                    "total",
                                ],
                                "properties": {
                                    "days": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "additionalProperties": False,
                                            "required": ["count", "day"],
                                            "properties": {
                                                "count": {"type": "integer", "minimum": 0},
                                                "day": {"type": "string"},
                                            },
                                        },
                                    },
                                    "first_seen": {"type": "number"},
                                    "first_seen_iso": {"type": "string"},
                                    "last_seen": {"type": "number"},
                                    "last_seen_iso": {"type": "string"},
                                    "new": {"type": "boolean"},
                                    "quiet_days": {"type": ["integer", "null"]},
                                    "regressed": {"type": "boolean"},
                                    "total": {"type": "integer", "minimum": 0},
                                },
                            },
                        ],
                    },
                    "hosts": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["count", "host"],
                            "additionalProperties": False,
                            "properties": {
                                "count": {"type": "integer", "minimum": 1},
                                "host": {"type": "string"},
                            },
                        },
                    },
                    "id": {"type": "string", "pattern": "^[0-9a-f]{12}$"},
                    "instruction": {
                        "description": (
                            "The SASS instruction at the faulting PC, from the earliest dump "
                            "that has one."
                        ),
                        "$ref": "#/$defs/nullable_string",
                    },
                    "kernel": {"$ref": "#/$defs/nullable_string"},
                    "last_seen": {"type": "number"},
                    "last_seen_iso": {"type": "string"},
                    "lifecycle": {
                        "description": (
                            "With --known: the group against the repository's known-crashes "
                            "file; null without one."
                        ),
                        "oneOf": [
                            {"type": "null"},
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "required": [
                                    "acted_on",
                                    "after_fix",
                                    "detail",
                                    "expired",
                                    "line",
                                    "mark",
                                    "state",
                                ],
                                "properties": {
                                    "acted_on": {
                                        "description": (
                                            "Whether a reader should act on it: new, regressed, "
                                            "open, or an ignore run out."
                                        ),
                                        "type": "boolean",
                                    },
                                    "after_fix": {
                                        "description": (
                                            "For a fixed crash: its dumps written after the fix, "
                                            "in builds that had not crashed before it."
                                        ),
                                        "type": "integer",
                                        "minimum": 0,
                                    },
                                    "detail": {"type": "string"},
                                    "expired": {
                                        "description": (
                                            "An ignored crash past its until date or count."
                                        ),
                                        "type": "boolean",
                                    },
                                    "line": {"type": ["integer", "null"], "minimum": 0},
                                    "mark": {
                                        "enum": shared.values(Mark),
                                    },
                                    "state": {
                                        "enum": shared.values(CrashState, null=True),
                                    },
                                },
                            },
                        ],
                    },
                    "mark": {
                        "description": (
                            "New, known or regressed: against the known-crashes file (--known) "
                            "when given, else the cache's history of these folders (new since "
                            "the previous scan, back after quiet days), else new."
                        ),
                        "enum": shared.values(Mark),
                    },
                    "owners": {
                        "description": (
                            "With --owners: who owns the group, by the last CODEOWNERS rule that "
                            "matches the innermost frame of its chain that any rule matches "
                            "(frames of your own code first); null without a match. owners is "
                            "empty when the rule takes ownership away."
                        ),
                        "oneOf": [
                            {"type": "null"},
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["line", "owners", "path", "pattern"],
                                "properties": {
                                    "line": {"type": "integer", "minimum": 1},
                                    "owners": {"type": "array", "items": {"type": "string"}},
                                    "path": {"type": "string"},
                                    "pattern": {"type": "string"},
                                },
                            },
                        ],
                    },
                    "pids": {"type": "array", "items": {"type": "integer"}},
                    "rank": {"type": "integer", "minimum": 1},
                    "runs": {
                        "description": (
                            "The CI runs and attempts its dumps came from, read off the artifact "
                            "folders (run ID attempt N JOB)."
                        ),
                        "type": "array",
                        "items": {"type": "string"},
                    },
                    "signature": {"$ref": "#/$defs/signature"},
                    "type": {"const": "group"},
                },
            },
            "incident": INCIDENT,
            "nullable_string": {"type": ["string", "null"]},
            "scan": {
                "type": "object",
                "required": [
                    "cache_hits",
                    "dumps",
                    "errors",
                    "found",
                    "groups",
                    "interrupted",
                    "left_out",
                    "ok",
                    "seconds",
                    "signature_version",
                    "tool",
                    "type",
                ],
                "additionalProperties": False,
                "properties": {
                    "cache_hits": {"type": "integer", "minimum": 0},
                    "dumps": {"type": "integer", "minimum": 0},
                    "errors": {"type": "integer", "minimum": 0},
                    "found": {"type": "integer", "minimum": 0},
                    "gpus": {
                        "description": (
                            "Every GPU that faulted (host from the file name, PCI address from "
                            "the dump), with its faults by signature and SM and its "
                            "hardware-or-code verdict."
                        ),
                        "type": "array",
                        "items": {"$ref": "#/$defs/gpu"},
                    },
                    "groups": {"type": "integer", "minimum": 0},
                    "host_xids": {
                        "description": (
                            "With --host-log: how many Xid 13/31/43/79 lines the host logs hold, "
                            "and how many of them joined no GPU that faulted; null without "
                            "--host-log."
                        ),
                        "oneOf": [
                            {"type": "null"},
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["lines", "unjoined"],
                                "properties": {
                                    "lines": {"type": "integer", "minimum": 0},
                                    "unjoined": {"type": "integer", "minimum": 0},
                                },
                            },
                        ],
                    },
                    "interrupted": {"type": "boolean"},
                    "known": {
                        "description": (
                            "With --known: the known-crashes file the groups were marked "
                            "against, its crashes, those this scan did not see, and the marks "
                            "given."
                        ),
                        "oneOf": [
                            {"type": "null"},
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["acted_on", "crashes", "marks", "path", "unseen"],
                                "properties": {
                                    "acted_on": {"type": "integer", "minimum": 0},
                                    "crashes": {"type": "integer", "minimum": 0},
                                    "marks": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["known", "new", "regressed"],
                                        "properties": {
                                            "known": {"type": "integer", "minimum": 0},
                                            "new": {"type": "integer", "minimum": 0},
                                            "regressed": {"type": "integer", "minimum": 0},
                                        },
                                    },
                                    "path": {"type": "string"},
                                    "unseen": {"type": "integer", "minimum": 0},
                                },
                            },
                        ],
                    },
                    "left_out": {"type": "integer", "minimum": 0},
                    "ok": {"type": "integer", "minimum": 0},
                    "seconds": {"type": "number", "minimum": 0},
                    "signature_version": {"type": "integer", "minimum": 1},
                    "tool": shared.TOOL,
                    "type": {"const": "scan"},
                },
            },
            "signature": SIGNATURE,
        },
    }
