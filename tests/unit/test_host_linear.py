"""Every host-log parser reads crafted lines in time linear in their length.

The lines of fixtures/builder/hostile_logs.py each aim at a pattern that backtracks: a run of
blanks after a marker, a marker repeated across the line, a bracket or colon without its
partner. Before the parsers were rewritten, an 8 MB log of such lines took 51 s (cuda-gdb's
"triggered at PC" line) and 20 s (a compute-sanitizer location); now each takes well under a
second. The bound is generous, for a loaded machine: a regression is minutes, not seconds.
vLLM's engine dump is read past the 4096 characters the others read of a line, so its cases
include a 10 MiB line, 100,000 nested brackets and binary garbage.
"""

from __future__ import annotations

import sys
import time

import pytest

from postmortem.host.cudaerror import parse_cuda_errors
from postmortem.host.driver import parse_driver_log
from postmortem.host.sanitizer import parse_sanitizer_report
from postmortem.host.sglang import parse_sglang_api_log
from postmortem.host.vllm import parse_vllm_dump
from tests.conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "builder"))
from hostile_logs import LOG_BYTES, all_cases, crafted_lines  # noqa: E402

PARSERS = {
    "driver": parse_driver_log,
    "sglang": parse_sglang_api_log,
    "cudaerror": parse_cuda_errors,
    "sanitizer": parse_sanitizer_report,
    "vllm": parse_vllm_dump,
}
BOUND_S = 5.0


@pytest.mark.parametrize(("parser", "case"), all_cases(), ids=lambda part: part)
def test_a_crafted_log_is_parsed_in_linear_time(parser, case):
    # GIVEN 8 MB of lines crafted against one parser
    lines = crafted_lines(parser, case)
    assert sum(len(line) + 1 for line in lines) >= LOG_BYTES * 0.99
    # WHEN every parser reads them (each is run on every log)
    for name, parse in PARSERS.items():
        started = time.perf_counter()
        parse(lines)
        seconds = time.perf_counter() - started
        # THEN each finishes within the bound
        assert seconds < BOUND_S, f"{name} took {seconds:.1f} s on {parser}/{case}"
