"""A dump's crash-triage event, as data: fingerprint, tags, frames, the report cut to the limit;
and the choice of a scan's engine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from postmortem.analysis.fleet.signature import Frame, Quality, Signature
from postmortem.errors import BadOption
from postmortem.scan.engines.choose import ENGINES, EngineChoice, check_engine
from postmortem.scan.events.triage import cut_report, triage_event
from postmortem.scan.row import (
    DumpRow,
    Triage,
    dump_id,
    row_from_dict,
    row_to_dict,
    verdict_context,
)

LONG_KERNEL = "cutlass::Kernel<" + "cute::tuple<int, int>, " * 20 + ">"


def _signature(kernel: str = "oob_kernel") -> Signature:
    return Signature(
        version=2, rules="default@0", id="f5f36df5af66",
        key=f"v2|Warp Illegal Address|{kernel}|+0xd0|pm::store<>|a.cuh:10 < b.cu:19",
        coarse_id="42e0d2b53e12", coarse_key=f"v2|Warp Illegal Address|{kernel}",
        exception="Warp Illegal Address", kernel=kernel, offset=0xD0, function="pm::store<>",
        frames=("a.cuh:10", "b.cu:19"),
        all_frames=(Frame("a.cuh", 10, False), Frame("b.cu", 19, False), Frame("c.cu", 26, True)),
        skipped=0, components=("exception", "kernel", "offset", "function", "frames"),
        quality=Quality(3, True, True, True, None),
    )  # fmt: skip


def _row(path: str = "dumps/core.nvcudmp", **changes: object) -> DumpRow:
    row = DumpRow(
        path=path, size_bytes=100, mtime=1.0, status="ok", error=None, time=1767225600.0,
        time_source="metadata", host="gpu-node-7", pid=42, driver_version="565.57",
        devices=("NVIDIA H100", "NVIDIA H100"), exception=14, kernel="oob_kernel(float*)",
        fault_sites=1, signature=_signature(), fingerprint="ab" * 16,
    )  # fmt: skip
    return replace(row, **changes)


TRIAGE = Triage({"headline": "Warp Illegal Address in oob_kernel", "kind": "fault"}, "# report\n")


def test_the_event_is_fingerprinted_by_the_signature_key_with_the_facets_as_tags():
    made = triage_event(_row(), TRIAGE)
    event = made.event
    assert event["fingerprint"] == [_signature().key]
    assert event["tags"] == {
        "exception": "Warp Illegal Address", "kernel": "oob_kernel", "driver": "565.57",
        "gpu": "NVIDIA H100", "host": "gpu-node-7", "quality": "3/3",
        "signature": "f5f36df5af66", "grouping": "v2",
    }  # fmt: skip
    assert event["server_name"] == "gpu-node-7"
    assert event["timestamp"] == "2026-01-01T00:00:00+00:00"
    assert event["contexts"]["verdict"] == TRIAGE.verdict
    assert event["exception"]["values"][0]["value"] == TRIAGE.verdict["headline"]
    assert made.attachment == b"# report\n" and made.attachment_name == "core.nvcudmp.md"


def test_frames_go_outermost_first_with_library_frames_not_in_app():
    frames = triage_event(_row(), TRIAGE).event["exception"]["values"][0]["stacktrace"]["frames"]
    assert [(f["filename"], f["lineno"], f["in_app"]) for f in frames] == [
        ("c.cu", 26, False), ("b.cu", 19, True), ("a.cuh", 10, True),
    ]  # fmt: skip


def test_tags_keep_sentrys_limits_and_unknown_facets_are_left_out():
    row = _row(host=None, driver_version=None, signature=_signature(LONG_KERNEL + "\n"))
    tags = triage_event(row, TRIAGE).event["tags"]
    assert "host" not in tags and "driver" not in tags
    assert len(tags["kernel"]) == 200 and tags["kernel"].endswith("…")
    assert "\n" not in tags["kernel"]


def test_the_event_id_is_stable_and_changes_with_the_dump_or_its_signature():
    first = triage_event(_row(), TRIAGE).event_id
    assert first == triage_event(_row(), TRIAGE).event_id
    assert len(first) == 32 and int(first, 16) >= 0
    assert first != triage_event(_row(fingerprint="cd" * 16), TRIAGE).event_id
    assert first != triage_event(_row(path="other/core.nvcudmp"), TRIAGE).event_id
    assert first != triage_event(_row(signature=_signature("k2")), TRIAGE).event_id


def test_the_dump_id_is_the_same_however_its_folder_is_spelled(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert dump_id(_row("dumps/core.nvcudmp")) == dump_id(_row(f"{tmp_path}/dumps/core.nvcudmp"))
    assert dump_id(_row(fingerprint=None)) != dump_id(_row())


@pytest.mark.parametrize("limit", [60, 200, 201, 202, 203, 5000])
def test_a_report_over_the_limit_is_cut_on_a_character_boundary_with_a_note(limit):
    report = "# report\n" + "é€" * 1000
    cut = cut_report(report, limit)
    assert len(cut) <= limit
    text = cut.decode("utf-8")  # never half a character
    assert text.endswith("writes it whole.*\n") or limit < 120
    assert report.startswith(text.split("\n\n*Cut to fit")[0])
    assert cut_report("# short\n", 60) == b"# short\n"


def test_triage_facts_are_never_cached():
    row = _row(triage=TRIAGE)
    assert row_to_dict(row)["triage"] is None
    assert row_from_dict(row_to_dict(row)) == _row()


def test_the_verdict_context_names_the_first_fault_site():
    report = {
        "verdict": {"kind": "fault", "headline": "Warp Illegal Address in k", "sites": 1},
        "sites": [{"location": "k+0xd0", "error_pc_hex": "0x7f00d0",
                   "instruction": {"text": "STG.E [R2.64], R7"},
                   "faults": [{"sm": 3, "lane": 3}, {"sm": 3, "lane": 4}]}],
    }  # fmt: skip
    assert verdict_context(report) == {
        "headline": "Warp Illegal Address in k", "kind": "fault", "fault_sites": 1,
        "location": "k+0xd0", "error_pc": "0x7f00d0", "instruction": "STG.E [R2.64], R7",
        "first_fault": {"sm": 3, "lane": 3},
    }  # fmt: skip
    assert verdict_context({"verdict": {"kind": "hang", "headline": "h"}, "sites": []}) == {
        "headline": "h", "kind": "hang",
    }  # fmt: skip


def test_an_engine_is_checked_before_the_scan():
    check_engine(EngineChoice())
    with pytest.raises(BadOption, match="not one of local, dask, ray"):
        check_engine(EngineChoice("spark"))
    with pytest.raises(BadOption, match="--scheduler"):
        check_engine(EngineChoice("dask"))
    with pytest.raises(BadOption, match="is for --engine dask"):
        check_engine(EngineChoice("local", "tcp://127.0.0.1:8786"))


def test_the_command_line_offers_every_engine():
    from postmortem.cli import scan

    (option,) = [p for p in scan.params if p.name == "engine"]
    assert tuple(option.type.choices) == ENGINES  # type: ignore[attr-defined]
