"""A signature scan's one use of nvdisasm: the instruction at each row's faulting PC, worked
out once per (cubin content, function) for the whole scan and kept in the scan cache,
refusals included.

The nvdisasm here is a script of the test's own that refuses every image and counts its
runs: a real tool run (nothing is mocked), of a tool whose every answer is a refusal.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fleet.signature import load_rules
from postmortem.scan.run import ScanOptions, run_scan
from postmortem.scan.work.worker import WorkOptions

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from fleet import FleetDump, write_dump  # noqa: E402

REFUSING = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; fi
echo run >> "{log}"
echo "nvdisasm fatal   : refused for the test" >&2
exit 1
"""


@pytest.fixture
def refusing_nvdisasm(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "runs.log"
    tool = tmp_path / "bin" / "nvdisasm"
    tool.parent.mkdir()
    tool.write_text(REFUSING.format(log=log))
    tool.chmod(0o755)
    return tool, log


def _runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _fleet(folder: Path, count: int) -> None:
    # one function, loaded at another address by every process, half of them by a producer
    # whose images give every allocated section an address
    folder.mkdir()
    for number in range(count):
        write_dump(folder, FleetDump(
            pid=2000 + number, sm=number, load_base=0x7F3C_2A00_0000 + number * 0x20_0000,
            convention="alloc" if number % 2 else "code",
        ))  # fmt: skip


def _options(nvdisasm: Path | None, cache: Path | None, jobs: int = 1) -> ScanOptions:
    localize = LocalizeOptions(nvdisasm=nvdisasm) if nvdisasm else LocalizeOptions()
    work = WorkOptions(AnalyzeOptions(localize, cuda_gdb=False), load_rules())
    return ScanOptions(work, jobs=jobs, cache_path=cache)


def test_a_refusal_is_worked_out_once_per_function_and_remembered_by_the_cache(
    tmp_path, refusing_nvdisasm
):
    # GIVEN six distinct dumps of one function and an nvdisasm that refuses every image
    tool, log = refusing_nvdisasm
    _fleet(tmp_path / "dumps", 6)
    cache = tmp_path / "cache.sqlite"
    # WHEN they are scanned
    first = run_scan([tmp_path / "dumps"], _options(tool, cache))
    # THEN nvdisasm ran for the first dump only (once per copy of its image tried), and every
    # row says why it has no instruction
    runs = _runs(log)
    assert 1 <= runs <= 4
    assert len(first.rows) == 6
    assert {row.instruction for row in first.rows} == {None}
    assert all("refused for the test" in (row.instruction_note or "") for row in first.rows)
    assert len({row.code_key for row in first.rows}) == 1
    # WHEN new dumps of the same function come, in another scan with the same cache
    _fleet(tmp_path / "more", 3)
    again = run_scan([tmp_path / "more"], _options(tool, cache))
    # THEN the refusal came from the cache: nvdisasm did not run again
    assert _runs(log) == runs
    assert all("refused for the test" in (row.instruction_note or "") for row in again.rows)


def test_without_a_cache_two_workers_work_out_each_function_once(tmp_path, refusing_nvdisasm):
    # GIVEN distinct dumps of one function, no cache, two workers
    tool, log = refusing_nvdisasm
    _fleet(tmp_path / "dumps", 8)
    # WHEN they are scanned
    result = run_scan([tmp_path / "dumps"], _options(tool, None, jobs=2))
    # THEN the function was worked out once for the scan (the workers share a table of the
    # scan's own), and every row has the outcome
    assert _runs(log) <= 4
    assert all(row.instruction_note for row in result.rows), result.rows


def test_a_signature_scan_with_nvdisasm_off_runs_no_tool(tmp_path, refusing_nvdisasm):
    # GIVEN dumps and an nvdisasm the scan is told not to use (--no-disasm)
    tool, log = refusing_nvdisasm
    _fleet(tmp_path / "dumps", 3)
    options = _options(tool, tmp_path / "cache.sqlite")
    localize = replace(options.work.analyze.localize, nvdisasm=False)
    work = replace(options.work, analyze=replace(options.work.analyze, localize=localize))
    # WHEN they are scanned
    result = run_scan([tmp_path / "dumps"], replace(options, work=work))
    # THEN every dump is signed, and nvdisasm never ran
    assert _runs(log) == 0
    assert len(result.groups) == 1 and result.groups[0].count == 3
    assert {row.instruction for row in result.rows} == {None}


def test_the_code_table_lives_in_the_scan_cache(tmp_path, refusing_nvdisasm):
    tool, _ = refusing_nvdisasm
    _fleet(tmp_path / "dumps", 2)
    cache = tmp_path / "cache.sqlite"
    run_scan([tmp_path / "dumps"], _options(tool, cache))
    with sqlite3.connect(cache) as db:
        states = db.execute("select state, outcome from code").fetchall()
    assert len(states) == 1 and states[0][0] == "done" and "refused" in states[0][1]


def test_a_claim_left_by_a_killed_worker_is_taken_over(tmp_path, refusing_nvdisasm):
    # GIVEN a cache whose code table holds a claim by a process that is gone
    tool, log = refusing_nvdisasm
    _fleet(tmp_path / "dumps", 1)
    cache = tmp_path / "cache.sqlite"
    run_scan([tmp_path / "dumps"], _options(tool, cache))
    dead = _dead_pid()
    with sqlite3.connect(cache) as db:
        db.execute("update code set state = 'pending', outcome = ?", (str(dead),))
    runs = _runs(log)
    # WHEN a new dump of the same function is scanned
    _fleet(tmp_path / "more", 1)
    result = run_scan([tmp_path / "more"], _options(tool, cache))
    # THEN the claim was taken over: nvdisasm ran again, and the row has the outcome
    assert _runs(log) > runs
    assert "refused for the test" in (result.rows[0].instruction_note or "")


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])  # noqa: S607
    child.wait()
    return child.pid


def test_a_timed_out_nvdisasm_is_not_remembered(tmp_path):
    # GIVEN an nvdisasm that outlasts its time limit (the dump's own limit is far off)
    log = tmp_path / "runs.log"
    slow = tmp_path / "nvdisasm"
    slow.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "release 13.0, V13.0.88"; exit 0; fi\n'
        f'echo run >> "{log}"\nsleep 5\n'
    )
    slow.chmod(0o755)
    _fleet(tmp_path / "dumps", 1)
    cache = tmp_path / "cache.sqlite"
    localize = LocalizeOptions(nvdisasm=slow, timeout=0.3)
    work = WorkOptions(AnalyzeOptions(localize, cuda_gdb=False), load_rules())
    options = ScanOptions(work, jobs=1, cache_path=cache, timeout_s=60)
    # WHEN the dump is scanned twice with the same cache
    first = run_scan([tmp_path / "dumps"], options)
    again = run_scan([tmp_path / "dumps"], options)
    # THEN each row says nvdisasm failed, and neither the failure nor the row was kept: it
    # ran both times
    assert again.cache_hits == 0
    for result in (first, again):
        (row,) = result.rows
        assert row.status == "ok" and row.instruction is None
        assert row.instruction_note and row.instruction_note.startswith("nvdisasm failed")
    assert _runs(log) == 2
    with sqlite3.connect(cache) as db:
        assert db.execute("select count(*) from code").fetchone()[0] == 0
