"""Dump name patterns expanded, the driver's progress line read, dumps found by either."""

from __future__ import annotations

import os
import time

import pytest

from postmortem.capture.dumps import (
    expand,
    matching_files,
    named_files,
    unique,
    wait_for_dump,
)
from postmortem.errors import TriggerTimedOut
from postmortem.host.driver import written_path


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # vLLM's post of 2025-08-11 (a timestamp first; its folder renamed)
        (
            "[00:40:46.806153] coredump: Writing ELF file to "
            "/dumps/cuda_coredump_xxx.1799919.1754898045",
            "/dumps/cuda_coredump_xxx.1799919.1754898045",
        ),
        # cuda-gdb's manual (no timestamp, a relative name)
        (
            "coredump: Writing ELF file to core_TIME_HOSTNAME_PID.nvcudmp",
            "core_TIME_HOSTNAME_PID.nvcudmp",
        ),
        ("coredump: Writing ELF file to /a b/core.nvcudmp\r", "/a b/core.nvcudmp"),
        ("[01:39:15.256350] coredump: Writing out global memory (0 bytes)", None),
        ("coredump: Writing ELF file to ", None),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", None),
    ],
)
def test_the_driver_s_line_names_the_dump(line, expected):
    assert written_path(line) == expected


def test_a_long_line_of_spaces_is_read_whole():
    # GIVEN the longest line capture reads whole, mostly whitespace after the marker (the
    # line a lazy regular expression took 14 s over; it is now read in one pass)
    line = "coredump: Writing ELF file to x" + " \t" * 32_000 + "y "
    # WHEN it is read THEN the path is all of it but the trailing space
    assert written_path(line) == "x" + " \t" * 32_000 + "y"


@pytest.mark.parametrize(
    ("pattern", "pid", "expected"),
    [
        ("/d/core_%h.%p.%t.nvcudmp", 42, "/d/core_node[[]1].42.*.nvcudmp"),
        ("/d/%h/core.cuda.%t.%p", None, "/d/node[[]1]/core.cuda.*.*"),
        ("/d/100%%_%p", 7, "/d/100%_7"),
        ("/d/core.%x.%p", 7, "/d/core.%x.7"),
    ],
)
def test_a_pattern_becomes_a_glob(pattern, pid, expected):
    assert expand(pattern, host="node[1]", pid=pid) == expected


def test_the_pattern_finds_only_the_process_s_dumps_and_takes_t_as_digits(tmp_path):
    # GIVEN dumps of two processes, a stray name, and an older dump of the same process
    for name in ("core_h.42.1754898045.nvcudmp", "core_h.43.1754898045.nvcudmp",
                 "core_h.42.notatime.nvcudmp", "core_h.42.1700000000.nvcudmp"):  # fmt: skip
        (tmp_path / name).write_bytes(b"x")
    old = tmp_path / "core_h.42.1700000000.nvcudmp"
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    # WHEN the dumps of process 42 since a minute ago are looked for, relative to tmp_path
    found = matching_files(
        "core_%h.%p.%t.nvcudmp", host="h", pid=42, base=tmp_path, since=time.time() - 60
    )
    # THEN only its new one is found
    assert found == [tmp_path / "core_h.42.1754898045.nvcudmp"]


def test_printed_names_count_only_when_they_are_files(tmp_path):
    (tmp_path / "a.nvcudmp").write_bytes(b"x")
    (tmp_path / "folder").mkdir()
    named = named_files(["a.nvcudmp", str(tmp_path / "folder"), "/no/such", "x\0y"], tmp_path)
    assert named == [tmp_path / "a.nvcudmp"]
    assert unique([tmp_path / "a.nvcudmp", tmp_path / "." / "a.nvcudmp"]) == [
        tmp_path / "a.nvcudmp"
    ]


def test_waiting_returns_the_newest_dump_once_it_stops_growing(tmp_path):
    (tmp_path / "core.1.nvcudmp").write_bytes(b"old")
    os.utime(tmp_path / "core.1.nvcudmp", (1, 1))
    (tmp_path / "core.2.nvcudmp").write_bytes(b"new dump")
    seen = []
    found = wait_for_dump(
        [str(tmp_path / "core.*.nvcudmp")], since=time.time() - 5, timeout=5, settle=0.2,
        interval=0.05, progress=lambda path, size: seen.append((path, size)),
    )  # fmt: skip
    assert found == tmp_path / "core.2.nvcudmp"
    assert seen and seen[-1] == (found, 8)


def test_waiting_for_a_dump_that_never_comes_times_out(tmp_path):
    started = time.monotonic()
    with pytest.raises(TriggerTimedOut, match="no dump was written"):
        wait_for_dump([str(tmp_path / "*.nvcudmp")], since=0, timeout=0.3, interval=0.05)
    assert time.monotonic() - started < 3
