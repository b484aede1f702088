"""A signature's history across scans of the same roots: first and last seen, dumps per day,
new since the previous scan, regressed after a quiet period, totals beside --since's window.

The dumps are written by the fixture builder (bench/fleet.py), their times in their names.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fleet.signature import load_rules
from postmortem.report.render import render
from postmortem.scan.outputs.index import build_index
from postmortem.scan.run import ScanOptions, ScanResult, run_scan
from postmortem.scan.store.history import QUIET_DAYS
from postmortem.scan.work.worker import WorkOptions

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from fleet import FleetDump, write_dump  # noqa: E402

SCHEMA = json.loads((ROOT / "postmortem" / "scan" / "scan-line.schema.json").read_text())
DAY = 86400
T0 = 1_763_000_000


def _scan(folder: Path, cache: Path, since: float | None = None) -> ScanResult:
    work = WorkOptions(AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False),
                       load_rules())  # fmt: skip
    return run_scan([folder], ScanOptions(work, jobs=1, cache_path=cache, since=since))


def _add(folder: Path, cubin: str, day: float, pid: int) -> None:
    folder.mkdir(exist_ok=True)
    write_dump(folder, FleetDump(cubin, time=int(T0 + day * DAY), pid=pid))


def _by_kernel(result: ScanResult) -> dict[str, object]:
    return {g.signature.kernel: g for g in result.groups}


def test_a_signature_is_new_once_since_the_previous_scan_of_the_same_roots(tmp_path):
    dumps, cache = tmp_path / "dumps", tmp_path / "cache.sqlite"
    _add(dumps, "oob_store", 0, 1)
    _add(dumps, "misaligned_load", 0, 2)
    # GIVEN a first scan of the roots: nothing is new, there is nothing to compare with
    first = _scan(dumps, cache)
    assert first.history is not None and first.history.number == 1
    assert not any(g.history.new for g in first.groups)
    # WHEN a dump of another signature arrives and the roots are scanned again
    _add(dumps, "device_assert", 1, 3)
    second = _scan(dumps, cache)
    # THEN only that signature is new
    groups = _by_kernel(second)
    assert groups["assert_kernel"].history.new
    assert not groups["oob_kernel"].history.new
    assert second.history.number == 2 and second.history.previous_ns is not None
    # and at the scan after, nothing is new any more
    assert not any(g.history.new for g in _scan(dumps, cache).groups)


def test_a_signature_back_after_a_quiet_period_has_regressed(tmp_path):
    dumps, cache = tmp_path / "dumps", tmp_path / "cache.sqlite"
    _add(dumps, "oob_store", 0, 1)
    _add(dumps, "oob_store", 1, 2)
    _add(dumps, "misaligned_load", 1, 3)
    _scan(dumps, cache)
    # WHEN oob_store's fault comes back three weeks later, misaligned_load's the next day
    _add(dumps, "oob_store", 22, 4)
    _add(dumps, "misaligned_load", 2, 5)
    groups = _by_kernel(_scan(dumps, cache))
    # THEN the first has regressed after its quiet days, the second has not
    oob = groups["oob_kernel"].history
    assert oob.regressed and oob.quiet_days == 21 >= QUIET_DAYS
    assert not groups["misaligned_kernel"].history.regressed
    assert oob.days == (("2025-11-13", 1), ("2025-11-14", 1), ("2025-12-05", 1))
    assert oob.total == 3


def test_scanning_the_same_dumps_again_counts_nothing_twice(tmp_path):
    dumps, cache = tmp_path / "dumps", tmp_path / "cache.sqlite"
    for pid in range(3):
        _add(dumps, "oob_store", 0, pid)
    for _ in range(3):
        result = _scan(dumps, cache)
    (group,) = result.groups
    assert group.history.total == 3 and group.history.days == (("2025-11-13", 3),)
    # and a dump deleted since is not forgotten
    next(dumps.iterdir()).unlink()
    (group,) = _scan(dumps, cache).groups
    assert group.count == 2 and group.history.total == 3


def test_since_counts_the_window_and_the_history_holds_the_totals(tmp_path):
    dumps, cache = tmp_path / "dumps", tmp_path / "cache.sqlite"
    for day in (0, 1, 2, 10, 11):
        _add(dumps, "oob_store", day, day)
    _scan(dumps, cache)
    # WHEN the same roots are scanned for the last week only
    (group,) = _scan(dumps, cache, since=T0 + 9 * DAY).groups
    # THEN the group counts the window, and its history every dump
    assert group.count == 2
    assert group.history.total == 5
    assert group.history.first_seen == T0
    text = render("scan", build_index(_scan(dumps, cache, since=T0 + 9 * DAY)), "text")
    assert "2 dumps" in text and "history: 5 dumps on 5 days" in text


def test_history_reaches_the_json_lines_and_every_format(tmp_path):
    dumps, cache = tmp_path / "dumps", tmp_path / "cache.sqlite"
    _add(dumps, "oob_store", 0, 1)
    _scan(dumps, cache)
    _add(dumps, "misaligned_load", 0, 2)
    _add(dumps, "oob_store", 30, 3)
    index = build_index(_scan(dumps, cache))
    validator = jsonschema.Draft202012Validator(SCHEMA)
    lines = [json.loads(line) for line in render("scan", index, "json").splitlines()]
    for line in lines:
        validator.validate(line)
    groups = {g["signature"]["kernel"]: g for g in lines if g["type"] == "group"}
    assert groups["misaligned_kernel"]["history"]["new"] is True
    assert groups["oob_kernel"]["history"]["regressed"] is True
    assert "history" not in lines[0]  # the scan line stays the same at every re-scan
    assert index["history"]["scan"] == 2
    assert "NEW" in render("scan", index, "text") and "REGRESSED" in render("scan", index, "text")
    for fmt in ("md", "html"):
        text = render("scan", index, fmt)
        assert "new" in text and "regressed: back after 30 quiet days" in text, fmt


def test_without_a_cache_there_is_no_history(tmp_path):
    _add(tmp_path / "dumps", "oob_store", 0, 1)
    work = WorkOptions(AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False),
                       load_rules())  # fmt: skip
    result = run_scan([tmp_path / "dumps"], ScanOptions(work, jobs=1, cache_path=None))
    assert result.history is None and result.groups[0].history is None
