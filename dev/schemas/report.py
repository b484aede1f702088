"""`postmortem.report/1`: what `postmortem analyze CORE --format json` writes for one dump
(report/context.py `build_report`)."""

from __future__ import annotations

from dev.schemas import shared
from dev.schemas.shared import Schema
from postmortem.analysis.forensics.address import SpreadPattern
from postmortem.analysis.forensics.paramtypes import ArgumentKind
from postmortem.analysis.hang.waits import WaitKind
from postmortem.analysis.verdict import VerdictKind
from postmortem.coredump.codec import Codec
from postmortem.findings import Severity
from postmortem.host.crashpickle.model import CrashPickleLayout
from postmortem.host.model import HostLogKind
from postmortem.model import FaultSource

KERNEL_NAME: Schema = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "required": ["demangled", "mangled", "short"],
    "properties": {
        "brief": {
            "type": "string",
            "description": (
                "the bounded name tables show: no return type or parameters, template arguments "
                "collapsed except a wrapper kernel's identity"
            ),
        },
        "demangled": {"type": "string"},
        "heading": {
            "type": "string",
            "description": (
                "the name a heading shows: the demangled name when it is short, else brief"
            ),
        },
        "mangled": {"type": "string"},
        "short": {"type": "string"},
    },
    "description": "A function name: as in the symbol table, demangled, and without parameters.",
}
"""A kernel's or function's name in each of its forms (report/values.py `kernel_json`)."""

EXCEPTION: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["code", "name"],
    "properties": {"code": {"type": "integer"}, "name": {"type": "string"}},
    "description": "An exception code and its name (unknown codes are named by number).",
}

BRIEF_FINDING: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["code", "message", "remedy", "severity"],
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "remedy": {"type": ["string", "null"]},
        "severity": shared.severity(),
    },
}
"""A finding of the dump or of a fault site, as the report's diagnoses show it."""

HANG_FINDING: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["caveat", "code", "evidence", "message"],
    "properties": {
        "caveat": {"type": "string"},
        "code": {
            "enum": [code.value for code in shared.HANG_FINDINGS],
        },
        "evidence": {"type": "array", "items": {"type": "string"}},
        "message": {"type": "string"},
        "severity": {
            "enum": shared.values(Severity),
            "description": "info: the finding explains the picture and claims no hang",
        },
    },
}

SGLANG_CALL: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "arguments",
        "dump_dir",
        "dump_note",
        "exception",
        "flagged",
        "line",
        "name",
        "returned",
        "timestamp",
    ],
    "properties": {
        "arguments": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "section", "tensor", "text"],
                "properties": {
                    "name": {"type": "string"},
                    "section": {"enum": ["positional", "keyword", "output"]},
                    "tensor": {
                        "type": ["object", "null"],
                        "additionalProperties": False,
                        "required": [
                            "contiguous",
                            "device",
                            "dtype",
                            "has_nan_or_inf",
                            "inf_count",
                            "max",
                            "mean",
                            "min",
                            "nan_count",
                            "requires_grad",
                            "shape",
                            "shape_text",
                            "statistics_note",
                        ],
                        "properties": {
                            "contiguous": {"type": ["boolean", "null"]},
                            "device": {"type": ["string", "null"]},
                            "dtype": {"type": ["string", "null"]},
                            "has_nan_or_inf": {"type": "boolean"},
                            "inf_count": {"type": ["integer", "null"]},
                            "max": {
                                "type": ["number", "string", "null"],
                                "description": (
                                    'A float; a NaN or infinity is given as its word ("nan", '
                                    '"inf", "-inf")'
                                ),
                            },
                            "mean": {
                                "type": ["number", "string", "null"],
                                "description": (
                                    'A float; a NaN or infinity is given as its word ("nan", '
                                    '"inf", "-inf")'
                                ),
                            },
                            "min": {
                                "type": ["number", "string", "null"],
                                "description": (
                                    'A float; a NaN or infinity is given as its word ("nan", '
                                    '"inf", "-inf")'
                                ),
                            },
                            "nan_count": {"type": ["integer", "null"]},
                            "requires_grad": {"type": ["boolean", "null"]},
                            "shape": {"type": ["array", "null"], "items": {"type": "integer"}},
                            "shape_text": {"type": ["string", "null"]},
                            "statistics_note": {"type": ["string", "null"]},
                        },
                    },
                    "text": {"type": "string"},
                },
            },
        },
        "dump_dir": {
            "type": ["string", "null"],
            "description": "Where its inputs were saved (level 10), as logged",
        },
        "dump_note": {"type": ["string", "null"]},
        "exception": {
            "type": ["string", "null"],
            "description": (
                "What the exception line says (empty when it names no exception); null: the call "
                "did not raise"
            ),
        },
        "flagged": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Arguments whose statistics count a NaN or an Inf",
        },
        "line": {"type": "integer"},
        "name": {"type": "string"},
        "returned": {
            "type": "boolean",
            "description": "An Output section was logged: the call returned",
        },
        "timestamp": {"type": ["string", "null"]},
    },
}
"""One kernel API call SGLang logged (host/sglang.py)."""

PICKLE_REQUEST: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "age_s",
        "batch_size",
        "created_time",
        "end_time",
        "finish_reason",
        "finished",
        "index",
        "input_chars",
        "input_tokens",
        "input_words",
        "max_new_tokens",
        "output_tokens",
        "request_class",
        "rid",
        "stream",
    ],
    "properties": {
        "age_s": {
            "type": ["number", "null"],
            "description": "The pickle's latest time less created_time",
        },
        "batch_size": {
            "type": ["integer", "null"],
            "description": "Prompts of a batch request; null for a single one",
        },
        "created_time": {"type": ["number", "null"], "description": "Unix seconds"},
        "end_time": {
            "type": ["number", "null"],
            "description": (
                "Unix seconds: when it finished, or, in flight, when the pickle was written"
            ),
        },
        "finish_reason": {"type": ["string", "null"]},
        "finished": {"type": ["boolean", "null"]},
        "index": {
            "type": "integer",
            "description": (
                "Its position in the pickle's requests list (finished ones first, in-flight ones "
                "last)"
            ),
        },
        "input_chars": {"type": ["integer", "null"]},
        "input_tokens": {"type": ["integer", "null"]},
        "input_words": {"type": ["string", "null"], "description": "1,003 tokens, 36 chars x3"},
        "max_new_tokens": {"type": ["integer", "null"]},
        "output_tokens": {"type": ["integer", "null"]},
        "request_class": {
            "type": ["string", "null"],
            "description": "module.qualname, as the pickle names it (…io_struct.GenerateReqInput)",
        },
        "rid": {"type": ["string", "null"]},
        "stream": {"type": ["boolean", "null"]},
    },
}
"""One request of an SGLang crash pickle, finished or in flight."""

WAIT_END: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["block", "pc_hex", "warp"],
    "properties": {
        "block": {"type": ["array", "null"], "items": {"type": "integer"}},
        "pc_hex": {"type": "string"},
        "warp": {"type": ["integer", "null"]},
    },
}
"""One end of a wait-for edge: the waiting warp, or the warp it waits on."""

BOX: Schema = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "required": ["high", "low"],
    "properties": {
        "high": {"type": "array", "items": {"type": "integer"}},
        "low": {"type": "array", "items": {"type": "integer"}},
    },
    "description": "The smallest box holding the coordinates.",
}


def calls(description: str) -> Schema:
    """A lane's device call stack (report/calls.py)."""
    return {
        "description": description,
        "type": ["object", "null"],
        "additionalProperties": False,
        "required": ["call_depth", "frames", "hidden_system_frames", "notes"],
        "properties": {
            "call_depth": {
                "type": "integer",
                "minimum": 0,
                "description": "the lane's callDepth",
            },
            "frames": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "chain",
                        "file",
                        "function",
                        "instruction",
                        "level",
                        "line",
                        "offset_hex",
                        "pc_hex",
                        "section_offset_hex",
                    ],
                    "properties": {
                        "brief_location": {
                            "type": ["string", "null"],
                            "description": (
                                "the frame's function (bounded heading name) and offset"
                            ),
                        },
                        "chain": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["file", "function", "line"],
                                "properties": {
                                    "file": {"type": "string"},
                                    "function": {"type": ["string", "null"]},
                                    "line": {"type": "integer"},
                                },
                            },
                            "description": (
                                "the frame's own inline chain at that instruction, innermost first"
                            ),
                        },
                        "file": {"type": ["string", "null"]},
                        "function": {
                            "type": ["object", "null"],
                            "additionalProperties": False,
                            "required": ["clone_in", "demangled", "mangled", "short"],
                            "properties": {
                                "brief": {
                                    "type": "string",
                                    "description": (
                                        "the bounded name headings show: no parameters, "
                                        "template arguments collapsed except a wrapper "
                                        "kernel's identity"
                                    ),
                                },
                                "clone_in": {
                                    "type": ["string", "null"],
                                    "description": (
                                        "for a copy ptxas made of a called function inside a "
                                        "kernel ($kernel$callee), that kernel (parameters "
                                        "dropped)"
                                    ),
                                },
                                "demangled": {"type": "string"},
                                "mangled": {"type": "string"},
                                "short": {"type": "string"},
                            },
                        },
                        "instruction": {
                            "type": ["string", "null"],
                            "description": (
                                "the instruction at the PC, or the CALL, when disassembled"
                            ),
                        },
                        "level": {
                            "type": "integer",
                            "minimum": 0,
                            "description": ("0: the function holding the PC; 1: its caller, ..."),
                        },
                        "line": {"type": ["integer", "null"]},
                        "offset_hex": {
                            "type": ["string", "null"],
                            "description": (
                                "the PC (frame 0) or the CALL before the return address, "
                                "relative to the function's start"
                            ),
                        },
                        "pc_hex": {
                            "type": ["string", "null"],
                            "description": (
                                "frame 0: the PC; a caller: the return address of its backtrace row"
                            ),
                        },
                        "section_offset_hex": {
                            "type": ["string", "null"],
                            "description": (
                                "the same instruction relative to its code section "
                                "(nvdisasm's /*offset*/)"
                            ),
                        },
                    },
                },
            },
            "hidden_system_frames": {
                "type": "integer",
                "minimum": 0,
                "description": (
                    "the driver's system frames (syscallCallDepth) left out, as cuda-gdb hides them"
                ),
            },
            "notes": {
                "type": "array",
                "items": {"type": "string"},
                "description": (
                    "why the stack is shorter than the call depth, or where the rows "
                    "disagree with the code"
                ),
            },
        },
    }


def schema() -> Schema:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "postmortem.report/1",
        "title": "postmortem analyze report",
        "description": (
            "What `postmortem analyze --format json` writes. Addresses are integers, with hex "
            "strings beside them for people. Nothing in it varies between runs except what the "
            "dump itself holds."
        ),
        "type": "object",
        "additionalProperties": False,
        "required": [
            "builds",
            "census",
            "crosscheck",
            "devices",
            "dump",
            "hang",
            "host",
            "launches",
            "metadata",
            "modules",
            "oncall",
            "provenance",
            "schema",
            "sites",
            "state",
            "tool",
            "verdict",
        ],
        "properties": {
            "builds": {
                "type": "array",
                "description": (
                    "How each module that matters was built (.note.nv.tkinfo, .note.nv.cuinfo)."
                ),
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "build_id",
                        "cuda_version",
                        "device_debug",
                        "elf_abi_version",
                        "has_line_info",
                        "kernels",
                        "line_info",
                        "module_handle",
                        "options",
                        "sm_arch",
                        "tool",
                        "tool_version",
                    ],
                    "properties": {
                        "build_id": {"type": ["string", "null"]},
                        "cuda_version": {"type": ["string", "null"]},
                        "device_debug": {"type": ["boolean", "null"]},
                        "elf_abi_version": {"type": "integer"},
                        "has_line_info": {"type": "boolean"},
                        "kernels": {
                            "type": "array",
                            "items": KERNEL_NAME,
                        },
                        "kernels_ran": {
                            "type": "integer",
                            "minimum": 0,
                            "description": (
                                "how many of `kernels` (listed first) the dump shows launched or "
                                "faulting"
                            ),
                        },
                        "line_info": {"type": "string"},
                        "module_handle": {"type": ["string", "null"]},
                        "options": {"type": ["string", "null"]},
                        "sm_arch": {"type": "string"},
                        "tool": {"type": ["string", "null"]},
                        "tool_version": {"type": ["string", "null"]},
                    },
                },
            },
            "census": {
                "type": "array",
                "description": "Fault sites merged by kernel and offset.",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "blocks",
                        "ctas",
                        "devices",
                        "exceptions",
                        "kernel",
                        "lanes",
                        "offset_hex",
                        "records",
                        "sms",
                        "sms_seen",
                        "threads",
                        "warps",
                    ],
                    "properties": {
                        "blocks": BOX,
                        "ctas": {"type": "integer"},
                        "devices": {"type": "integer"},
                        "exceptions": {
                            "type": "array",
                            "items": EXCEPTION,
                        },
                        "kernel": KERNEL_NAME,
                        "lanes": {"type": "integer"},
                        "offset_hex": {"type": ["string", "null"]},
                        "records": {"type": "integer"},
                        "sms": {"type": "integer"},
                        "sms_seen": {
                            "type": "array",
                            "items": {"type": "array", "items": {"type": "integer"}},
                            "description": "(device, SM) pairs",
                        },
                        "threads": BOX,
                        "warps": {"type": "integer"},
                    },
                },
            },
            "crosscheck": {
                "type": "object",
                "required": ["ran"],
                "additionalProperties": False,
                "properties": {
                    "backtrace": {"type": "array", "items": {"type": "string"}},
                    "checks": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["agrees", "cuda_gdb", "fact", "native"],
                            "properties": {
                                "agrees": {"type": ["boolean", "null"]},
                                "cuda_gdb": {"type": ["string", "null"]},
                                "fact": {"type": "string"},
                                "native": {"type": "string"},
                            },
                        },
                    },
                    "compared": {
                        "type": "integer",
                        "description": (
                            "Facts both readers stated, so compared (agreeing or not); 0 means "
                            "the cross-check compared nothing"
                        ),
                    },
                    "disagreements": {"type": "integer"},
                    "longer_rows": {"type": "array", "items": {"type": "string"}},
                    "note": {"type": ["string", "null"]},
                    "notes": {"type": "array", "items": {"type": "string"}},
                    "opened": {"type": "boolean"},
                    "ran": {"type": "boolean"},
                    "version": {"type": ["string", "null"]},
                    "why_nothing_compared": {
                        "type": ["string", "null"],
                        "description": (
                            "Why nothing was compared, when `compared` is 0; null otherwise"
                        ),
                    },
                },
            },
            "devices": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "index",
                        "lanes_per_warp",
                        "name",
                        "pci",
                        "sm_type",
                        "sms",
                        "type",
                        "warps_per_sm",
                    ],
                    "properties": {
                        "index": {"type": "integer"},
                        "lanes_per_warp": {"type": ["integer", "null"]},
                        "name": {"type": ["string", "null"]},
                        "pci": {"type": ["string", "null"]},
                        "sm_type": {"type": ["string", "null"]},
                        "sms": {"type": ["integer", "null"]},
                        "type": {"type": ["string", "null"]},
                        "warps_per_sm": {"type": ["integer", "null"]},
                    },
                },
            },
            "dump": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "codec",
                    "compressed",
                    "elf_abi_version",
                    "extended_numbering",
                    "file_size",
                    "findings",
                    "layout_generation",
                    "optional_sections",
                    "path",
                    "row_sizes",
                    "sections",
                ],
                "properties": {
                    "codec": {
                        "type": ["string", "null"],
                        "enum": shared.values(Codec, null=True),
                    },
                    "compressed": {"type": "boolean"},
                    "elf_abi_version": {"type": "integer"},
                    "extended_numbering": {"type": "boolean"},
                    "file_size": {"type": "integer"},
                    "findings": {
                        "type": "array",
                        "items": BRIEF_FINDING,
                    },
                    "layout_generation": {"type": "string"},
                    "optional_sections": {
                        "type": "object",
                        "additionalProperties": {"type": "integer"},
                    },
                    "path": {"type": "string"},
                    "row_sizes": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "sections": {"type": "integer"},
                },
            },
            "hang": {
                "type": ["object", "null"],
                "additionalProperties": False,
                "required": ["findings", "groups", "notes"],
                "properties": {
                    "findings": {
                        "type": "array",
                        "items": HANG_FINDING,
                    },
                    "groups": {
                        "type": "array",
                        "description": "Live warps grouped by kernel and PC, most populous first.",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "barrier",
                                "blocks",
                                "chain",
                                "device",
                                "grid_id",
                                "in_polling_loop",
                                "instruction",
                                "kernel",
                                "lanes",
                                "offset_hex",
                                "warps",
                            ],
                            "properties": {
                                "barrier": shared.barrier(),
                                "barrier_id": {
                                    "type": ["integer", "null"],
                                    "description": (
                                        "a CTA barrier's id when the instruction gives it as a "
                                        "number"
                                    ),
                                },
                                "barrier_threads": {
                                    "type": ["integer", "null"],
                                    "description": (
                                        "a named barrier's thread count when the instruction "
                                        "gives it as a number"
                                    ),
                                },
                                "blocks": {"type": "integer"},
                                "calls": calls(
                                    "the call stack of the group's first lane, when it is "
                                    "inside a called function; null otherwise"
                                ),
                                "chain": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "depth",
                                            "file",
                                            "function",
                                            "function_mangled",
                                            "function_source",
                                            "line",
                                            "missing",
                                            "source",
                                        ],
                                        "properties": {
                                            "depth": {"type": "integer"},
                                            "file": {"type": "string"},
                                            "function": {"type": ["string", "null"]},
                                            "function_brief": {
                                                "type": ["string", "null"],
                                                "description": (
                                                    "the function's bounded heading name"
                                                ),
                                            },
                                            "function_mangled": {"type": ["string", "null"]},
                                            "function_source": {
                                                "enum": [
                                                    "line table",
                                                    "debug info",
                                                    "symbol table",
                                                    None,
                                                ],
                                            },
                                            "line": {"type": "integer"},
                                            "missing": {"type": ["string", "null"]},
                                            "source": {"type": ["string", "null"]},
                                        },
                                    },
                                },
                                "device": {"type": "integer"},
                                "driver_barrier": {
                                    "type": ["string", "null"],
                                    "description": (
                                        "what the driver's warp rows (r590+: barrierScope, "
                                        "additionalBarrierInfo) say of the group's warps at a "
                                        "barrier"
                                    ),
                                },
                                "grid_id": {"type": "integer"},
                                "in_polling_loop": {"type": "boolean"},
                                "instruction": {"type": ["string", "null"]},
                                "kernel": KERNEL_NAME,
                                "lanes": {"type": "integer"},
                                "offset_hex": {"type": "string"},
                                "role": {
                                    "enum": ["producer", "consumer", None],
                                    "description": (
                                        "the warp role of the code path the PC is on: the first "
                                        "TMA load (producer) or tensor-core instruction "
                                        "(consumer) ahead of it"
                                    ),
                                },
                                "wait": {
                                    "description": (
                                        "What the warps at this PC wait on, from the instruction "
                                        "there and the loop it is in (the wait model); null "
                                        "without a listing."
                                    ),
                                    "type": ["object", "null"],
                                    "additionalProperties": False,
                                    "required": ["blocked_lanes", "kind", "lane_states", "why"],
                                    "properties": {
                                        "blocked_lanes": {
                                            "type": ["string", "null"],
                                            "description": (
                                                "lane_states in words when any lane is blocked "
                                                "on a convergence barrier, else null"
                                            ),
                                        },
                                        "kind": {
                                            "enum": shared.values(WaitKind),
                                        },
                                        "lane_states": {
                                            "type": "array",
                                            "description": (
                                                "the convergence state of the lanes of the "
                                                "group's first warp (r575+ lane rows), in "
                                                "cuda-gdb's words (Ready, BlockedPlus, Blocked "
                                                "on B0, Exited...), most lanes first; empty when "
                                                "the rows do not record it"
                                            ),
                                            "items": {
                                                "type": "object",
                                                "additionalProperties": False,
                                                "required": ["lanes", "state"],
                                                "properties": {
                                                    "lanes": {"type": "integer"},
                                                    "state": {"type": "string"},
                                                },
                                            },
                                        },
                                        "why": {
                                            "type": "string",
                                            "description": "the evidence for the kind, in words",
                                        },
                                    },
                                },
                                "waits_at_hex": {
                                    "description": (
                                        "The deferred-blocking barrier just before the PC that "
                                        "the warps wait at (a warp that issued "
                                        "BAR.SYNC.DEFER_BLOCKING is held at the next "
                                        "instruction); instruction and chain are then the "
                                        "barrier's."
                                    ),
                                    "type": ["string", "null"],
                                },
                                "warps": {"type": "integer"},
                            },
                        },
                    },
                    "notes": {"type": "array", "items": {"type": "string"}},
                    "wait_for": {
                        "type": "array",
                        "description": (
                            "The wait-for graph's first edges (at most 256): a waiting warp, a "
                            "warp it depends on (a barrier's other participant, a poll's "
                            "possible writer), and whether that one can still do its part."
                        ),
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["can", "grid_id", "on", "waiter", "why"],
                            "properties": {
                                "can": {
                                    "type": ["boolean", "null"],
                                    "description": (
                                        "true: it can (a path of the control-flow graph reaches "
                                        "the barrier, an exit or a store that may write the "
                                        "word); false: no path does; null: it waits itself"
                                    ),
                                },
                                "grid_id": {"type": "integer"},
                                "on": WAIT_END,
                                "waiter": WAIT_END,
                                "why": {"type": "string"},
                            },
                        },
                    },
                    "wait_for_total": {
                        "type": "integer",
                        "description": "How many edges the wait-for graph has in all.",
                    },
                },
                "description": (
                    "Hang analysis: present in hang mode (auto when no exception), else null."
                ),
            },
            "host": {
                "description": (
                    "What the host logs given with --host-log add: the logs read, each fact "
                    "compared with the dump, what each log holds, and findings; null when no "
                    "host log was given."
                ),
                "type": ["object", "null"],
                "additionalProperties": False,
                "required": [
                    "agreements",
                    "checks",
                    "crash_pickles",
                    "cuda_errors",
                    "disagreements",
                    "driver",
                    "files",
                    "findings",
                    "sanitizer",
                    "sglang",
                    "vllm",
                ],
                "properties": {
                    "agreements": {"type": "integer"},
                    "checks": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "agrees",
                                "dump",
                                "fact",
                                "file",
                                "host",
                                "how",
                                "line",
                                "source",
                            ],
                            "properties": {
                                "agrees": {
                                    "type": ["boolean", "null"],
                                    "description": "null: not compared (how says why)",
                                },
                                "dump": {"type": ["string", "null"]},
                                "fact": {"type": "string"},
                                "file": {"type": "string"},
                                "host": {"type": "string"},
                                "how": {"type": "string"},
                                "line": {
                                    "type": "integer",
                                    "description": "1-based, in the part of the log read",
                                },
                                "source": {"type": "string"},
                            },
                        },
                    },
                    "crash_pickles": {
                        "description": (
                            "Pickles given as host logs (SGLang's crash_dump_*.pkl), summarized "
                            "from their opcodes without loading them, one entry per file"
                        ),
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "caps_hit",
                                "classes",
                                "classes_total",
                                "code_calls",
                                "complete",
                                "dump_time_apart_s",
                                "file",
                                "finished",
                                "finished_count",
                                "in_flight",
                                "in_flight_count",
                                "keys",
                                "latest_time",
                                "latest_time_utc",
                                "launch_command",
                                "layout",
                                "name_time",
                                "notes",
                                "oldest_age_s",
                                "opcodes_read",
                                "protocol",
                                "request_count",
                                "requests_kept",
                                "server_args",
                                "sglang",
                                "size_bytes",
                                "stopped",
                            ],
                            "properties": {
                                "caps_hit": {
                                    "type": "array",
                                    "description": "The limits that cut what was kept",
                                    "items": {"type": "string"},
                                },
                                "classes": {
                                    "type": "array",
                                    "description": (
                                        "The classes and functions the pickle names (never "
                                        "imported), up to a cap"
                                    ),
                                    "items": {"type": "string"},
                                },
                                "classes_total": {"type": "integer"},
                                "code_calls": {
                                    "type": "array",
                                    "description": (
                                        "Callables it names that run code when it is loaded: not "
                                        "SGLang's; never load it"
                                    ),
                                    "items": {"type": "string"},
                                },
                                "complete": {
                                    "type": "boolean",
                                    "description": (
                                        "false: the reading stopped before the pickle's end (see "
                                        "stopped)"
                                    ),
                                },
                                "dump_time_apart_s": {
                                    "type": ["number", "null"],
                                    "description": (
                                        "latest_time less the dump's write time (metadata, else "
                                        "its name's %t); null when either is unknown"
                                    ),
                                },
                                "file": {"type": "string"},
                                "finished": {
                                    "type": "array",
                                    "description": "The last requests finished (bounded)",
                                    "items": PICKLE_REQUEST,
                                },
                                "finished_count": {"type": "integer"},
                                "in_flight": {
                                    "type": "array",
                                    "description": (
                                        "The requests in flight, the oldest first (bounded)"
                                    ),
                                    "items": PICKLE_REQUEST,
                                },
                                "in_flight_count": {
                                    "type": "integer",
                                    "description": "Requests kept that were still running",
                                },
                                "keys": {
                                    "type": "array",
                                    "description": "The top dict's string keys, in order",
                                    "items": {"type": "string"},
                                },
                                "latest_time": {
                                    "type": ["number", "null"],
                                    "description": (
                                        "The latest time the requests record, Unix seconds: when "
                                        "the pickle was written, if a request was in flight"
                                    ),
                                },
                                "latest_time_utc": {"type": ["string", "null"]},
                                "launch_command": {
                                    "type": ["string", "null"],
                                    "description": (
                                        "The command line, secrets and home folders hidden"
                                    ),
                                },
                                "layout": {
                                    "enum": shared.values(CrashPickleLayout),
                                    "description": "What the pickle holds at its top",
                                },
                                "name_time": {
                                    "type": ["string", "null"],
                                    "description": (
                                        "The time in the file's name (the host's local time)"
                                    ),
                                },
                                "notes": {
                                    "type": "array",
                                    "description": "What the reading noticed",
                                    "items": {"type": "string"},
                                },
                                "oldest_age_s": {"type": ["number", "null"]},
                                "opcodes_read": {"type": "integer"},
                                "protocol": {
                                    "type": ["integer", "null"],
                                    "description": (
                                        "The pickle protocol (its PROTO opcode); null for "
                                        "protocols 0 and 1"
                                    ),
                                },
                                "request_count": {
                                    "type": ["integer", "null"],
                                    "description": (
                                        "Entries of requests; null when there is no list"
                                    ),
                                },
                                "requests_kept": {"type": "integer"},
                                "server_args": {
                                    "description": (
                                        "The ServerArgs fields that say how the server ran; null "
                                        "when the pickle has none (SGLang writes None for a "
                                        "--trust-remote-code model)"
                                    ),
                                    "type": ["object", "null"],
                                    "additionalProperties": False,
                                    "required": [
                                        "attention_backend",
                                        "chunked_prefill_size",
                                        "class_name",
                                        "cuda_graph",
                                        "dp_size",
                                        "dtype",
                                        "ep_size",
                                        "kv_cache_dtype",
                                        "max_running_requests",
                                        "mem_fraction_static",
                                        "model_path",
                                        "other",
                                        "pp_size",
                                        "quantization",
                                        "tp_size",
                                        "words",
                                    ],
                                    "properties": {
                                        "attention_backend": {"type": ["string", "null"]},
                                        "chunked_prefill_size": {"type": ["integer", "null"]},
                                        "class_name": {"type": ["string", "null"]},
                                        "cuda_graph": {
                                            "type": ["boolean", "null"],
                                            "description": "false with disable_cuda_graph",
                                        },
                                        "dp_size": {"type": ["integer", "null"]},
                                        "dtype": {"type": ["string", "null"]},
                                        "ep_size": {"type": ["integer", "null"]},
                                        "kv_cache_dtype": {"type": ["string", "null"]},
                                        "max_running_requests": {"type": ["integer", "null"]},
                                        "mem_fraction_static": {"type": ["number", "null"]},
                                        "model_path": {"type": ["string", "null"]},
                                        "other": {
                                            "type": "array",
                                            "description": (
                                                "More fields that matter to a crash, where present"
                                            ),
                                            "items": {
                                                "type": "object",
                                                "additionalProperties": False,
                                                "required": ["name", "value"],
                                                "properties": {
                                                    "name": {"type": "string"},
                                                    "value": {"type": "string"},
                                                },
                                            },
                                        },
                                        "pp_size": {"type": ["integer", "null"]},
                                        "quantization": {"type": ["string", "null"]},
                                        "tp_size": {"type": ["integer", "null"]},
                                        "words": {
                                            "type": "string",
                                            "description": (
                                                "model …, tp 2, dp 1, …: what a replay must match"
                                            ),
                                        },
                                    },
                                },
                                "sglang": {
                                    "type": "boolean",
                                    "description": (
                                        "true: a crash dump or a request list, as SGLang writes"
                                    ),
                                },
                                "size_bytes": {"type": "integer"},
                                "stopped": {"type": ["string", "null"]},
                            },
                        },
                    },
                    "cuda_errors": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "asserts",
                                "asserts_seen",
                                "errors",
                                "errors_seen",
                                "file",
                            ],
                            "properties": {
                                "asserts": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "block",
                                            "condition",
                                            "function",
                                            "line",
                                            "source_file",
                                            "source_line",
                                            "thread",
                                        ],
                                        "properties": {
                                            "block": {
                                                "type": ["array", "null"],
                                                "items": {"type": "integer"},
                                                "minItems": 3,
                                                "maxItems": 3,
                                            },
                                            "condition": {"type": "string"},
                                            "function": {"type": "string"},
                                            "line": {"type": "integer"},
                                            "source_file": {"type": "string"},
                                            "source_line": {"type": "integer"},
                                            "thread": {
                                                "type": ["array", "null"],
                                                "items": {"type": "integer"},
                                                "minItems": 3,
                                                "maxItems": 3,
                                            },
                                        },
                                    },
                                },
                                "asserts_seen": {"type": "integer"},
                                "errors": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "asynchronous",
                                            "error",
                                            "exception_type",
                                            "frames",
                                            "kind",
                                            "line",
                                            "surfaced_at",
                                            "text",
                                        ],
                                        "properties": {
                                            "asynchronous": {"type": "boolean"},
                                            "error": {"type": "string"},
                                            "exception_type": {"type": ["string", "null"]},
                                            "frames": {
                                                "type": "array",
                                                "items": {
                                                    "type": "object",
                                                    "additionalProperties": False,
                                                    "required": [
                                                        "code",
                                                        "file",
                                                        "function",
                                                        "line",
                                                    ],
                                                    "properties": {
                                                        "code": {"type": ["string", "null"]},
                                                        "file": {"type": "string"},
                                                        "function": {"type": "string"},
                                                        "line": {"type": "integer"},
                                                    },
                                                },
                                            },
                                            "kind": {"type": "string"},
                                            "line": {"type": "integer"},
                                            "surfaced_at": {"type": ["string", "null"]},
                                            "text": {"type": "string"},
                                        },
                                    },
                                },
                                "errors_seen": {"type": "integer"},
                                "file": {"type": "string"},
                            },
                        },
                    },
                    "disagreements": {"type": "integer"},
                    "driver": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "attach_conflicts",
                                "dumps_written",
                                "exceptions",
                                "file",
                                "xids",
                                "xids_seen",
                            ],
                            "properties": {
                                "attach_conflicts": {
                                    "type": "array",
                                    "description": (
                                        'Lines where the driver said "CUDA coredump is not '
                                        'supported with CUDA attach on exception" '
                                        "(CUDA_DEVICE_WAITS_ON_EXCEPTION was set: no dump was "
                                        "written)"
                                    ),
                                    "items": {"type": "integer"},
                                },
                                "dumps_written": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["line", "path"],
                                        "properties": {
                                            "line": {"type": "integer"},
                                            "path": {"type": "string"},
                                        },
                                    },
                                },
                                "exceptions": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "block",
                                            "code",
                                            "device",
                                            "function",
                                            "line",
                                            "name",
                                            "pc_hex",
                                            "sm",
                                            "source",
                                            "thread",
                                            "warp",
                                        ],
                                        "properties": {
                                            "block": {
                                                "type": ["array", "null"],
                                                "items": {"type": "integer"},
                                                "minItems": 3,
                                                "maxItems": 3,
                                            },
                                            "code": {"type": ["integer", "null"]},
                                            "device": {"type": ["integer", "null"]},
                                            "function": {"type": ["string", "null"]},
                                            "line": {"type": "integer"},
                                            "name": {"type": "string"},
                                            "pc_hex": {"type": ["string", "null"]},
                                            "sm": {"type": ["integer", "null"]},
                                            "source": {"enum": ["coredump-progress", "cuda-gdb"]},
                                            "thread": {
                                                "type": ["array", "null"],
                                                "items": {"type": "integer"},
                                                "minItems": 3,
                                                "maxItems": 3,
                                            },
                                            "warp": {"type": ["string", "null"]},
                                        },
                                    },
                                },
                                "file": {"type": "string"},
                                "xids": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "access_type",
                                            "channel",
                                            "detail",
                                            "engine",
                                            "fault_address",
                                            "fault_address_hex",
                                            "fault_type",
                                            "line",
                                            "meaning",
                                            "pci",
                                            "pid",
                                            "process",
                                            "xid",
                                        ],
                                        "properties": {
                                            "access_type": {"type": ["string", "null"]},
                                            "channel": {"type": ["integer", "null"]},
                                            "detail": {"type": "string"},
                                            "engine": {"type": ["string", "null"]},
                                            "fault_address": {"type": ["integer", "null"]},
                                            "fault_address_hex": {"type": ["string", "null"]},
                                            "fault_type": {"type": ["string", "null"]},
                                            "line": {"type": "integer"},
                                            "meaning": {"type": ["string", "null"]},
                                            "pci": {"type": "string"},
                                            "pid": {"type": ["integer", "null"]},
                                            "process": {"type": ["string", "null"]},
                                            "xid": {"type": "integer"},
                                        },
                                    },
                                },
                                "xids_seen": {"type": "integer"},
                            },
                        },
                    },
                    "files": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "cut",
                                "lines",
                                "path",
                                "pickle",
                                "read_from",
                                "read_note",
                                "recognized",
                                "size_bytes",
                            ],
                            "properties": {
                                "cut": {"type": "boolean"},
                                "lines": {"type": "integer"},
                                "path": {"type": "string"},
                                "pickle": {
                                    "type": "boolean",
                                    "description": (
                                        "true: read as a pickle, from its opcodes and never "
                                        "loaded (lines is 0), not as lines of text"
                                    ),
                                },
                                "read_from": {
                                    "type": "integer",
                                    "description": (
                                        "The byte where reading started: 0, or the start of the "
                                        "tail read"
                                    ),
                                },
                                "read_note": {"type": ["string", "null"]},
                                "recognized": {
                                    "type": "array",
                                    "description": (
                                        "What the log holds, recognized by content; empty: not "
                                        "recognized"
                                    ),
                                    "items": {
                                        "enum": shared.values(HostLogKind),
                                    },
                                },
                                "size_bytes": {"type": "integer"},
                            },
                        },
                    },
                    "findings": {
                        "type": "array",
                        "items": shared.FINDING,
                    },
                    "sanitizer": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["errors", "errors_seen", "file", "summary_errors"],
                            "properties": {
                                "errors": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "access",
                                            "address_hex",
                                            "address_note",
                                            "allocation_note",
                                            "block",
                                            "kernel",
                                            "line",
                                            "offset_hex",
                                            "size_bytes",
                                            "source",
                                            "space",
                                            "thread",
                                            "what",
                                        ],
                                        "properties": {
                                            "access": {"type": ["string", "null"]},
                                            "address_hex": {"type": ["string", "null"]},
                                            "address_note": {"type": ["string", "null"]},
                                            "allocation_note": {"type": ["string", "null"]},
                                            "block": {
                                                "type": ["array", "null"],
                                                "items": {"type": "integer"},
                                                "minItems": 3,
                                                "maxItems": 3,
                                            },
                                            "kernel": {"type": ["string", "null"]},
                                            "line": {"type": "integer"},
                                            "offset_hex": {"type": ["string", "null"]},
                                            "size_bytes": {"type": ["integer", "null"]},
                                            "source": {"type": ["string", "null"]},
                                            "space": {"type": ["string", "null"]},
                                            "thread": {
                                                "type": ["array", "null"],
                                                "items": {"type": "integer"},
                                                "minItems": 3,
                                                "maxItems": 3,
                                            },
                                            "what": {"type": "string"},
                                        },
                                    },
                                },
                                "errors_seen": {"type": "integer"},
                                "file": {"type": "string"},
                                "summary_errors": {"type": ["integer", "null"]},
                            },
                        },
                    },
                    "sglang": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": [
                                "calls_seen",
                                "file",
                                "how",
                                "kernel",
                                "last_calls",
                                "level",
                                "match",
                            ],
                            "properties": {
                                "calls_seen": {"type": "integer"},
                                "file": {"type": "string"},
                                "first_unread": {
                                    "type": ["integer", "null"],
                                    "description": "the line number of the first of them",
                                },
                                "how": {"type": ["string", "null"]},
                                "kernel": KERNEL_NAME,
                                "last_calls": {
                                    "type": "array",
                                    "items": SGLANG_CALL,
                                },
                                "level": {
                                    "type": "integer",
                                    "description": "1 names, 3 metadata, 5 statistics, 10 dumps",
                                },
                                "match": {
                                    "anyOf": [
                                        SGLANG_CALL,
                                        {"type": "null"},
                                    ],
                                },
                                "unread_lines": {
                                    "type": "integer",
                                    "minimum": 0,
                                    "description": (
                                        "argument lines inside call entries no rule read"
                                    ),
                                },
                            },
                        },
                    },
                    "vllm": {
                        "description": (
                            'vLLM\'s engine dumps ("Dumping input data for V1 LLM engine"), one '
                            "entry per log holding them"
                        ),
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["batch", "dumps", "dumps_seen", "file"],
                            "properties": {
                                "batch": {
                                    "description": (
                                        "The batch of the last dump; null when it has no "
                                        "scheduler output"
                                    ),
                                    "type": ["object", "null"],
                                    "additionalProperties": False,
                                    "required": [
                                        "cached",
                                        "complete",
                                        "largest_request",
                                        "largest_tokens",
                                        "new",
                                        "one_token",
                                        "read",
                                        "requests",
                                        "total_tokens",
                                        "words",
                                    ],
                                    "properties": {
                                        "cached": {"type": ["integer", "null"]},
                                        "complete": {"type": "boolean"},
                                        "largest_request": {"type": ["string", "null"]},
                                        "largest_tokens": {"type": ["integer", "null"]},
                                        "new": {"type": ["integer", "null"]},
                                        "one_token": {
                                            "type": ["integer", "null"],
                                            "description": "Requests read that run one token",
                                        },
                                        "read": {
                                            "type": "integer",
                                            "description": (
                                                "Requests whose scheduled tokens were read"
                                            ),
                                        },
                                        "requests": {"type": ["integer", "null"]},
                                        "total_tokens": {"type": ["integer", "null"]},
                                        "words": {"type": "string"},
                                    },
                                },
                                "dumps": {
                                    "type": "array",
                                    "description": "The last dumps of the log, oldest first",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "config",
                                            "line",
                                            "process",
                                            "reason",
                                            "scheduler",
                                            "stats",
                                            "version",
                                        ],
                                        "properties": {
                                            "config": {
                                                "description": (
                                                    "The config line's fields a triager reads; "
                                                    "null when the config line was not read"
                                                ),
                                                "type": ["object", "null"],
                                                "additionalProperties": False,
                                                "required": [
                                                    "chunked_prefill_enabled",
                                                    "data_parallel_size",
                                                    "device",
                                                    "dtype",
                                                    "enable_prefix_caching",
                                                    "enforce_eager",
                                                    "fields_seen",
                                                    "kv_cache_dtype",
                                                    "load_format",
                                                    "max_model_len",
                                                    "model",
                                                    "pipeline_parallel_size",
                                                    "quantization",
                                                    "served_model_name",
                                                    "speculative_config",
                                                    "tensor_parallel_size",
                                                ],
                                                "properties": {
                                                    "chunked_prefill_enabled": {
                                                        "type": ["boolean", "null"],
                                                    },
                                                    "data_parallel_size": {
                                                        "type": ["integer", "null"],
                                                    },
                                                    "device": {
                                                        "type": ["string", "null"],
                                                        "description": (
                                                            "device_config: cuda, npu, cpu…"
                                                        ),
                                                    },
                                                    "dtype": {"type": ["string", "null"]},
                                                    "enable_prefix_caching": {
                                                        "type": ["boolean", "null"],
                                                    },
                                                    "enforce_eager": {"type": ["boolean", "null"]},
                                                    "fields_seen": {
                                                        "type": "integer",
                                                        "description": (
                                                            "name=value pairs read at the top "
                                                            "level of the config line"
                                                        ),
                                                    },
                                                    "kv_cache_dtype": {"type": ["string", "null"]},
                                                    "load_format": {"type": ["string", "null"]},
                                                    "max_model_len": {
                                                        "type": ["integer", "null"],
                                                        "description": "Printed as max_seq_len",
                                                    },
                                                    "model": {"type": ["string", "null"]},
                                                    "pipeline_parallel_size": {
                                                        "type": ["integer", "null"],
                                                    },
                                                    "quantization": {
                                                        "type": ["string", "null"],
                                                        "description": (
                                                            'As printed: "None" when the model '
                                                            "is not quantized"
                                                        ),
                                                    },
                                                    "served_model_name": {
                                                        "type": ["string", "null"],
                                                    },
                                                    "speculative_config": {
                                                        "type": ["string", "null"],
                                                        "description": (
                                                            "As printed, bounded; null when None"
                                                        ),
                                                    },
                                                    "tensor_parallel_size": {
                                                        "type": ["integer", "null"],
                                                    },
                                                },
                                            },
                                            "line": {"type": "integer"},
                                            "process": {
                                                "type": ["string", "null"],
                                                "description": (
                                                    "The logging process as printed: "
                                                    "EngineCore_DP0 pid=16899"
                                                ),
                                            },
                                            "reason": {
                                                "type": ["string", "null"],
                                                "description": (
                                                    "exception, timeout…, when the (v…, "
                                                    "reason=…) form says"
                                                ),
                                            },
                                            "scheduler": {
                                                "description": (
                                                    "The scheduler output in flight "
                                                    "(SchedulerOutput); null when the dump has "
                                                    "none"
                                                ),
                                                "type": ["object", "null"],
                                                "additionalProperties": False,
                                                "required": [
                                                    "cached_requests",
                                                    "complete",
                                                    "finished_requests",
                                                    "line",
                                                    "new_requests",
                                                    "requests",
                                                    "scheduled_entries",
                                                    "spec_decode_requests",
                                                    "total_scheduled_tokens",
                                                ],
                                                "properties": {
                                                    "cached_requests": {
                                                        "type": ["integer", "null"],
                                                    },
                                                    "complete": {
                                                        "type": "boolean",
                                                        "description": (
                                                            "false: the text ended, or was cut "
                                                            "at the bound, before its closing "
                                                            "parenthesis"
                                                        ),
                                                    },
                                                    "finished_requests": {
                                                        "type": ["integer", "null"],
                                                    },
                                                    "line": {"type": "integer"},
                                                    "new_requests": {"type": ["integer", "null"]},
                                                    "requests": {
                                                        "type": "array",
                                                        "description": (
                                                            "The first requests, new ones first "
                                                            "(bounded)"
                                                        ),
                                                        "items": {
                                                            "type": "object",
                                                            "additionalProperties": False,
                                                            "required": [
                                                                "computed_tokens",
                                                                "id",
                                                                "new",
                                                                "prompt_tokens",
                                                                "scheduled_tokens",
                                                            ],
                                                            "properties": {
                                                                "computed_tokens": {
                                                                    "type": ["integer", "null"],
                                                                    "description": (
                                                                        "num_computed_tokens: "
                                                                        "already in the KV cache "
                                                                        "before this step"
                                                                    ),
                                                                },
                                                                "id": {"type": "string"},
                                                                "new": {
                                                                    "type": "boolean",
                                                                    "description": (
                                                                        "true: scheduled for the "
                                                                        "first time "
                                                                        "(scheduled_new_reqs); "
                                                                        "false: scheduled before"
                                                                    ),
                                                                },
                                                                "prompt_tokens": {
                                                                    "type": ["integer", "null"],
                                                                },
                                                                "scheduled_tokens": {
                                                                    "type": ["integer", "null"],
                                                                    "description": (
                                                                        "Its entry of "
                                                                        "num_scheduled_tokens: "
                                                                        "the tokens this step "
                                                                        "runs for it"
                                                                    ),
                                                                },
                                                            },
                                                        },
                                                    },
                                                    "scheduled_entries": {
                                                        "type": ["integer", "null"],
                                                        "description": (
                                                            "Entries of num_scheduled_tokens: "
                                                            "the requests this step runs"
                                                        ),
                                                    },
                                                    "spec_decode_requests": {
                                                        "type": ["integer", "null"],
                                                    },
                                                    "total_scheduled_tokens": {
                                                        "type": ["integer", "null"],
                                                    },
                                                },
                                            },
                                            "stats": {
                                                "description": (
                                                    "The scheduler stats line (SchedulerStats); "
                                                    "null when the dump has none"
                                                ),
                                                "type": ["object", "null"],
                                                "additionalProperties": False,
                                                "required": [
                                                    "kv_cache_usage",
                                                    "line",
                                                    "running",
                                                    "waiting",
                                                ],
                                                "properties": {
                                                    "kv_cache_usage": {
                                                        "type": ["number", "null"],
                                                        "minimum": 0,
                                                        "maximum": 1,
                                                        "description": "A fraction",
                                                    },
                                                    "line": {"type": "integer"},
                                                    "running": {"type": ["integer", "null"]},
                                                    "waiting": {"type": ["integer", "null"]},
                                                },
                                            },
                                            "version": {"type": ["string", "null"]},
                                        },
                                    },
                                },
                                "dumps_seen": {"type": "integer"},
                                "file": {"type": "string"},
                            },
                        },
                    },
                },
            },
            "launches": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "block_dim",
                        "cluster_dim",
                        "context_id",
                        "device",
                        "faulted",
                        "grid_dim",
                        "grid_id",
                        "kernel",
                        "module_handle",
                        "origin",
                        "registers_per_thread",
                    ],
                    "properties": {
                        "block_dim": {
                            "type": ["array", "null"],
                            "items": {"type": "integer"},
                            "minItems": 3,
                            "maxItems": 3,
                        },
                        "cluster_dim": {
                            "type": ["array", "null"],
                            "items": {"type": "integer"},
                            "minItems": 3,
                            "maxItems": 3,
                        },
                        "context_id": {"type": ["string", "null"]},
                        "device": {"type": ["integer", "null"]},
                        "faulted": {"type": "boolean"},
                        "grid_dim": {
                            "type": ["array", "null"],
                            "items": {"type": "integer"},
                            "minItems": 3,
                            "maxItems": 3,
                        },
                        "grid_id": {"type": ["integer", "null"]},
                        "kernel": KERNEL_NAME,
                        "module_handle": {"type": ["string", "null"]},
                        "origin": {"enum": ["CPU", "GPU", None]},
                        "registers_per_thread": {"type": ["integer", "null"]},
                    },
                },
            },
            "metadata": {
                "type": ["object", "null"],
                "additionalProperties": False,
                "required": [
                    "cuda_version",
                    "driver_version",
                    "flags",
                    "generator",
                    "timestamp",
                    "written_utc",
                ],
                "properties": {
                    "cuda_version": {"type": ["string", "null"]},
                    "driver_version": {"type": ["string", "null"]},
                    "flags": {"type": ["array", "null"], "items": {"type": "string"}},
                    "generator": {"type": ["string", "null"]},
                    "timestamp": {
                        "type": ["integer", "null"],
                        "description": "Unix seconds, from the dump",
                    },
                    "written_utc": {
                        "type": ["string", "null"],
                        "description": "The same instant, ISO 8601 in UTC",
                    },
                },
                "description": "The dump's metadata row (r565+).",
            },
            "modules": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "context_id",
                        "device",
                        "elf_abi_version",
                        "functions",
                        "image_bytes",
                        "module_handle",
                    ],
                    "properties": {
                        "context_id": {"type": ["string", "null"]},
                        "device": {"type": ["integer", "null"]},
                        "elf_abi_version": {"type": ["integer", "null"]},
                        "functions": {"type": "array", "items": {"type": "string"}},
                        "image_bytes": {"type": ["integer", "null"]},
                        "module_handle": {"type": ["string", "null"]},
                    },
                },
            },
            "oncall": shared.oncall("#/properties/oncall"),
            "provenance": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "facts",
                        "image",
                        "note",
                        "peak_memory_mib",
                        "seconds",
                        "source",
                        "status",
                        "version",
                    ],
                    "properties": {
                        "chosen_by": {
                            "description": (
                                "what chose that executable: an option, a settings file, an "
                                "environment variable, $PATH, a CUDA folder or the nvidia wheel"
                            ),
                            "type": ["string", "null"],
                        },
                        "facts": {"type": "string"},
                        "image": {
                            "description": (
                                "the copy of the module's image nvdisasm read (nvdisasm only)"
                            ),
                            "type": ["string", "null"],
                        },
                        "note": {"type": ["string", "null"]},
                        "path": {
                            "description": (
                                "the executable that ran (nvdisasm, cuda-gdb); null when not run "
                                "or not found"
                            ),
                            "type": ["string", "null"],
                        },
                        "peak_memory_mib": {
                            "description": (
                                "the tool's peak resident memory in MiB; null when not measured"
                            ),
                            "type": ["number", "null"],
                        },
                        "seconds": {
                            "description": (
                                "how long the tool ran for this dump (cuda-gdb: both runs when "
                                "retried); null when not run or not measured"
                            ),
                            "type": ["number", "null"],
                        },
                        "source": {"type": "string"},
                        "status": {"enum": ["used", "unavailable"]},
                        "version": {"type": ["string", "null"]},
                    },
                },
            },
            "schema": {"const": "postmortem.report/1"},
            "sites": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "assert",
                        "census",
                        "chain",
                        "diagnoses",
                        "driver_says",
                        "error_pc",
                        "error_pc_hex",
                        "exception",
                        "fault_count",
                        "faults",
                        "forensics",
                        "function",
                        "has_line_info",
                        "instruction",
                        "location",
                        "module_handle",
                        "offset",
                        "offset_hex",
                        "trap",
                        "trap_stop",
                        "window",
                    ],
                    "properties": {
                        "assert": {
                            "description": (
                                "The failed device assert the lanes stopped at (an __assertfail "
                                "call), decoded from the code before the call and the module's "
                                "strings; null when the site is no assert."
                            ),
                            "type": ["object", "null"],
                            "additionalProperties": False,
                            "required": [
                                "call_offset",
                                "call_offset_hex",
                                "callee",
                                "file",
                                "function",
                                "lanes",
                                "lanes_in_call",
                                "line",
                                "message",
                                "other_messages",
                                "place",
                                "sources",
                                "text",
                            ],
                            "properties": {
                                "call_offset": {"type": "integer"},
                                "call_offset_hex": {"type": "string"},
                                "callee": {
                                    "type": ["string", "null"],
                                    "description": (
                                        "The function the call jumps to (__assertfail), from its "
                                        "constant-bank slot or operand."
                                    ),
                                },
                                "file": {"type": ["string", "null"]},
                                "function": {"type": ["string", "null"]},
                                "lanes": {"type": "integer", "minimum": 0},
                                "lanes_in_call": {
                                    "type": "boolean",
                                    "description": (
                                        "The lanes' PC is the call's return address (inside the "
                                        "driver's handler): only the code was read."
                                    ),
                                },
                                "line": {"type": ["integer", "null"]},
                                "message": {
                                    "type": ["string", "null"],
                                    "description": (
                                        "The condition that failed; null when unknown "
                                        "(sources.message says why)."
                                    ),
                                },
                                "other_messages": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["lanes", "message"],
                                        "properties": {
                                            "lanes": {"type": "integer"},
                                            "message": {"type": "string"},
                                        },
                                    },
                                },
                                "place": {
                                    "type": ["string", "null"],
                                    "description": "file:line, when both are known.",
                                },
                                "sources": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["file", "function", "line", "message"],
                                    "properties": {
                                        "file": {"type": "string"},
                                        "function": {"type": "string"},
                                        "line": {"type": "string"},
                                        "message": {"type": "string"},
                                    },
                                    "description": (
                                        "Per part: where it was read (registers, constant-bank "
                                        "slot, symbol, section), or why it is unknown."
                                    ),
                                },
                                "text": {
                                    "type": "string",
                                    "description": (
                                        "Assertion `message` failed at file:line in function, "
                                        "unknown parts said so."
                                    ),
                                },
                            },
                        },
                        "calls": calls(
                            "the first faulting lane's device call stack from its backtrace rows "
                            "(one frame when nothing was called); null without a lane row"
                        ),
                        "census": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["ctas", "devices", "lanes", "records", "sms", "warps"],
                            "properties": {
                                "ctas": {"type": "integer"},
                                "devices": {"type": "integer"},
                                "lanes": {"type": "integer"},
                                "records": {"type": "integer"},
                                "sms": {"type": "integer"},
                                "warps": {"type": "integer"},
                            },
                        },
                        "chain": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": [
                                    "depth",
                                    "file",
                                    "found_at",
                                    "function",
                                    "function_mangled",
                                    "function_source",
                                    "line",
                                    "missing",
                                    "source",
                                ],
                                "properties": {
                                    "depth": {"type": "integer"},
                                    "file": {"type": "string"},
                                    "found_at": {"type": ["string", "null"]},
                                    "function": {"type": ["string", "null"]},
                                    "function_brief": {
                                        "type": ["string", "null"],
                                        "description": "the function's bounded heading name",
                                    },
                                    "function_mangled": {
                                        "type": ["string", "null"],
                                        "description": (
                                            "The function's name as its source gave it (mangled)."
                                        ),
                                    },
                                    "function_source": {
                                        "enum": [
                                            "line table",
                                            "debug info",
                                            "symbol table",
                                            "cuda-gdb",
                                            "source file",
                                            None,
                                        ],
                                        "description": (
                                            "Who named the function: the cubin's line table (an "
                                            "inlined function), its .debug_info (an inlined "
                                            "function of a -G build), its symbol table (the "
                                            "outermost frame) or cuda-gdb (when the cubin has no "
                                            "line table)."
                                        ),
                                    },
                                    "line": {"type": "integer"},
                                    "missing": {"type": ["string", "null"]},
                                    "source": {"type": ["string", "null"]},
                                },
                            },
                            "description": "The inline chain at the PC, innermost first.",
                        },
                        "diagnoses": {
                            "type": "array",
                            "items": BRIEF_FINDING,
                        },
                        "driver_says": {
                            "type": ["string", "null"],
                            "description": "The SM row's exception string (r580+).",
                        },
                        "error_pc": {"type": ["integer", "null"]},
                        "error_pc_hex": {"type": ["string", "null"]},
                        "exception": shared.nullable(EXCEPTION),
                        "fault_count": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "Fault records at the site; `faults` lists each.",
                        },
                        "faults": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": [
                                    "block",
                                    "device",
                                    "grid_id",
                                    "lane",
                                    "sm",
                                    "source",
                                    "thread",
                                    "warp",
                                ],
                                "properties": {
                                    "block": {
                                        "type": ["array", "null"],
                                        "items": {"type": "integer"},
                                        "minItems": 3,
                                        "maxItems": 3,
                                    },
                                    "device": {"type": "integer"},
                                    "grid_id": {"type": ["integer", "null"]},
                                    "lane": {"type": ["integer", "null"]},
                                    "sm": {"type": ["integer", "null"]},
                                    "source": {
                                        "enum": shared.values(FaultSource),
                                    },
                                    "thread": {
                                        "type": ["array", "null"],
                                        "items": {"type": "integer"},
                                        "minItems": 3,
                                        "maxItems": 3,
                                    },
                                    "warp": {"type": ["integer", "null"]},
                                },
                            },
                        },
                        "forensics": {
                            "type": ["object", "null"],
                            "additionalProperties": False,
                            "required": [
                                "access",
                                "arguments",
                                "checks",
                                "formula",
                                "lane_count",
                                "lane_set",
                                "lanes",
                                "notes",
                                "spread",
                            ],
                            "properties": {
                                "access": {
                                    "type": ["object", "null"],
                                    "additionalProperties": False,
                                    "required": ["kind", "operand", "space", "width_bytes"],
                                    "properties": {
                                        "kind": {"type": "string"},
                                        "operand": {"type": ["string", "null"]},
                                        "space": {"type": "string"},
                                        "width_bytes": {"type": ["integer", "null"]},
                                    },
                                    "description": "The decoded memory operand.",
                                },
                                "arguments": {
                                    "type": ["object", "null"],
                                    "additionalProperties": False,
                                    "required": [
                                        "attribution",
                                        "items",
                                        "layout",
                                        "source",
                                        "types_unknown",
                                    ],
                                    "properties": {
                                        "attribution": {"type": ["string", "null"]},
                                        "items": {
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "additionalProperties": False,
                                                "required": [
                                                    "as_float",
                                                    "as_int",
                                                    "distance",
                                                    "kind",
                                                    "label",
                                                    "name",
                                                    "nearest",
                                                    "offset",
                                                    "pointer_like",
                                                    "relation",
                                                    "size_bytes",
                                                    "type",
                                                    "value_hex",
                                                ],
                                                "properties": {
                                                    "as_float": {
                                                        "type": ["number", "null"],
                                                        "description": (
                                                            "A float or double (or, when the "
                                                            "type is not known, the same bytes "
                                                            "as an integer) read as an IEEE "
                                                            "float; null when not finite or, "
                                                            "without a type, implausible."
                                                        ),
                                                    },
                                                    "as_int": {
                                                        "type": ["integer", "null"],
                                                        "description": (
                                                            "A 4- or 8-byte integer (or, when "
                                                            "the type is not known, any "
                                                            "non-pointer) read as a signed "
                                                            "integer, or unsigned for an "
                                                            "unsigned type."
                                                        ),
                                                    },
                                                    "distance": {"type": ["integer", "null"]},
                                                    "kind": {
                                                        "enum": shared.values(ArgumentKind),
                                                        "description": (
                                                            "what the type says it holds: "
                                                            "aggregate is a class, struct, union "
                                                            "or enum passed by value (its fields "
                                                            "are not known, and it is never "
                                                            "taken for a pointer); unknown, that "
                                                            "no type is known"
                                                        ),
                                                    },
                                                    "label": {
                                                        "type": "string",
                                                        "description": (
                                                            "the name with its type: arg1 (float "
                                                            "const*), arg4 (hgemm::GemmProblem, "
                                                            "24 bytes by value); the name alone "
                                                            "when the type is not known"
                                                        ),
                                                    },
                                                    "name": {
                                                        "type": "string",
                                                        "description": (
                                                            "arg0 (its ordinal in the "
                                                            "signature), or slot 3 when the "
                                                            "parameter layout is unknown"
                                                        ),
                                                    },
                                                    "nearest": {
                                                        "type": "boolean",
                                                        "description": (
                                                            "the argument the faulting address "
                                                            "is attributed to (the culprit; not "
                                                            "always the numerically nearest)"
                                                        ),
                                                    },
                                                    "offset": {"type": "integer"},
                                                    "pointer_like": {
                                                        "type": "boolean",
                                                        "description": (
                                                            "a pointer the address is measured "
                                                            "from: a value in the pointer range, "
                                                            "of a pointer type when the types "
                                                            "are known"
                                                        ),
                                                    },
                                                    "relation": {"type": ["string", "null"]},
                                                    "size_bytes": {"type": "integer"},
                                                    "type": {
                                                        "type": ["string", "null"],
                                                        "description": (
                                                            "its type in the kernel's demangled "
                                                            "signature, matched to the .nv.info "
                                                            "parameter by ordinal; null when not "
                                                            "known"
                                                        ),
                                                    },
                                                    "value_hex": {"type": "string"},
                                                },
                                            },
                                        },
                                        "layout": {"type": "string"},
                                        "reasoning": {
                                            "type": ["string", "null"],
                                            "description": (
                                                "why the address is attributed to that argument "
                                                "(the first element past the end of a count "
                                                "argument's elements, past the end, a negative "
                                                "index), or why none is when a by-value struct "
                                                "was left out, in words"
                                            ),
                                        },
                                        "runner_up": {
                                            "type": ["string", "null"],
                                            "description": (
                                                "the next most plausible argument, as a relation "
                                                "(arg2 - 0x40), when the call is close"
                                            ),
                                        },
                                        "source": {"type": "string"},
                                        "types_unknown": {
                                            "type": ["string", "null"],
                                            "description": (
                                                "why the argument types are not known (no "
                                                "parameter list in the kernel's name, a count "
                                                "that does not match .nv.info's), so that any "
                                                "8-byte value in the pointer range was weighed "
                                                "as a pointer; null when they came from the "
                                                "demangled signature"
                                            ),
                                        },
                                    },
                                    "description": (
                                        "The grid's arguments from its parameter memory."
                                    ),
                                },
                                "checks": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "check",
                                            "excess_bytes",
                                            "message",
                                            "verdict",
                                        ],
                                        "properties": {
                                            "check": {
                                                "enum": [
                                                    "global-segment",
                                                    "shared-size",
                                                    "local-size",
                                                    "alignment",
                                                ],
                                            },
                                            "excess_bytes": {"type": ["integer", "null"]},
                                            "message": {"type": "string"},
                                            "verdict": {"type": ["boolean", "null"]},
                                        },
                                    },
                                },
                                "formula": {
                                    "type": ["string", "null"],
                                    "description": "How the address is formed, e.g. R3:R2 + 0x1c.",
                                },
                                "lane_count": {
                                    "type": "integer",
                                    "minimum": 0,
                                    "description": "Lanes whose address was worked out; "
                                    "`lanes` lists each.",
                                },
                                "lane_set": {"type": "string"},
                                "lanes": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "address",
                                            "address_hex",
                                            "block",
                                            "device",
                                            "lane",
                                            "missing",
                                            "registers",
                                            "sm",
                                            "thread",
                                            "warp",
                                        ],
                                        "properties": {
                                            "address": {"type": ["integer", "null"]},
                                            "address_hex": {"type": ["string", "null"]},
                                            "block": {
                                                "type": ["array", "null"],
                                                "items": {"type": "integer"},
                                            },
                                            "device": {"type": "integer"},
                                            "lane": {"type": ["integer", "null"]},
                                            "missing": {
                                                "type": "array",
                                                "items": {"type": "string"},
                                            },
                                            "registers": {
                                                "type": "array",
                                                "items": {
                                                    "type": "object",
                                                    "additionalProperties": False,
                                                    "required": ["name", "value_hex"],
                                                    "properties": {
                                                        "name": {"type": "string"},
                                                        "value_hex": {"type": "string"},
                                                    },
                                                },
                                            },
                                            "sm": {"type": ["integer", "null"]},
                                            "thread": {
                                                "type": ["array", "null"],
                                                "items": {"type": "integer"},
                                            },
                                            "warp": {"type": ["integer", "null"]},
                                        },
                                    },
                                },
                                "notes": {"type": "array", "items": {"type": "string"}},
                                "spread": {
                                    "type": ["object", "null"],
                                    "additionalProperties": False,
                                    "required": [
                                        "count",
                                        "distinct",
                                        "irregular_lanes",
                                        "max_hex",
                                        "min_hex",
                                        "span_bytes",
                                        "stride_bytes",
                                    ],
                                    "properties": {
                                        "address_step_bytes": {
                                            "type": ["integer", "null"],
                                            "description": (
                                                "For a broadcast, the distance between "
                                                "neighbouring distinct addresses."
                                            ),
                                        },
                                        "count": {"type": "integer"},
                                        "description": {
                                            "type": "string",
                                            "description": (
                                                "The pattern in words, e.g. 4 distinct addresses "
                                                "4 bytes apart, 8 lanes each."
                                            ),
                                        },
                                        "distinct": {"type": "integer"},
                                        "irregular_lanes": {
                                            "type": "array",
                                            "items": {
                                                "type": "array",
                                                "items": {"type": ["integer", "null"]},
                                            },
                                        },
                                        "lanes_per_address": {
                                            "type": ["array", "null"],
                                            "items": {"type": "integer"},
                                            "description": (
                                                "For a broadcast or grouped pattern, the fewest "
                                                "and the most lanes sharing an address."
                                            ),
                                        },
                                        "max_hex": {"type": "string"},
                                        "min_hex": {"type": "string"},
                                        "pattern": {
                                            "enum": shared.values(SpreadPattern),
                                            "description": (
                                                "How the lanes' addresses relate: one lane; "
                                                "every lane at one address; groups of lanes "
                                                "sharing evenly spaced addresses (broadcast) or "
                                                "unevenly spaced ones (grouped); a common "
                                                "per-lane stride; none of these."
                                            ),
                                        },
                                        "span_bytes": {"type": "integer"},
                                        "stride_bytes": {"type": ["integer", "null"]},
                                    },
                                },
                            },
                            "description": (
                                "The faulting instruction decoded, its address per lane, and "
                                "where that address falls."
                            ),
                        },
                        "function": KERNEL_NAME,
                        "has_line_info": {"type": ["boolean", "null"]},
                        "instruction": {
                            "type": ["object", "null"],
                            "additionalProperties": False,
                            "required": ["offset_hex", "opcode", "operands", "predicate", "text"],
                            "properties": {
                                "offset_hex": {"type": "string"},
                                "opcode": {"type": "string"},
                                "operands": {"type": "array", "items": {"type": "string"}},
                                "predicate": {"type": ["string", "null"]},
                                "text": {"type": "string"},
                            },
                        },
                        "location": {
                            "type": ["string", "null"],
                            "description": "kernel+offset, the kernel without its parameters",
                        },
                        "location_brief": {
                            "type": ["string", "null"],
                            "description": (
                                "location with the bounded heading name of the function holding "
                                "the PC"
                            ),
                        },
                        "module_handle": {"type": ["string", "null"]},
                        "offset": {"type": ["integer", "null"]},
                        "offset_hex": {"type": ["string", "null"]},
                        "trap": {"type": "boolean"},
                        "trap_stop": {
                            "description": (
                                "The trap instruction the lanes stopped at (BPT) and the printf "
                                "format the code printed just before it; null when they did not "
                                "stop at a trap."
                            ),
                            "type": ["object", "null"],
                            "additionalProperties": False,
                            "required": [
                                "instruction",
                                "kind",
                                "offset_hex",
                                "place",
                                "printed",
                                "printed_source",
                            ],
                            "properties": {
                                "instruction": {"type": "string"},
                                "kind": {"type": "string"},
                                "offset_hex": {"type": "string"},
                                "place": {
                                    "type": ["string", "null"],
                                    "description": "file:line the printed format names.",
                                },
                                "printed": {
                                    "type": ["string", "null"],
                                    "description": (
                                        "The format string of the last printf before the trap."
                                    ),
                                },
                                "printed_source": {
                                    "type": ["string", "null"],
                                    "description": (
                                        "Where the format string was read, or why it is unknown."
                                    ),
                                },
                            },
                        },
                        "window": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["is_fault", "offset_hex", "text"],
                                "properties": {
                                    "is_fault": {"type": "boolean"},
                                    "offset_hex": {"type": "string"},
                                    "text": {"type": "string"},
                                },
                            },
                        },
                    },
                    "description": "One distinct faulting PC.",
                },
                "description": (
                    "Faulting PCs, most populous first; empty for a dump with no exception."
                ),
            },
            "state": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [
                        "device",
                        "divergent_warps",
                        "grid_id",
                        "kernel",
                        "lanes",
                        "pcs",
                        "warps",
                    ],
                    "properties": {
                        "device": {"type": "integer"},
                        "divergent_warps": {"type": "integer"},
                        "grid_id": {"type": ["integer", "null"]},
                        "kernel": KERNEL_NAME,
                        "lanes": {"type": "integer"},
                        "pcs": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["faulting_lanes", "lanes", "offset_hex", "warps"],
                                "properties": {
                                    "faulting_lanes": {"type": "integer"},
                                    "lanes": {"type": "integer"},
                                    "offset_hex": {"type": "string"},
                                    "warps": {"type": "integer"},
                                },
                            },
                        },
                        "warps": {"type": "integer"},
                    },
                },
                "description": "Where every warp was: lanes per function-relative PC, per grid.",
            },
            "tool": shared.TOOL,
            "verdict": {
                "type": "object",
                "additionalProperties": False,
                "required": ["headline", "kind"],
                "properties": {
                    "findings": {"type": "integer"},
                    "headline": {"type": "string"},
                    "kind": {
                        "enum": shared.values(VerdictKind),
                    },
                    "sites": {"type": "integer"},
                },
            },
        },
    }
