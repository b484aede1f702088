"""`postmortem.info/1`: what `postmortem info CORE --json` writes (report/info.py
`build_info`)."""

from __future__ import annotations

from dev.schemas import shared
from dev.schemas.shared import Schema
from postmortem.coredump.codec import Codec
from postmortem.model import FaultSource

LANES_LOST: Schema = {
    "type": "boolean",
    "description": (
        "true when the warp's lane rows were lost (set aside or zero-filled): its exception is "
        "the SM row's, or unknown, never read off a zero row"
    ),
}

LANE_CHOSEN: Schema = {
    "type": "boolean",
    "description": (
        "true when the fault is a warp row's and `lane` is its first valid lane, named as "
        "cuda-gdb names it, not a lane recorded faulting"
    ),
}


def schema() -> Schema:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "postmortem.info/1",
        "title": "postmortem info --json",
        "description": (
            "What `postmortem info --json` prints: what the native reader finds in a dump, no "
            "tool needed. Addresses, handles and masks are integers. Keys are sorted. Fields are "
            "only added within a major version of this schema's id."
        ),
        "type": "object",
        "additionalProperties": False,
        "required": [
            "abi_version",
            "census",
            "codec",
            "compressed",
            "devices",
            "extended_numbering",
            "fault_summary",
            "faults",
            "file_size",
            "findings",
            "launches",
            "layout_generation",
            "layouts",
            "metadata",
            "modules",
            "optional_sections",
            "path",
            "section_count",
        ],
        "properties": {
            "abi_version": {
                "type": "integer",
                "minimum": 0,
                "description": "The dump's ELF ABI version (`e_ident[EI_ABIVERSION]`).",
            },
            "census": {
                "description": (
                    "How much of the GPU the dump captured: rows of the SM, CTA, warp and lane "
                    "tables."
                ),
                "type": "object",
                "additionalProperties": False,
                "required": ["ctas", "lanes", "sms", "warps"],
                "properties": {
                    "ctas": {"type": "integer", "minimum": 0},
                    "lanes": {"type": "integer", "minimum": 0},
                    "sms": {"type": "integer", "minimum": 0},
                    "warps": {"type": "integer", "minimum": 0},
                },
            },
            "codec": {
                "enum": shared.values(Codec, null=True),
                "description": "How the file was compressed; null when it was not.",
            },
            "compressed": {"type": "boolean"},
            "devices": {"type": "array", "items": {"$ref": "#/$defs/device"}},
            "extended_numbering": {
                "type": "boolean",
                "description": "The section counts live in section 0 (65,280 sections or more).",
            },
            "fault_summary": {
                "description": (
                    "The faults counted, and grouped by exception and PC (what the text layout "
                    "lists)."
                ),
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "codes",
                    "groups",
                    "groups_left_out",
                    "lanes",
                    "pcs",
                    "warps",
                    "without_lane",
                ],
                "properties": {
                    "codes": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Distinct exception codes.",
                    },
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["count", "first"],
                            "properties": {
                                "count": {"type": "integer", "minimum": 1},
                                "first": {
                                    "$ref": "#/$defs/fault",
                                    "description": "The first fault of the group.",
                                },
                            },
                        },
                        "description": (
                            "The faults grouped by exception and error PC, in the order of "
                            "`faults`, at most 20."
                        ),
                    },
                    "groups_left_out": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Groups past the first 20.",
                    },
                    "lanes": {"type": "integer", "minimum": 0, "description": "Faulting lanes."},
                    "pcs": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Distinct (device, error PC) pairs.",
                    },
                    "warps": {"type": "integer", "minimum": 0, "description": "Faulting warps."},
                    "without_lane": {
                        "type": "integer",
                        "minimum": 0,
                        "description": (
                            "Fault records that name no lane (warp- and SM-level faults)."
                        ),
                    },
                },
            },
            "faults": {
                "type": "array",
                "items": {"$ref": "#/$defs/fault"},
                "description": "Every fault record, each faulting lane its own.",
            },
            "file_size": {
                "type": "integer",
                "minimum": 0,
                "description": "Bytes of the dump (after decompression, for a compressed file).",
            },
            "findings": {
                "type": "array",
                "items": {"$ref": "#/$defs/finding"},
                "description": "What the reader set aside or read in part (a partial dump).",
            },
            "launches": {
                "type": "array",
                "items": {"$ref": "#/$defs/launch"},
                "description": "Every grid of every device.",
            },
            "layout_generation": {
                "type": "string",
                "description": 'The newest driver generation the row sizes show, e.g. "r575".',
            },
            "layouts": {
                "type": "array",
                "items": {"$ref": "#/$defs/layout"},
                "description": "The row size of each table kind the dump holds.",
            },
            "metadata": {
                "oneOf": [{"type": "null"}, {"$ref": "#/$defs/metadata"}],
                "description": "null when the dump has no metadata row (before r565).",
            },
            "modules": {"type": "array", "items": {"$ref": "#/$defs/module_summary"}},
            "optional_sections": {
                "type": "object",
                "additionalProperties": {"type": "integer", "minimum": 0},
                "description": (
                    'How many sections of each optional kind the dump holds ("global memory", '
                    '"metadata"…), 0 included.'
                ),
            },
            "path": {"type": "string", "description": "The dump as given on the command line."},
            "section_count": {"type": "integer", "minimum": 0},
        },
        "$defs": {
            "code_location": {
                "description": "Where a PC falls among the dump's loaded code.",
                "type": "object",
                "additionalProperties": False,
                "required": ["function", "module", "offset", "section_address", "section_name"],
                "properties": {
                    "function": {
                        "type": ["string", "null"],
                        "description": (
                            "The mangled name of the function symbol of that section, when there "
                            "is one."
                        ),
                    },
                    "module": {
                        "$ref": "#/$defs/module",
                        "description": "The module whose relocated image holds the PC.",
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": (
                            "PC minus the section start: what nvdisasm prints as `/*0110*/`."
                        ),
                    },
                    "section_address": {
                        "type": "integer",
                        "description": "An absolute device address.",
                    },
                    "section_name": {
                        "type": "string",
                        "description": "The executable section, e.g. `.text._Z10oob_kernelPfif`.",
                    },
                },
            },
            "device": {
                "description": "One GPU (a device-table row).",
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "dev_id",
                    "index",
                    "instruction_size",
                    "name",
                    "num_convergence_barriers_per_warp",
                    "num_lanes_per_warp",
                    "num_predicates_per_lane",
                    "num_regs_per_lane",
                    "num_sms",
                    "num_uniform_predicates_per_warp",
                    "num_uniform_regs_per_warp",
                    "num_warps_per_sm",
                    "pci_bus_id",
                    "pci_dev_id",
                    "sm_major",
                    "sm_minor",
                    "sm_type",
                    "status",
                    "type",
                ],
                "properties": {
                    "dev_id": {
                        "type": ["integer", "null"],
                        "description": "The driver's device ordinal.",
                    },
                    "index": {
                        "type": "integer",
                        "minimum": 0,
                        "description": (
                            "Row number in the device table (what `device_index` elsewhere "
                            "refers to)."
                        ),
                    },
                    "instruction_size": {
                        "type": ["integer", "null"],
                        "description": "Bytes per SASS instruction (16 on Volta and later).",
                    },
                    "name": {
                        "type": ["string", "null"],
                        "description": 'Marketing name, e.g. "NVIDIA H100 80GB HBM3".',
                    },
                    "num_convergence_barriers_per_warp": {
                        "type": ["integer", "null"],
                        "description": "Since r575.",
                    },
                    "num_lanes_per_warp": {"type": ["integer", "null"]},
                    "num_predicates_per_lane": {"type": ["integer", "null"]},
                    "num_regs_per_lane": {"type": ["integer", "null"]},
                    "num_sms": {"type": ["integer", "null"]},
                    "num_uniform_predicates_per_warp": {
                        "type": ["integer", "null"],
                        "description": "Since r400.",
                    },
                    "num_uniform_regs_per_warp": {
                        "type": ["integer", "null"],
                        "description": "Since r400.",
                    },
                    "num_warps_per_sm": {"type": ["integer", "null"]},
                    "pci_bus_id": {"type": ["integer", "null"]},
                    "pci_dev_id": {"type": ["integer", "null"]},
                    "sm_major": {"type": ["integer", "null"]},
                    "sm_minor": {"type": ["integer", "null"]},
                    "sm_type": {
                        "type": ["string", "null"],
                        "description": 'SM architecture, e.g. "sm_90".',
                    },
                    "status": {"type": ["integer", "null"]},
                    "type": {"type": ["string", "null"], "description": 'Chip, e.g. "GH100".'},
                },
            },
            "dim3": {
                "description": "(x, y, z); null where the dump's rows are too short to hold it.",
                "type": ["array", "null"],
                "items": {"type": "integer", "minimum": 0},
                "minItems": 3,
                "maxItems": 3,
            },
            "fault": {
                "description": "An exception found in the dump, with where it happened.",
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "block_idx",
                    "detail",
                    "device_index",
                    "error_pc",
                    "exception",
                    "exception_name",
                    "function_offset",
                    "grid_id",
                    "lane",
                    "lane_record",
                    "location",
                    "sm_id",
                    "source",
                    "thread_idx",
                    "warp_id",
                    "warp_record",
                ],
                "properties": {
                    "block_idx": {"$ref": "#/$defs/dim3"},
                    "detail": {
                        "type": ["string", "null"],
                        "description": (
                            "The driver's own words about the exception (the SM row's string, "
                            "r580+)."
                        ),
                    },
                    "device_index": {"type": "integer", "minimum": 0},
                    "error_pc": {
                        "type": ["integer", "null"],
                        "description": "An absolute device address.",
                    },
                    "exception": {
                        "type": ["integer", "null"],
                        "description": (
                            "The exception code; null when only a warp's error PC says something "
                            "went wrong."
                        ),
                    },
                    "exception_name": {
                        "type": "string",
                        "description": (
                            "The exception in words, as cuda-gdb spells it; an unknown code is "
                            "given by number."
                        ),
                    },
                    "function_offset": {
                        "type": ["integer", "null"],
                        "description": "The lane's own function-relative PC.",
                    },
                    "grid_id": {
                        "type": ["integer", "null"],
                        "description": (
                            "null for an SM-level fault (the warp that faulted is gone)."
                        ),
                    },
                    "lane": {"type": ["integer", "null"]},
                    "lane_chosen": LANE_CHOSEN,
                    "lane_record": {
                        "oneOf": [{"type": "null"}, {"$ref": "#/$defs/lane"}],
                        "description": "The faulting lane's row, for a lane fault.",
                    },
                    "lanes_lost": LANES_LOST,
                    "location": {
                        "oneOf": [{"type": "null"}, {"$ref": "#/$defs/code_location"}],
                        "description": "null when no relocated image in the dump holds the PC.",
                    },
                    "sm_id": {"type": ["integer", "null"]},
                    "source": {
                        "enum": shared.values(FaultSource),
                        "description": (
                            "Which part of the dump reported it: a lane's, a warp's or an SM's "
                            "exception, or a warp stopped at a trap."
                        ),
                    },
                    "thread_idx": {"$ref": "#/$defs/dim3"},
                    "warp_id": {"type": ["integer", "null"]},
                    "warp_record": {
                        "oneOf": [{"type": "null"}, {"$ref": "#/$defs/warp"}],
                        "description": "The faulting warp's row; null for an SM-level fault.",
                    },
                },
            },
            "finding": shared.FINDING,
            "grid": {
                "description": "A kernel launch (a grid-table row).",
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "attr_host_tid",
                    "attr_launch_blocking",
                    "block_dim",
                    "cluster_dim",
                    "context_id",
                    "device_index",
                    "function",
                    "function_entry",
                    "grid_dim",
                    "grid_id",
                    "grid_status",
                    "kernel_type",
                    "module_handle",
                    "num_regs",
                    "origin",
                    "params_offset",
                    "parent_grid_id",
                    "preferred_cluster_dim",
                ],
                "properties": {
                    "attr_host_tid": {"type": ["integer", "null"]},
                    "attr_launch_blocking": {"type": ["integer", "null"]},
                    "block_dim": {"$ref": "#/$defs/dim3"},
                    "cluster_dim": {"$ref": "#/$defs/dim3", "description": "Since r525."},
                    "context_id": {"type": ["integer", "null"]},
                    "device_index": {"type": "integer", "minimum": 0},
                    "function": {
                        "type": ["integer", "null"],
                        "description": "The driver's function handle.",
                    },
                    "function_entry": {
                        "type": ["integer", "null"],
                        "description": "Absolute address of the kernel's first instruction.",
                    },
                    "grid_dim": {"$ref": "#/$defs/dim3"},
                    "grid_id": {"type": ["integer", "null"]},
                    "grid_status": {"type": ["integer", "null"]},
                    "kernel_type": {"type": ["integer", "null"]},
                    "module_handle": {"type": ["integer", "null"]},
                    "num_regs": {"type": ["integer", "null"]},
                    "origin": {
                        "type": ["integer", "null"],
                        "description": (
                            "0: launched from the CPU, 1: from the GPU (dynamic parallelism)."
                        ),
                    },
                    "params_offset": {"type": ["integer", "null"]},
                    "parent_grid_id": {"type": ["integer", "null"]},
                    "preferred_cluster_dim": {
                        "$ref": "#/$defs/dim3",
                        "description": "Since r565.",
                    },
                },
            },
            "image": {
                "description": "A cubin stored in the dump.",
                "type": "object",
                "additionalProperties": False,
                "required": ["relocated", "section", "size_bytes"],
                "properties": {
                    "relocated": {
                        "type": "boolean",
                        "description": (
                            "true for `.cudbg.relfimg` (addresses are load addresses), false for "
                            "`.cudbg.elfimg`."
                        ),
                    },
                    "section": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Index of the section that holds the cubin.",
                    },
                    "size_bytes": {"type": "integer", "minimum": 0},
                },
            },
            "lane": {
                "description": "A lane-table row.",
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "block_idx",
                    "call_depth",
                    "cbu_thread_state",
                    "cc_register",
                    "device_index",
                    "exception",
                    "function_offset",
                    "grid_id",
                    "lane",
                    "return_pc",
                    "sm_id",
                    "syscall_call_depth",
                    "thread_idx",
                    "virtual_pc",
                    "warp_id",
                ],
                "properties": {
                    "block_idx": {"$ref": "#/$defs/dim3"},
                    "call_depth": {"type": ["integer", "null"]},
                    "cbu_thread_state": {
                        "type": ["integer", "null"],
                        "description": "Since r575.",
                    },
                    "cc_register": {"type": ["integer", "null"]},
                    "device_index": {"type": "integer", "minimum": 0},
                    "exception": {
                        "type": ["integer", "null"],
                        "description": "The lane's exception code.",
                    },
                    "exception_name": {
                        "type": "string",
                        "description": (
                            "The exception in words; present exactly when `exception` is not null."
                        ),
                    },
                    "function_offset": {
                        "type": ["integer", "null"],
                        "description": "PC relative to the start of the executing function.",
                    },
                    "grid_id": {"type": ["integer", "null"]},
                    "lane": {
                        "type": ["integer", "null"],
                        "description": "Lane id inside the warp.",
                    },
                    "lane_chosen": LANE_CHOSEN,
                    "lanes_lost": LANES_LOST,
                    "return_pc": {
                        "type": ["integer", "null"],
                        "description": "The return-PC register (r615+).",
                    },
                    "sm_id": {"type": ["integer", "null"]},
                    "syscall_call_depth": {"type": ["integer", "null"]},
                    "thread_idx": {"$ref": "#/$defs/dim3"},
                    "virtual_pc": {"type": ["integer", "null"], "description": "Absolute PC."},
                    "warp_id": {"type": ["integer", "null"]},
                },
                "if": {"properties": {"exception": {"type": "integer"}}},
                "then": {"required": ["exception_name"]},
                "else": {"not": {"required": ["exception_name"]}},
            },
            "launch": {
                "description": "A grid with the kernel its entry address resolves to.",
                "type": "object",
                "additionalProperties": False,
                "required": ["faulted", "grid", "kernel"],
                "properties": {
                    "faulted": {
                        "type": "boolean",
                        "description": (
                            "A fault names this grid (or, for an SM-level fault that names none, "
                            "this grid's kernel holds the error PC)."
                        ),
                    },
                    "grid": {"$ref": "#/$defs/grid"},
                    "kernel": {
                        "type": ["string", "null"],
                        "description": (
                            "Mangled name of the kernel, when a relocated image holds the grid's "
                            "entry address."
                        ),
                    },
                },
            },
            "layout": {
                "description": "The row size one table kind uses in this dump.",
                "type": "object",
                "additionalProperties": False,
                "required": ["generation", "row_size", "table"],
                "properties": {
                    "generation": {
                        "type": "string",
                        "description": (
                            'The driver generation those rows mean, e.g. "r575", or what they '
                            'are when no driver writes them ("short rows (8 of 104 bytes)").'
                        ),
                    },
                    "row_size": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Bytes per row in this dump (the section's sh_entsize).",
                    },
                    "table": {
                        "type": "string",
                        "description": 'The table kind, e.g. "lane table".',
                    },
                },
            },
            "metadata": {
                "description": "The dump's metadata row (r565+).",
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "cuda_driver_version",
                    "cuda_driver_version_text",
                    "driver_version",
                    "driver_version_text",
                    "flag_names",
                    "flags",
                    "generator_name",
                    "timestamp",
                ],
                "properties": {
                    "cuda_driver_version": {
                        "type": ["array", "null"],
                        "items": {"type": "integer"},
                        "minItems": 2,
                        "maxItems": 2,
                        "description": "(major, minor).",
                    },
                    "cuda_driver_version_text": {
                        "type": ["string", "null"],
                        "description": 'The CUDA driver API version as "13.0".',
                    },
                    "driver_version": {
                        "type": ["array", "null"],
                        "items": {"type": "integer"},
                        "minItems": 2,
                        "maxItems": 2,
                        "description": "(major, minor).",
                    },
                    "driver_version_text": {
                        "type": ["string", "null"],
                        "description": 'The driver version as "580.65".',
                    },
                    "flag_names": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": (
                            "The generation flags by name (`skip_global_memory`); unknown bits "
                            "as a hex number."
                        ),
                    },
                    "flags": {
                        "type": ["integer", "null"],
                        "description": "Generation flags the dump was written with.",
                    },
                    "generator_name": {"type": ["string", "null"]},
                    "timestamp": {
                        "type": ["integer", "null"],
                        "description": "Unix seconds when the dump was written.",
                    },
                },
            },
            "module": {
                "description": "A loaded module (one cubin) of a context.",
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "context_id",
                    "device_index",
                    "module_handle",
                    "relocated_image",
                    "unrelocated_image",
                ],
                "properties": {
                    "context_id": {"type": ["integer", "null"]},
                    "device_index": {"type": ["integer", "null"], "minimum": 0},
                    "module_handle": {"type": ["integer", "null"]},
                    "relocated_image": {
                        "oneOf": [{"type": "null"}, {"$ref": "#/$defs/image"}],
                        "description": (
                            "null when the dump holds no relocated image for this module."
                        ),
                    },
                    "unrelocated_image": {
                        "oneOf": [{"type": "null"}, {"$ref": "#/$defs/image"}],
                        "description": (
                            "null when written with `skip_nonrelocated_elf_images` (the usual "
                            "setting)."
                        ),
                    },
                },
            },
            "module_summary": {
                "description": "A module and the functions of its relocated image.",
                "type": "object",
                "additionalProperties": False,
                "required": ["abi_version", "functions", "module"],
                "properties": {
                    "abi_version": {
                        "type": ["integer", "null"],
                        "description": (
                            "The cubin's ELF ABI version (7: CUDA 11/12, 8: CUDA 13); null "
                            "without an image."
                        ),
                    },
                    "functions": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Mangled names of the functions of its relocated image.",
                    },
                    "module": {"$ref": "#/$defs/module"},
                },
            },
            "warp": {
                "description": "A warp-table row.",
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "active_lanes_mask",
                    "additional_barrier_info",
                    "barrier_scope",
                    "block_idx",
                    "cbu_active_lanes_mask",
                    "cbu_collective_lanes_mask",
                    "cbu_exited_lanes_mask",
                    "device_index",
                    "error_pc",
                    "grid_id",
                    "in_syscall_lanes_mask",
                    "is_broken",
                    "num_regs",
                    "shared_mem_size",
                    "sm_id",
                    "valid_lanes_mask",
                    "warp_id",
                ],
                "properties": {
                    "active_lanes_mask": {"type": ["integer", "null"]},
                    "additional_barrier_info": {
                        "type": ["string", "null"],
                        "description": "Since r590.",
                    },
                    "barrier_scope": {"type": ["integer", "null"], "description": "Since r590."},
                    "block_idx": {"$ref": "#/$defs/dim3"},
                    "cbu_active_lanes_mask": {"type": ["integer", "null"]},
                    "cbu_collective_lanes_mask": {"type": ["integer", "null"]},
                    "cbu_exited_lanes_mask": {"type": ["integer", "null"]},
                    "device_index": {"type": "integer", "minimum": 0},
                    "error_pc": {
                        "type": ["integer", "null"],
                        "description": (
                            "Absolute PC of the warp's exception, when the row marks it valid."
                        ),
                    },
                    "grid_id": {"type": ["integer", "null"]},
                    "in_syscall_lanes_mask": {"type": ["integer", "null"]},
                    "is_broken": {
                        "type": ["boolean", "null"],
                        "description": "Stopped at a trap or breakpoint.",
                    },
                    "num_regs": {
                        "type": ["integer", "null"],
                        "description": "Registers per lane (r525+).",
                    },
                    "shared_mem_size": {
                        "type": ["integer", "null"],
                        "description": "Shared memory of the CTA in bytes (r570+).",
                    },
                    "sm_id": {"type": ["integer", "null"]},
                    "valid_lanes_mask": {"type": ["integer", "null"]},
                    "warp_id": {"type": ["integer", "null"]},
                },
            },
        },
    }
