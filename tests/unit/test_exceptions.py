"""Every exception code, 0 to 36 and the unknown one, through every reader of the one table
(postmortem.exceptions): names, the on-call class, the imprecise-PC rule, the alignment check,
the host's CUDA error words, the driver's and cuda-gdb's lines, compute-sanitizer's."""

from __future__ import annotations

from pathlib import Path

import pytest

from postmortem.analysis.fault.fault import FaultSite
from postmortem.analysis.host.cudaerror import cuda_error_checks
from postmortem.analysis.oncall.summary import _fault_class
from postmortem.exceptions import (
    EXCEPTIONS,
    PROBLEM_WORDS,
    ProblemClass,
    codes_for_host_words,
    describe_exception,
    find_exception,
    is_memory_exception,
    is_misaligned,
)
from postmortem.host.driver import parse_driver_log
from postmortem.host.model import CudaErrorLog, CudaErrorReport

CODES = [*range(37), 0xFFFFFFFF]
HOST_WORDS = sorted({word for kind in EXCEPTIONS for word in kind.host_words})


def site(code: int) -> FaultSite:
    return FaultSite((), None, code, None, None, None, None, (), (), (), None, None, ())


def test_the_table_holds_every_code_of_the_debugger_header_once():
    assert [kind.code for kind in EXCEPTIONS] == CODES
    assert {k.code for k in EXCEPTIONS if k.reserved} == {1, 2, 3, 11, 13, 15, 16}
    assert find_exception(37) is None and find_exception(None) is None


@pytest.mark.parametrize("code", CODES)
def test_each_code_reads_alike_everywhere(code):
    kind = find_exception(code)
    assert kind is not None
    # named as cuda-gdb names it; a reserved code says so
    assert describe_exception(code).startswith(kind.name)
    assert ("reserved" in describe_exception(code)) is kind.reserved
    # the on-call summary files it under the table's class, in the class's words
    problem, words = _fault_class(site(code))
    assert problem is kind.problem
    assert words.startswith(PROBLEM_WORDS[kind.problem])
    # the imprecise-PC rule and the alignment check ask the table
    assert is_memory_exception(code) is kind.memory
    assert is_misaligned(code) is kind.misaligned
    assert not kind.misaligned or kind.memory
    # the host's error words stand for exactly the codes whose rows name them
    for word in HOST_WORDS:
        assert (code in codes_for_host_words(word)) is (word in kind.host_words)
        error = CudaErrorReport(1, word, None, word, word, False, ())
        (check,) = cuda_error_checks(
            Path("h.log"), CudaErrorLog((error,), (), 1, 0), [site(code)], []
        )
        assert check.agrees is (word in kind.host_words)
    # cuda-gdb's banner line in a host log is read back to the code
    if code:
        log = parse_driver_log([f"CUDA Exception: {kind.name}"])
        assert log is not None and [e.code for e in log.exceptions] == [code]


def test_an_unknown_code_is_named_by_number_and_filed_as_another_exception():
    assert describe_exception(37) == "Device Unknown Exception (code 37, 0x25)"
    assert _fault_class(site(37))[0] is ProblemClass.OTHER_EXCEPTION
    assert not is_memory_exception(37) and not codes_for_host_words("no-such-kind")
