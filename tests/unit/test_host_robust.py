"""The host-log parsers and reader on hostile input: garbage, binary bytes, huge lines, pipes,
huge files. Nothing raises, nothing is invented, and the work stays bounded."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem.errors import UnreadableFile
from postmortem.host.cudaerror import parse_cuda_errors
from postmortem.host.driver import parse_driver_log
from postmortem.host.lines import MAX_LINE_CHARS
from postmortem.host.reader import parse_host_lines, read_host_log
from postmortem.host.sanitizer import parse_sanitizer_report
from postmortem.host.sglang import parse_sglang_api_log
from tests.fifo import rescued
from tests.tooling import examples

PARSERS = (parse_sglang_api_log, parse_cuda_errors, parse_driver_log, parse_sanitizer_report)

# Pieces of every format, so that random lines reach the parsers' deeper branches.
FRAGMENTS = [
    "[2026-03-19 00:47:06] SGLang Kernel API Call: ",
    "SGLang Kernel API Exception: x (",
    "Positional input arguments:",
    "Keyword input arguments:",
    "Output:",
    "  arg[0]=Tensor(",
    "  arg[1]=Tensor(shape=(2,), dtype=torch.int64, device=cuda:0)",
    "      shape=(",
    "      min=",
    "      nan_count=",
    "    )",
    "Dumped inputs to: ",
    "Tensor dump skipped: ",
    "Traceback (most recent call last):",
    '  File "x.py", line 7, in f',
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported",
    "k.cu:12: kern: block: [1,2,3], thread: [4,5,6] Assertion `x` failed.",
    "NVRM: Xid (PCI:0000:3b:00): 31, pid=1, name=p, Ch 00000008, ",
    "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. ",
    "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    "coredump: Detected an exception of type CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS (14)",
    "coredump:   - PC 0x",
    "coredump: Writing ELF file to ",
    "CUDA Exception: Warp Illegal Address",
    "The exception was triggered at PC 0x10 k",
    "[Current focus set to CUDA kernel 0, grid 1, block (0,0,0), thread (0,0,0), device 0]",
    "========= Invalid __global__ write of size 4 bytes",
    "=========     at k(int)+0x70 in f.cu:12",
    "=========     at 0x70 in f.cu:12:k",
    "=========     by thread (1,0,0) in block (2,0,0)",
    "=========     Address 0x10 is out of bounds",
    "========= ERROR SUMMARY: 3 errors",
    "CUDA coredump is not supported with CUDA attach on exception",
    "(EngineCore_DP0 pid=1) ERROR 11-25 12:06:16 [dump_input.py:69] ",
    "Dumping input data for V1 LLM engine (v0.11.0) with config: model='m', ",
    "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[",
    "NewRequestData(req_id=r,prompt_token_ids_len=5,num_computed_tokens=0)",
    "], scheduled_cached_reqs=CachedRequestData(req_ids=['a'], num_computed_tokens=[1]), ",
    "num_scheduled_tokens={r: 5, a: 1}, total_num_scheduled_tokens=6)",
    "Dumping scheduler stats: SchedulerStats(num_running_reqs=1, kv_cache_usage=0.5)",
    "(",
    ")",
    "=",
    "\x00\x1b[31m\u2028\ufffd",
]
line_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=40), max_size=6).map("".join)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(line_text, max_size=40))
def test_no_parser_raises_on_any_lines(lines):
    parsed = parse_host_lines(Path("x.log"), lines, 0, 0)
    # Every fact points at a line that is there, and holds a bounded piece of it.
    facts = [
        *(parsed.sglang.calls if parsed.sglang else ()),
        *(parsed.cuda_errors.errors + parsed.cuda_errors.asserts if parsed.cuda_errors else ()),
        *(parsed.driver.xids + parsed.driver.exceptions if parsed.driver else ()),
        *(parsed.sanitizer.errors if parsed.sanitizer else ()),
        *(parsed.vllm.dumps if parsed.vllm else ()),
    ]
    assert all(1 <= fact.line <= len(lines) for fact in facts)
    assert (parsed.sglang is None) == (parse_sglang_api_log(lines) is None)


@settings(max_examples=examples(1 / 3))
@given(st.binary(max_size=4096))
def test_the_reader_takes_any_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "log"
    path.write_bytes(data)
    parsed = read_host_log(path)
    assert parsed.size_bytes == len(data) and parsed.read_from == 0


def test_huge_lines_cost_what_a_short_line_costs():
    # GIVEN lines of megabytes made of every format's markers, without a newline
    markers = "".join(FRAGMENTS)
    huge = [markers * (4 << 20 // len(markers)), ": block: [" * 500_000, "=" * (8 << 20)]
    # WHEN every parser reads them
    started = time.monotonic()
    for parse in PARSERS:
        parse(huge)
    # THEN each line was read up to the bound only (seconds, not minutes, on a loaded machine)
    assert time.monotonic() - started < 20
    cut = [line[:MAX_LINE_CHARS] for line in huge]
    assert all(parse(huge) == parse(cut) for parse in PARSERS)


def test_binary_garbage_is_not_recognized(tmp_path):
    path = tmp_path / "core"
    path.write_bytes(bytes(range(256)) * 512)
    assert read_host_log(path).kinds == ()


def test_an_excerpt_s_header_is_skipped_only_at_the_start():
    header = "# note: an illegal memory access was encountered"
    assert parse_cuda_errors([header, "ok"]) is None
    later = parse_cuda_errors(["ok", header])
    assert later is not None and later.errors[0].line == 2


def test_a_big_file_is_read_from_its_tail_and_says_so(tmp_path):
    # GIVEN a log whose first Xid line is far before its end
    path = tmp_path / "kern.log"
    xid = "NVRM: Xid (PCI:0000:3b:00): {}, pid=1, Ch 00000008\n"
    filler = "x" * 99 + "\n"
    path.write_text(xid.format(13) + filler * 1000 + xid.format(43), encoding="utf-8")
    # WHEN only its last 1000 bytes are read
    parsed = read_host_log(path, tail_bytes=1000)
    # THEN the tail starts at a whole line, the early Xid is not in it, and the cut is said
    size = path.stat().st_size
    first_whole_line = len(xid.format(13)) + 100 * -(-(size - 1000 - len(xid.format(13))) // 100)
    assert parsed.cut and parsed.read_from == first_whole_line
    assert parsed.driver is not None and [x.xid for x in parsed.driver.xids] == [43]
    assert parsed.size_bytes == path.stat().st_size


def test_a_tail_that_starts_at_a_line_start_keeps_that_line(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a" * 99 + b"\nNVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus\n")
    size = path.stat().st_size
    parsed = read_host_log(path, tail_bytes=size - 100)
    assert parsed.read_from == 100 and parsed.driver is not None


def test_a_pipe_is_streamed_and_only_its_tail_kept(tmp_path):
    # GIVEN a named pipe a writer fills with more than the tail (as <(journalctl -k) does)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    body = b"y" * 5000 + b"\nNVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus\n"

    def write() -> None:
        with fifo.open("wb") as writer:
            for start in range(0, len(body), 700):
                writer.write(body[start : start + 700])

    writer = threading.Thread(target=write)
    writer.start()
    # WHEN it is read with a tail of 2000 bytes
    parsed = read_host_log(fifo, tail_bytes=2000)
    writer.join(timeout=10)
    # THEN everything streamed is counted, the tail parsed, the cut said
    assert parsed.size_bytes == len(body) and parsed.cut
    assert parsed.driver is not None and parsed.driver.xids[0].xid == 79


@pytest.mark.parametrize("make", ["missing", "folder"])
def test_a_log_that_cannot_be_read_is_one_error(tmp_path, make):
    path = tmp_path / "log"
    if make == "folder":
        path.mkdir()
    with pytest.raises(UnreadableFile) as caught:
        read_host_log(path)
    assert str(caught.value).startswith(f"{path}: cannot read: ")
    assert "\n" not in str(caught.value)


def test_crlf_and_an_empty_file(tmp_path):
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(b"NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus\r\n")
    parsed = read_host_log(crlf)
    assert parsed.driver is not None
    assert parsed.driver.xids[0].detail == "GPU has fallen off the bus"
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert read_host_log(empty).kinds == () and read_host_log(empty).lines == 0


def test_a_named_pipe_no_process_writes_to_is_refused_not_waited_on_forever(tmp_path):
    # GIVEN --host-log naming a FIFO that no process opens to write
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # WHEN it is read, waiting a fifth of a second for a writer
    started = time.monotonic()
    with rescued(fifo), pytest.raises(UnreadableFile) as caught:
        read_host_log(fifo, writer_wait_s=0.2)
    # THEN it is one error once the wait is over
    assert time.monotonic() - started < 5
    assert (
        str(caught.value) == f"{fifo}: cannot read: a pipe that no process writes to (waited 0.2 s)"
    )


def test_a_character_device_is_refused(tmp_path):
    with pytest.raises(UnreadableFile, match="is not a regular file or a pipe"):
        read_host_log(Path("/dev/zero"))
