"""SGLang crash pickles are summarized from their opcodes, never loaded.

The pickles are real: written by `pickle` from stand-ins named as SGLang's classes
(fixtures/builder/crash_pickles.py), in the layouts SGLang's versions wrote, with protocols
0 to 5; and hostile: pickles that run a command when loaded, bombs of nesting, width and
memo, truncations, random bytes, and names that are not files.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pickle
import pickletools
import pkgutil
import random
import struct
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import given
from hypothesis import strategies as st

import postmortem.host.crashpickle as crashpickle_package
from postmortem.errors import UnreadableFile
from postmortem.host.crashpickle import (
    CrashPickleLayout,
    CrashPickleLimits,
    CrashPickleSummary,
    crash_pickle_text,
    summarize_crash_pickle,
)
from tests.conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "builder"))
import crash_pickles as built  # type: ignore[import-not-found]  # noqa: E402

NOW = built.NOW
QUICK = CrashPickleLimits(max_seconds=1.0, max_opcodes=400_000)
"""Limits that make a bomb stop fast on a loaded machine."""


def written(tmp_path: Path, data: bytes, name: str = built.NAME) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def summary_of(tmp_path: Path, data: bytes, **limits: Any) -> CrashPickleSummary:
    # The time cap is the one limit a loaded machine reaches first: a test that checks what is
    # read, not when reading stops, is given a minute.
    limits.setdefault("max_seconds", 60.0)
    return summarize_crash_pickle(written(tmp_path, data), limits=CrashPickleLimits(**limits))


# --- the dump SGLang writes ----------------------------------------------------------------


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
@pytest.mark.parametrize("layout", ["oldest", "launch", "newest"])
def test_crash_dump_requests_are_counted_aged_and_read(
    tmp_path: Path, protocol: int, layout: str
) -> None:
    # GIVEN 3 requests that finished and 2 in flight at NOW, as SGLang writes them
    data = built.crash_dump(protocol, layout)
    # WHEN
    summary = summarize_crash_pickle(written(tmp_path, data))
    # THEN
    assert summary.stopped is None and summary.complete
    assert summary.protocol == (None if protocol < 2 else protocol)
    assert summary.layout is CrashPickleLayout.CRASH_DUMP
    assert summary.name_time == "2025-06-04_20-13-18"
    assert summary.request_count == 5
    assert (summary.finished_count, summary.in_flight_count) == (3, 2)
    assert summary.dump_time == NOW
    rows = {r.index: r for r in summary.requests}
    assert [rows[i].age_s for i in range(5)] == [200.0, 199.0, 198.0, 60.0, 70.0]
    assert [rows[i].finished for i in range(5)] == [True, True, True, False, False]
    assert [rows[i].finish_reason for i in range(5)] == ["stop"] * 3 + [None] * 2
    assert rows[0].request_class == "sglang.srt.managers.io_struct.GenerateReqInput"
    assert (rows[0].rid, rows[0].input_chars, rows[0].input_tokens) == ("req-0000", 200, None)
    assert (rows[0].max_new_tokens, rows[0].stream, rows[0].output_tokens) == (128, False, 20)
    assert (rows[1].input_tokens, rows[1].input_chars, rows[1].stream) == (1001, None, True)
    assert (rows[2].rid, rows[2].batch_size, rows[2].input_chars) == ("req-0002-0", 3, 36)
    assert rows[2].max_new_tokens == 64
    assert rows[3].created_time == NOW - 60 and rows[3].end_time == NOW
    assert rows[3].output_tokens == (None if layout == "oldest" else 3)
    assert rows[4].output_tokens == (None if layout == "oldest" else 7)
    assert summary.code_calls == ()


@pytest.mark.parametrize("layout", ["oldest", "launch", "newest"])
def test_crash_dump_keys_are_those_of_its_layout(tmp_path: Path, layout: str) -> None:
    summary = summary_of(tmp_path, built.crash_dump(4, layout))
    expected = {
        "oldest": ("server_args", "requests"),
        "launch": ("server_args", "requests", "launch_command"),
        "newest": ("server_args", "requests", "launch_command", "config_updates",
                   "resolved_config"),
    }[layout]  # fmt: skip
    assert summary.keys == expected
    assert (summary.launch_command is None) == (layout == "oldest")


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_server_args_key_fields_are_read(tmp_path: Path, protocol: int) -> None:
    args = summary_of(tmp_path, built.crash_dump(protocol)).server_args
    assert args is not None
    assert args.class_name == "sglang.srt.server_args.ServerArgs"
    assert args.model_path == "~/models/Llama-3.1-8B"  # the home folder hidden
    assert (args.tp_size, args.dp_size, args.pp_size, args.ep_size) == (2, 1, 1, 1)
    assert (args.quantization, args.dtype, args.kv_cache_dtype) == ("fp8", "bfloat16", "fp8_e4m3")
    assert (args.attention_backend, args.mem_fraction_static) == ("flashinfer", 0.85)
    assert (args.max_running_requests, args.chunked_prefill_size) == (256, 8192)
    assert args.cuda_graph is True
    assert dict(args.other)["context_length"] == "32768"
    assert "api_key" not in dict(args.other)


def test_launch_command_hides_secrets_and_home_folders(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, built.crash_dump(4, "launch"))
    assert summary.launch_command == (
        "python -m sglang.launch_server --model-path ~/models/Llama-3.1-8B --tp-size 2 "
        "--api-key [redacted] --hf-token [redacted]"
    )
    text = crash_pickle_text(summary)
    for secret in ("sk-live", "hf_abc", "/home/alice"):
        assert secret not in text


def test_server_args_written_as_none_say_why(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, built.crash_dump(4, "newest", server_args=False))
    assert summary.server_args is None
    assert summary.request_count == 5
    assert any("server_args is None" in note for note in summary.notes)


def test_a_bare_request_list_is_read_as_the_replay_script_does(tmp_path: Path) -> None:
    with built.sglang_stand_ins():
        records = [
            (built._request(i), built._finished_output(i), NOW - 9, NOW - i) for i in range(4)
        ]
        data = pickle.dumps(records, protocol=4)
    summary = summary_of(tmp_path, data)
    assert summary.layout is CrashPickleLayout.REQUEST_LIST
    assert (summary.request_count, summary.finished_count, summary.dump_time) == (4, 4, NOW)
    assert [r.rid for r in summary.requests] == ["req-0000", "req-0001", "req-0002", "req-0003"]


def test_many_requests_keep_the_first_and_the_last_in_flight(tmp_path: Path) -> None:
    # GIVEN 1500 finished requests, then 600 in flight: more than the 2 x 512 kept
    data = built.crash_dump(4, finished=1500, in_flight=600)
    # WHEN
    summary = summary_of(tmp_path, data)
    # THEN the count is exact, the first 512 and the last 512 are kept, and those are in flight
    assert summary.request_count == 2100
    indices = [r.index for r in summary.requests]
    assert indices == list(range(512)) + list(range(1588, 2100))
    assert summary.in_flight_count == 512
    assert summary.requests[-1].rid == "req-2099"
    assert any("kept in part" in cap for cap in summary.caps_hit)
    text = crash_pickle_text(summary)
    assert "requests: 2,100 (512 finished, 512 in flight, 1,024 kept)" in text


def test_text_fits_one_screen(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, built.crash_dump(4, "newest", finished=40, in_flight=30))
    lines = crash_pickle_text(summary).splitlines()
    assert len(lines) <= 30
    assert max(len(line) for line in lines) <= 100
    assert lines[0] == f"{built.NAME}: SGLang crash dump, 122.8 KiB, pickle protocol 4"
    assert lines[1] == "server: ~/models/Llama-3.1-8B"
    assert "tp 2  dp 1  pp 1  ep 1  dtype bfloat16  quantization fp8" in lines[2]
    assert any(line.startswith("launch: python -m sglang.launch_server") for line in lines)
    assert "in flight, oldest first" in "\n".join(lines)
    assert any("req-0069" in line and "1,069 tokens / 197 / 3 / 720.0 s" in line for line in lines)


def test_committed_crash_pickles_are_what_the_builder_writes(tmp_path: Path) -> None:
    for name, build in built.COMMITTED.items():
        path = FIXTURES / "crashpickles" / name
        assert path.read_bytes() == build(), f"{name}: rerun fixtures/builder/crash_pickles.py"
        summary = summarize_crash_pickle(path)
        assert summary.complete and summary.request_count == 5, name


# --- nothing is ever loaded, imported or called -------------------------------------------


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize(
    ("kind", "callable_name"), [("system", "posix.system"), ("eval", "builtins.eval")]
)
def test_a_pickle_that_runs_code_is_summarized_and_never_run(
    tmp_path: Path, protocol: int, kind: str, callable_name: str
) -> None:
    # GIVEN a crash-dump-shaped pickle that creates a marker file when loaded
    marker = tmp_path / "pwned"
    data = built.code_running(kind, marker, protocol)
    name = callable_name.split(".")[1]
    assert any(name in arg for arg in _named_globals(data))  # it does name the callable
    # WHEN
    summary = summary_of(tmp_path, data)
    # THEN the summary is there, says so, and nothing ran
    assert not marker.exists()
    assert summary.complete and summary.layout is CrashPickleLayout.CRASH_DUMP
    assert summary.request_count == 1
    assert summary.requests[0].request_class == callable_name
    assert summary.code_calls == (callable_name,)
    assert summary.server_args is not None and summary.server_args.tp_size == 2
    assert f"DANGER: loading this file would call {callable_name}" in crash_pickle_text(summary)


def _named_globals(data: bytes) -> set[str]:
    return {arg for _, arg, _ in pickletools.genops(data) if isinstance(arg, str)}


def test_reading_never_loads_imports_or_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN every way of loading a pickle or importing a module, made to fail
    data = built.crash_dump(4, "newest")
    path = written(tmp_path, data)

    def refused(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("a pickle was loaded or a module imported")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refused)
    monkeypatch.setattr("importlib.import_module", refused)
    # WHEN
    summary = summarize_crash_pickle(path)
    # THEN it is read all the same, and no module SGLang's classes name was imported
    assert summary.complete and summary.request_count == 5
    assert not any(name == "sglang" or name.startswith("sglang.") for name in sys.modules)


def test_no_module_of_the_package_names_a_loader() -> None:
    modules = [crashpickle_package] + [
        importlib.import_module(f"{crashpickle_package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(crashpickle_package.__path__)
    ]
    assert len(modules) > 1
    names: set[str] = set()
    for module in modules:
        tree = ast.parse(inspect.getsource(module))
        names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not names & {"load", "loads", "Unpickler", "find_class", "import_module", "__import__",
                        "eval", "exec"}  # fmt: skip


# --- damaged, truncated, foreign -----------------------------------------------------------


def test_a_dump_cut_after_its_requests_keeps_them_and_the_server(tmp_path: Path) -> None:
    data = built.crash_dump(4, "launch")
    summary = summary_of(tmp_path, data[: data.index(b"launch_command")])
    assert summary.stopped is not None and summary.stopped.startswith("truncated")
    assert summary.request_count == 5 and summary.finished_count == 3
    assert summary.server_args is not None and summary.server_args.tp_size == 2
    assert summary.launch_command is None


def test_a_dump_cut_inside_a_request_keeps_those_before(tmp_path: Path) -> None:
    data = built.crash_dump(4, "launch")
    cut = data.index(b"req-0003")
    summary = summary_of(tmp_path, data[:cut])
    assert summary.stopped is not None and summary.stopped.startswith("truncated")
    assert summary.request_count == 4  # the 4th one, cut short, is closed on what it had
    assert [r.rid for r in summary.requests[:3]] == ["req-0000", "req-0001", "req-0002-0"]
    assert summary.requests[3].rid is None
    assert summary.server_args is not None and summary.server_args.model_path is not None


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_every_truncation_is_summarized(tmp_path: Path, protocol: int) -> None:
    data = built.crash_dump(protocol, "newest")
    counts: list[int] = []
    for cut in range(0, len(data), max(1, len(data) // 60)):
        summary = summary_of(tmp_path, data[:cut])
        assert summary.stopped is not None and not summary.complete
        counts.append(summary.request_count or 0)
    assert counts == sorted(counts)  # the more is read, the more requests are kept
    assert counts[-1] == 5


def test_an_empty_file_says_so(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, b"")
    assert summary.layout is CrashPickleLayout.NOTHING
    assert summary.stopped == "truncated: the pickle ends at byte 0, before its STOP"
    assert summary.request_count is None and summary.protocol is None
    assert "the file is empty" in summary.notes


@pytest.mark.parametrize(
    "data",
    [b"hello world, this is a log file\n" * 40, b"\x7fELF\x02\x01\x01" + bytes(200),
     b"\x89PNG\r\n\x1a\n" + bytes(100), b'{"requests": []}\n'],
    ids=["text", "elf", "png", "json"],
)  # fmt: skip
def test_a_file_that_is_not_a_pickle_is_not_taken_for_a_dump(tmp_path: Path, data: bytes) -> None:
    summary = summary_of(tmp_path, data)
    assert summary.layout is not CrashPickleLayout.CRASH_DUMP
    assert summary.stopped is not None
    assert summary.request_count is None and summary.server_args is None
    assert any("no PROTO opcode" in note for note in summary.notes)


def test_a_memo_read_before_it_is_stored_is_damage(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, b"\x80\x04j\xff\xff\xff\x7f.")
    assert summary.stopped == "damaged at byte 7: memo entry 2147483647 read before it is stored"


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x04\x8d" + struct.pack("<Q", 1 << 60) + b"x",
        b"\x80\x04\x8e" + struct.pack("<Q", 1 << 62),
        b"\x80\x04\x96" + struct.pack("<Q", 1 << 40),
        b"\x80\x04X" + struct.pack("<I", 0xFFFFFFFF),
    ],
    ids=["unicode8", "bytes8", "bytearray8", "unicode4"],
)
def test_a_length_beyond_the_value_limit_is_refused_without_allocating_it(
    tmp_path: Path, data: bytes
) -> None:
    summary = summary_of(tmp_path, data)
    assert summary.stopped is not None and "one value may take" in summary.stopped


def test_a_file_past_the_read_limit_is_read_to_it(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, built.crash_dump(4), max_file_bytes=1000)
    assert summary.stopped is not None and summary.stopped.startswith("truncated: ")
    assert "only the first 1000 bytes were read" in summary.caps_hit


def test_a_large_file_is_streamed(tmp_path: Path) -> None:
    # Past 32 MiB the file is read through its descriptor, not whole: the same answers.
    summary = summary_of(tmp_path, built.crash_dump(4) + bytes(33 << 20))
    assert summary.complete and summary.request_count == 5 and summary.dump_time == NOW


@pytest.mark.parametrize("seed", range(4))
def test_random_bytes_never_raise(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        blob = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 600)))
        for data in (blob, b"\x80\x04" + blob):
            summary = summary_of(tmp_path, data)
            assert summary.opcodes_read >= 0


@given(st.data())
def test_mutated_dumps_never_raise(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    dump = bytearray(built.crash_dump(data.draw(st.sampled_from([0, 2, 4, 5]), label="protocol")))
    for _ in range(data.draw(st.integers(1, 8), label="mutations")):
        at = data.draw(st.integers(0, len(dump) - 1), label="at")
        dump[at : at + 1] = data.draw(st.binary(max_size=9), label="bytes")
    path = written(tmp_path_factory.mktemp("mutant"), bytes(dump))
    summary = summarize_crash_pickle(path, limits=QUICK)
    assert isinstance(crash_pickle_text(summary), str)


# --- bombs: bounded in time and memory ----------------------------------------------------


def test_a_deep_nesting_bomb_stops_at_the_time_limit(tmp_path: Path) -> None:
    # GIVEN a million lists each in the next (9 MB), with the default limits but the time
    data = built.nested_lists_deep(1_000_000)
    # WHEN
    started = time.monotonic()
    summary = summary_of(tmp_path, data, max_seconds=1.0)
    # THEN it stops within the time given, says why, and closes what it had read
    assert time.monotonic() - started < 6
    assert summary.stopped is not None
    assert summary.stopped.startswith(("time limit: 1 s", "value limit", "opcode limit"))
    assert summary.layout is not CrashPickleLayout.CRASH_DUMP
    assert summary.request_count in (None, 0)  # a list of lists, or the one being made


@pytest.mark.parametrize(
    ("bomb", "limit"),
    [(lambda: built.nested_lists_deep(200_000), "value limit: 50,000"),
     (lambda: built.nested_lists_wide(2_000), "opcode limit: 400,000"),
     (lambda: built.memo_huge(200_000), "memo limit: 50,000")],
    ids=["deep", "wide", "memo"],
)  # fmt: skip
def test_bombs_stop_at_a_limit_in_bounded_memory(
    tmp_path: Path, bomb: Callable[[], bytes], limit: str
) -> None:
    path = written(tmp_path, bomb())
    limits = CrashPickleLimits(
        max_seconds=30, max_opcodes=400_000, max_values=50_000, max_memo=50_000
    )
    tracemalloc.start()
    try:
        summary = summarize_crash_pickle(path, limits=limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary.stopped is not None and summary.stopped.startswith(limit)
    assert peak < 40 << 20


def test_a_wide_list_is_counted_and_kept_in_part(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, built.nested_lists_wide(100))
    assert summary.complete
    assert summary.layout is CrashPickleLayout.OTHER  # a list of Nones holds no request
    assert any("kept in part" in cap for cap in summary.caps_hit)


def test_open_marks_past_the_depth_limit_stop_the_reading(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, built.marks_deep(200_000), max_depth=10_000)
    assert summary.stopped == "depth limit: 10,000 open marks (at byte 10,003)"


def test_a_stack_past_the_depth_limit_stops_the_reading(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, b"\x80\x04" + b"N" * 20_000 + b".", max_depth=10_000)
    assert summary.stopped == "depth limit: a stack of 10,000 values (at byte 10,003)"


def test_a_huge_memo_index_is_only_a_key(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, built.memo_huge(10))
    assert summary.complete and summary.layout is CrashPickleLayout.REQUEST_LIST
    assert summary.request_count == 0


def test_exponential_sharing_costs_what_the_file_holds(tmp_path: Path) -> None:
    # 200 lists, each holding the previous twice: 2**200 leaves if walked, 200 lists read.
    summary = summary_of(tmp_path, built.exponential_sharing(200))
    assert summary.complete
    text = crash_pickle_text(summary)
    assert len(text.splitlines()) < 30


# --- names that are not regular files ------------------------------------------------------


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "crash_dump.pkl"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(UnreadableFile, match="not a regular file \\(a FIFO\\)"):
        summarize_crash_pickle(fifo)
    assert time.monotonic() - started < 2


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile, match="not a regular file \\(a folder\\)"):
        summarize_crash_pickle(tmp_path)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile, match="No such file"):
        summarize_crash_pickle(tmp_path / "absent.pkl")
