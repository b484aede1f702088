"""A pickle given as a host log: recognized by its first bytes (or SGLang's name for it), read
as a pickle and never as lines nor loaded, joined beside the dump (analysis/host/crashpickle.py)
and projected into the report's host section."""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
from pathlib import Path

import jsonschema
import pytest

from postmortem.analysis.host.join import join_host
from postmortem.findings import FindingCode, Severity
from postmortem.host.crashpickle import CrashPickleLayout
from postmortem.host.model import HostLogKind
from postmortem.host.reader import is_pickle_start, read_host_log
from postmortem.report.host import host_json
from tests.conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "builder"))
import crash_pickles as built  # type: ignore[import-not-found]  # noqa: E402

NOW = built.NOW
HOST_SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "postmortem/report/report.schema.json").read_text()
)["properties"]["host"]


def written(tmp_path: Path, data: bytes, name: str = built.NAME) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def joined(tmp_path: Path, data: bytes, name: str = built.NAME, **where):
    host = read_host_log(written(tmp_path, data, name))
    dump = where.pop("dump", Path("core.nvcudmp"))
    return join_host([host], (), (), dump, **where)


# --- Recognized by content ----------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_protocols_2_to_5_are_pickles_whatever_the_name(tmp_path, protocol):
    host = read_host_log(written(tmp_path, built.crash_dump(protocol), "server.log"))
    assert host.crash_pickle is not None and host.crash_pickle.protocol == protocol
    assert host.kinds == (HostLogKind.SGLANG_CRASH_DUMP,)
    assert (host.lines, host.read_from, host.size_bytes) == (0, 0, host.crash_pickle.size_bytes)


@pytest.mark.parametrize("protocol", [0, 1])
def test_protocols_0_and_1_are_pickles_by_sglang_name_only(tmp_path, protocol):
    data = built.crash_dump(protocol)
    named = read_host_log(written(tmp_path, data, f"host1-{built.NAME}"))
    assert named.crash_pickle is not None and named.crash_pickle.request_count == 5
    other = read_host_log(written(tmp_path, data, "requests.bin"))
    assert other.crash_pickle is None and other.lines > 0


@pytest.mark.parametrize(
    ("start", "name", "pickled"),
    [
        (b"\x80\x04", "x.log", True),
        (b"\x80\x06", "x.log", False),  # no such protocol yet
        (b"\x80\x06", "crash_dump_2025-06-04_20-13-18.pkl", True),  # SGLang's name
        (b"\x80\x01", "x.log", False),
        (b"\x80", "x.log", False),
        (b"", "x.log", False),
        (b"", "crash_dump_2025-06-04_20-13-18.pkl", True),
        (b"(d", "crash_dump_2025-06-04_20-13-18.pkl", True),
        (b"(d", "crash_dump_2025-06-04_20-13-18.pkl.txt", False),
        (b"NV", "server.log", False),
    ],
)
def test_what_is_read_as_a_pickle(start, name, pickled):
    assert is_pickle_start(start, name) is pickled


def test_a_pipe_is_read_as_text_even_when_it_carries_a_pickle(tmp_path):
    # GIVEN a named pipe, named as SGLang names its dumps, that a writer fills with one
    fifo = tmp_path / built.NAME
    os.mkfifo(fifo)
    data = built.crash_dump(4)

    def write() -> None:
        with fifo.open("wb") as writer:
            writer.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    # WHEN it is read
    host = read_host_log(fifo)
    writer.join(timeout=10)
    # THEN it was streamed whole as text (its first bytes cannot be put back)
    assert host.crash_pickle is None and host.size_bytes == len(data)


# --- Joined beside the dump ---------------------------------------------------------------


def test_the_requests_in_flight_are_one_finding_oldest_first(tmp_path):
    join = joined(tmp_path, built.crash_dump(4, in_flight=3))
    (pickled,) = join.crash_pickles
    assert [r.rid for r in pickled.in_flight] == ["req-0005", "req-0004", "req-0003"]
    assert (pickled.oldest_age_s, pickled.apart_s, join.checks) == (80.0, None, ())
    (finding,) = join.findings
    assert finding.code is FindingCode.SGLANG_REQUESTS_IN_FLIGHT
    assert finding.severity is Severity.INFO
    assert finding.message.startswith("SGLang's scheduler had 3 requests in flight, the oldest")


def test_a_dump_with_nothing_in_flight_says_so(tmp_path):
    join = joined(tmp_path, built.crash_dump(4, in_flight=0))
    (finding,) = join.findings
    assert finding.message.startswith(
        "SGLang's crash dump records no request in flight (3 requests, 3 finished)"
    )


def test_without_server_arguments_the_finding_says_so(tmp_path):
    join = joined(tmp_path, built.crash_dump(4, server_args=False))
    (finding,) = join.findings
    assert finding.evidence[0].endswith("server: no server arguments in the pickle")
    assert "(the launch command the pickle records)" in (finding.remedy or "")


def test_a_pickle_that_is_not_sglang_is_said_not_recognized(tmp_path):
    join = joined(tmp_path, pickle.dumps({"weights": [1, 2, 3]}, protocol=4), "model.pkl")
    (pickled,) = join.crash_pickles
    assert pickled.summary.layout is CrashPickleLayout.OTHER and not pickled.sglang
    (finding,) = join.findings
    assert finding.code is FindingCode.HOST_LOG_NOT_RECOGNIZED
    assert finding.message.endswith(
        "a pickle, read without loading it, but not an SGLang crash dump"
    )
    assert finding.evidence == ("not an SGLang crash dump: the pickle holds a dict",)


def test_a_pickle_naming_a_code_runner_is_a_warning_and_nothing_else(tmp_path):
    marker = tmp_path / "pwned"
    join = joined(
        tmp_path, built.code_running("eval", marker, 4), dump=Path(f"core.cuda.{int(NOW)}.1")
    )
    assert not marker.exists()
    (finding,) = join.findings
    assert (finding.code, finding.severity) == (
        FindingCode.CRASH_PICKLE_RUNS_CODE,
        Severity.WARNING,
    )
    assert "builtins.eval" in finding.message
    assert join.checks == ()  # its times are not SGLang's: nothing is compared
    assert join.files[0].kinds == ()


@pytest.mark.parametrize(
    ("where", "source", "agrees"),
    [
        ({"dump": Path(f"core.cuda.{int(NOW) - 30}.77")}, "the dump's file name", True),
        ({"dump_time": int(NOW) - 30}, "the dump's metadata", True),
        # the metadata is preferred to the name
        (
            {"dump": Path(f"core.cuda.{int(NOW)}.77"), "dump_time": int(NOW) - 7200},
            "metadata",
            False,
        ),
    ],
)
def test_the_pickle_time_is_compared_with_the_dump_time(tmp_path, where, source, agrees):
    join = joined(tmp_path, built.crash_dump(4), **where)
    (check,) = join.checks
    assert check.fact == "time" and check.agrees is agrees
    assert source in (check.dump or "")
    assert check.host == "2025-06-04 20:13:18 UTC (the latest time its requests record)"


def test_the_host_section_validates_with_every_pickle(tmp_path):
    marker = tmp_path / "pwned"
    logs = [
        written(tmp_path, built.crash_dump(5, "newest"), f"a-{built.NAME}"),
        written(tmp_path, built.crash_dump(0, "oldest"), f"b-{built.NAME}"),
        written(tmp_path, built.code_running("system", marker, 2), f"c-{built.NAME}"),
        written(tmp_path, built.crash_dump(4)[:900], f"d-{built.NAME}"),
        written(tmp_path, b"", f"e-{built.NAME}"),
    ]
    join = join_host([read_host_log(p) for p in logs], (), (), Path(f"core.cuda.{int(NOW)}.1"))
    data = json.loads(json.dumps(host_json(join)))
    jsonschema.Draft202012Validator(HOST_SCHEMA).validate(data)
    assert [p["layout"] for p in data["crash_pickles"]] == [
        "crash-dump", "crash-dump", "crash-dump", "crash-dump", "nothing",
    ]  # fmt: skip
    assert [p["complete"] for p in data["crash_pickles"]] == [True, True, True, False, False]
    assert not marker.exists()
