"""Host, pid and time from dump file names; --since values."""

from __future__ import annotations

import pytest

from postmortem.dumpnames import NameFacts, compile_pattern, parse_name
from postmortem.scan.since import parse_since


@pytest.mark.parametrize(
    ("name", "host", "pid", "time"),
    [
        # the driver's default name, core_%t_%h_%p.nvcudmp
        ("core_1763800000_gpu-node-7_4242.nvcudmp", "gpu-node-7", 4242, 1763800000),
        ("core_1763800000_gpu_node_7_4242.nvcudmp.gz", "gpu_node_7", 4242, 1763800000),
        # core.cuda.%h.%p, the driver API manual's default: no time
        ("core.cuda.gpu-3.rack2.5150", "gpu-3.rack2", 5150, None),
        # %h.%p.%t, with a host name that has dots of its own
        ("gpu-3.rack2.example.com.1234.1763800100", "gpu-3.rack2.example.com", 1234, 1763800100),
        ("gpu-3.1234.1763800100.nvcudmp", "gpu-3", 1234, 1763800100),
        ("node9_77_1763800200", "node9", 77, 1763800200),
    ],
)
def test_known_patterns_give_host_pid_time(name, host, pid, time):
    facts = parse_name(name)
    assert (facts.host, facts.pid, facts.time) == (host, pid, time)
    assert facts.pattern is not None


@pytest.mark.parametrize("name", ["oob_store.nvcudmp", "core.1234", "a.b.c", "core_12_h_3.nvcudmp"])
def test_other_names_give_nothing(name):
    assert parse_name(name) == NameFacts(None, None, None, None)


def test_user_pattern_is_tried_first():
    patterns = ("dumps/gpu-%p-on-%h@%t.core",)
    facts = parse_name("gpu-99-on-host.a@1763800000.core", patterns)
    assert facts == NameFacts("host.a", 99, 1763800000, patterns[0])


def test_pattern_with_unknown_specifier_is_refused():
    with pytest.raises(ValueError, match="%e"):
        compile_pattern("core.%e.%p")
    assert compile_pattern("100%%_%p").fullmatch("100%_5")


def test_since_accepts_dates_times_and_ages():
    now = 1_800_000_000.0
    assert parse_since("2026-11-20", now) == 1795132800.0
    assert parse_since("2026-11-20T08:00Z", now) == 1795132800.0 + 8 * 3600
    assert parse_since("2026-11-20T08:00+02:00", now) == 1795132800.0 + 6 * 3600
    assert parse_since("36h", now) == now - 36 * 3600
    assert parse_since("7d", now) == now - 7 * 86400
    with pytest.raises(ValueError, match="not a date"):
        parse_since("yesterday", now)
