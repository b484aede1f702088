"""The cuda-gdb adapter: build the command line, run it, parse what it prints.

cuda-gdb is a second opinion beside the native coredump reader: it computes what only a
debugger does (unwinding, DWARF line tables) and its answers are cross-checked, never
trusted blindly. Everything here works from recorded text as well as from a live run.
"""

from __future__ import annotations

from postmortem.gdb.banner import parse_exception_banner, parse_focus
from postmortem.gdb.command import (
    DEFAULT_COMMANDS,
    CommandOutput,
    SplitOutput,
    build_cuda_gdb_argv,
    split_output,
)
from postmortem.gdb.faults import KNOWN_FAULTS, diagnose
from postmortem.gdb.location import (
    parse_backtrace,
    parse_disassembly,
    parse_info_line,
    parse_info_symbol,
    parse_print_int,
)
from postmortem.gdb.model import Parsed, Unparsed
from postmortem.gdb.parse import (
    parse_blocks,
    parse_contexts,
    parse_devices,
    parse_kernels,
    parse_lanes,
    parse_sms,
    parse_threads,
    parse_warps,
)
from postmortem.gdb.run import GdbSession, run_cuda_gdb

__all__ = [
    "DEFAULT_COMMANDS",
    "KNOWN_FAULTS",
    "CommandOutput",
    "GdbSession",
    "Parsed",
    "SplitOutput",
    "Unparsed",
    "build_cuda_gdb_argv",
    "diagnose",
    "parse_backtrace",
    "parse_blocks",
    "parse_contexts",
    "parse_devices",
    "parse_disassembly",
    "parse_exception_banner",
    "parse_focus",
    "parse_info_line",
    "parse_info_symbol",
    "parse_kernels",
    "parse_lanes",
    "parse_print_int",
    "parse_sms",
    "parse_threads",
    "parse_warps",
    "run_cuda_gdb",
    "split_output",
]
