"""The scan's worker pool when workers die: every dump still gets a row, none is lost."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import postmortem.scan.pool as pool_module
from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.signature import load_rules
from postmortem.scan.pool import WorkerPool
from postmortem.scan.row import STATUS_ERROR, DumpRow, error_row
from postmortem.scan.worker import WorkOptions


def _fake_scan(path: Path, _options: WorkOptions) -> DumpRow:
    if path.name.startswith("crash"):
        os.kill(os.getpid(), signal.SIGKILL)
    return error_row(str(path), 0, 0.0, STATUS_ERROR, "fake")


def test_a_worker_dying_with_a_dump_queued_loses_no_row(monkeypatch):
    # GIVEN workers (forked, so they run the fake) that die on every "crash" dump, and a
    # parent slow to take each row, so the next dump is already queued when one dies
    monkeypatch.setattr(pool_module, "scan_dump", _fake_scan)
    paths = [Path(f"{'crash' if i % 3 == 1 else 'ok'}{i}.nvcudmp") for i in range(12)]
    options = WorkOptions(AnalyzeOptions(), load_rules())
    rows: list[DumpRow] = []

    def slow(row: DumpRow) -> None:
        time.sleep(0.05)
        rows.append(row)

    # WHEN they are scanned
    WorkerPool(2, options, timeout_s=30, memo=False).run(paths, slow)
    # THEN every dump has exactly one row: the crashes say so, the others are scanned
    assert sorted(row.path for row in rows) == sorted(str(p) for p in paths)
    for row in rows:
        expected = "crashed" if Path(row.path).name.startswith("crash") else STATUS_ERROR
        assert row.status == expected, row
