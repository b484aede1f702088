"""The files beside each dump of a scan, and the engine's trigger line in the logs there:
each folder read once, a few logs of it, within a byte budget for the whole scan, and what
was left unsearched said in one warning."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from postmortem.model import TimeSource
from postmortem.scan.discover.beside import (
    LOG_BUDGET_BYTES,
    LOG_TAIL_BYTES,
    LOGS_PER_FOLDER,
    with_neighbours,
)
from postmortem.scan.row import DumpRow, RowStatus

TRIGGER = b"[2026-11-27 03:00:00] Triggered CUDA user coredump for PID %d via /run/corepipe\n"


def _row(path, pid, exception=None, status=RowStatus.OK):
    return DumpRow(
        str(path), 1, 0.0, status, None, 0.0, TimeSource.MTIME, None, pid, None, (),
        exception, None, 0, None,
    )  # fmt: skip


def _dump(folder, pid):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"core.cuda.1795737000.{pid}"
    path.write_bytes(b"\x7fELF")
    return path


def _log(path, body, mtime_s, size=None):
    # `size`: a sparse log of that many bytes, `body` at its end.
    with open(path, "wb") as stream:
        if size is not None:
            stream.truncate(size - len(body))
            stream.seek(size - len(body))
        stream.write(body)
    os.utime(path, (mtime_s, mtime_s))


def test_300_logs_beside_one_dump_search_the_newest_and_say_what_was_left(tmp_path):
    # GIVEN one dump and 300 logs of a MiB beside it; the trigger line in the newest and in
    # the oldest (another process)
    dump = _dump(tmp_path, 4242)
    for n in range(300):
        body = TRIGGER % (4242 if n == 299 else 5151 if n == 0 else 1)
        _log(tmp_path / f"worker-{n:03}.log", b"INFO up\n" + body, 1_000_000 + n, size=1 << 20)
    # WHEN the rows get their neighbours
    (row,), warnings = with_neighbours([_row(dump, 4242)])
    # THEN the newest logs were searched and the trigger line found with its line number
    assert row.engine_trigger == "worker-299.log:2"
    assert (row.beside[0], len(row.beside), row.beside_more) == ("worker-000.log", 16, 284)
    # AND the logs left unsearched are one warning, the first of them named
    left = 300 - LOGS_PER_FOLDER
    assert warnings == (
        f"{left} log(s) beside the dumps not searched for the engine's trigger line "
        f"({left} past the newest {LOGS_PER_FOLDER} of a folder; first: "
        f"{tmp_path / f'worker-{left - 1:03}.log'})",
    )


def test_the_scan_reads_logs_up_to_its_budget_across_folders(tmp_path):
    # GIVEN more folders of full logs than the budget covers, a trigger line in each log
    folders = LOG_BUDGET_BYTES // (LOGS_PER_FOLDER * LOG_TAIL_BYTES) + 1
    rows = []
    for n in range(folders):
        dump = _dump(tmp_path / f"node-{n}", 100 + n)
        rows.append(_row(dump, 100 + n))
        for k in range(LOGS_PER_FOLDER):
            body = TRIGGER % (100 + n)
            _log(dump.parent / f"{k}.log", body, 1_000_000 + k, size=LOG_TAIL_BYTES)
    # WHEN the rows get their neighbours (given in another order than their folders')
    found, warnings = with_neighbours(rows[::-1])
    # THEN the folders in name order were searched while the budget lasted, the last not
    triggers = {row.path: row.engine_trigger for row in found}
    assert [triggers[str(row.path)] for row in rows] == [f"{LOGS_PER_FOLDER - 1}.log:1"] * (
        folders - 1
    ) + [None]
    last = tmp_path / f"node-{folders - 1}"
    assert warnings == (
        f"{LOGS_PER_FOLDER} log(s) beside the dumps not searched for the engine's trigger "
        f"line ({LOGS_PER_FOLDER} past the {LOG_BUDGET_BYTES >> 20} MiB a scan reads; first: "
        f"{last / f'{LOGS_PER_FOLDER - 1}.log'})",
    )


def test_a_folder_is_read_once_for_all_its_dumps(tmp_path):
    _log(tmp_path / "server.log", TRIGGER % 1 + TRIGGER % 3, 1_000_000)
    rows, warnings = with_neighbours([_row(_dump(tmp_path, pid), pid) for pid in (1, 2, 3)])
    assert [r.engine_trigger for r in rows] == ["server.log:1", None, "server.log:2"]
    assert all(r.beside == ("server.log",) for r in rows) and warnings == ()


def test_a_trigger_line_means_a_hang_only_beside_a_dump_that_holds_no_exception(tmp_path):
    # GIVEN the engine's trigger line for each of three dumps: one that holds no exception,
    # one that holds a fault, one that could not be read
    dumps = [_dump(tmp_path, pid) for pid in (1, 2, 3)]
    _log(tmp_path / "server.log", TRIGGER % 1 + TRIGGER % 2 + TRIGGER % 3, 1_000_000)
    hang = _row(dumps[0], 1)
    fault = _row(dumps[1], 2, exception=14)
    unread = replace(_row(dumps[2], 3), status=RowStatus.ERROR, error="truncated")
    # WHEN the rows get their neighbours
    rows, _ = with_neighbours([hang, fault, unread])
    # THEN only the first is a hang the engine saw
    assert [r.engine_trigger for r in rows] == ["server.log:1", None, None]


def test_an_unreadable_log_is_said_not_searched(tmp_path):
    dump = _dump(tmp_path, 7)
    log = tmp_path / "server.log"
    _log(log, TRIGGER % 7, 1_000_000)
    log.chmod(0)
    try:
        if os.access(log, os.R_OK):
            pytest.skip("every file is readable to this user (root)")
        (row,), warnings = with_neighbours([_row(dump, 7)])
    finally:
        log.chmod(0o644)
    assert row.engine_trigger is None
    assert warnings == (
        "1 log(s) beside the dumps not searched for the engine's trigger line "
        f"(1 unreadable; first: {log})",
    )
