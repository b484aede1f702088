"""`postmortem scan` end to end, on a copy of the fixture corpus: in this process (click's
runner), and in a subprocess where signals, a terminal or the environment the workers start
with are the point."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fleet.signature import load_rules
from postmortem.coredump.tables import DEV_TABLE
from postmortem.elfcolumns import SECTION_DTYPE
from postmortem.report.render import render
from postmortem.scan.outputs.index import build_index
from postmortem.scan.run import ScanOptions, run_scan
from postmortem.scan.work.worker import WorkOptions, report_path
from tests.conftest import dump_paths, truth_of
from tests.tooling import REPO, invoke, require_tool, run_on_terminal

SCHEMA = json.loads((REPO / "postmortem" / "scan" / "scan-line.schema.json").read_text())
OOB = REPO / "fixtures" / "dumps" / "oob_store.nvcudmp"
DEFAULT_NAME = "core_1763800000_gpu-node-7_4242.nvcudmp"  # the driver's core_%t_%h_%p.nvcudmp
DOTTED_NAME = "gpu-3.rack2.example.com.1234.1763800100"  # %h.%p.%t, no suffix at all


def scan(*args: object, env: dict[str, str | None] | None = None) -> types.SimpleNamespace:
    return invoke("scan", *args, env=env)


def _broken(root: Path) -> dict[str, Path]:
    """Broken dumps beside the good ones: truncated, corrupt headers, not a dump."""
    data = OOB.read_bytes()
    paths = {
        "truncated": root / "broken" / "truncated.nvcudmp",
        "corrupt": root / "broken" / "corrupt_sections",
        "badgzip": root / "broken" / "cut.nvcudmp.gz",
    }
    paths["truncated"].parent.mkdir()
    paths["truncated"].write_bytes(data[:4096])
    corrupt = bytearray(data)
    corrupt[0x28:0x30] = (len(data) - 10).to_bytes(8, "little")  # e_shoff past the end
    paths["corrupt"].write_bytes(bytes(corrupt))
    paths["badgzip"].write_bytes(gzip.compress(data)[:3000])
    (root / "broken" / "readme.txt").write_text("not a dump")
    return paths


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "dumps"
    root.mkdir()
    for path in dump_paths():
        shutil.copy2(path, root / path.name)
    (root / "fleet").mkdir()
    shutil.copy2(OOB, root / "fleet" / DEFAULT_NAME)
    shutil.copy2(OOB, root / "fleet" / DOTTED_NAME)
    _broken(root)
    return root


def _snapshot(root: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*")) if p.is_file()
    }  # fmt: skip


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _by_name(lines: list[dict]) -> dict[str, dict]:
    return {Path(o["path"]).name: o for o in lines if o["type"] == "dump"}


def test_scan_of_a_corpus_with_broken_dumps(corpus, tmp_path):
    require_tool("nvdisasm")
    # GIVEN the fixture corpus, two fleet-named copies and broken files
    before = _snapshot(corpus)
    out, reports = tmp_path / "out" / "scan.jsonl", tmp_path / "out" / "reports"
    out.parent.mkdir()
    # WHEN it is scanned
    cache = tmp_path / "c.sqlite"
    result = scan(corpus, "-j2", "--format", "json", "-o", out, "--reports", reports,
                  "--report-format", "md", "--no-gdb", "--cache", cache)  # fmt: skip
    # THEN the scan finished, says errors occurred, and left the inputs as they were
    assert result.returncode == 4, result.stderr
    assert _snapshot(corpus) == before
    lines = _lines(out)
    for line in lines:
        jsonschema.validate(line, SCHEMA)
    rows = _by_name(lines)
    assert "readme.txt" not in rows
    assert len(rows) == len(dump_paths()) + 2 + 3
    errors = {name: row for name, row in rows.items() if row["status"] != "ok"}
    assert set(errors) == {"truncated.nvcudmp", "corrupt_sections", "cut.nvcudmp.gz"}
    assert "truncated at byte" in errors["truncated.nvcudmp"]["error"]
    assert "cannot decompress" in errors["cut.nvcudmp.gz"]["error"]
    assert all("\n" not in row["error"] for row in errors.values())
    # The row names the file; its reason does not repeat the path.
    assert errors["truncated.nvcudmp"]["error"].startswith("truncated at byte")
    summary = lines[0]
    assert summary["type"] == "scan" and summary["errors"] == 3 and not summary["interrupted"]
    # per-dump reports are written and linked relative to the index
    for row in rows.values():
        if row["status"] == "ok":
            assert (out.parent / row["report"]).is_file()
            assert row["report"].startswith("reports/") and row["report"].endswith(".md")
    # host and pid come from the names the CUDA_COREDUMP_FILE patterns make
    assert (rows[DEFAULT_NAME]["host"], rows[DEFAULT_NAME]["pid"]) == ("gpu-node-7", 4242)
    assert (rows[DOTTED_NAME]["host"], rows[DOTTED_NAME]["pid"]) == (
        "gpu-3.rack2.example.com",
        1234,
    )
    groups = [o for o in lines if o["type"] == "group"]
    assert [g["count"] for g in groups] == sorted((g["count"] for g in groups), reverse=True)
    top = groups[0]
    assert {"host": "gpu-node-7", "count": 1} in top["hosts"] and 4242 in top["pids"]
    assert sum(g["count"] for g in groups) == summary["ok"]


def _signatures(lines: list[dict]) -> dict[str, str]:
    return {name: row["signature"]["id"] for name, row in _by_name(lines).items()
            if row["signature"]}  # fmt: skip


def test_twins_share_signatures_and_distinct_faults_do_not(tmp_path):
    require_tool("nvdisasm")
    out = tmp_path / "scan.jsonl"
    result = scan(REPO / "fixtures" / "dumps", "-j2", "--format", "json", "-o", out, "--no-cache")
    assert result.returncode == 0, result.stderr
    ids = _signatures(_lines(out))
    by_truth: dict[tuple, set[str]] = {}
    for path in dump_paths():
        truth = truth_of(path)
        fault = truth.get("fault") or {}
        if truth.get("twin_of") and fault:
            # a twin in the r400 row layout: same content, same signature as its original
            assert ids[path.name] == ids[truth["twin_of"] + ".nvcudmp"], path.name
        if fault.get("kernel") and fault.get("lineinfo"):
            planted = (fault["exception"], fault["kernel"], fault["offset"],
                       tuple(map(tuple, fault["expected_chain"][:3])))  # fmt: skip
            by_truth.setdefault(planted, set()).add(ids[path.name])
    # every planted fault has exactly one signature, and no two planted faults share one
    assert all(len(found) == 1 for found in by_truth.values())
    assert len({next(iter(found)) for found in by_truth.values()}) == len(by_truth) >= 5


def test_j1_and_j2_give_identical_results(tmp_path):
    require_tool("nvdisasm")
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}.jsonl"
        result = scan(REPO / "fixtures" / "dumps", "-j", jobs, "--format", "json", "-o", out,
                      "--no-cache")  # fmt: skip
        assert result.returncode == 0, result.stderr
        lines = _lines(out)
        for line in lines:
            line.pop("seconds", None)
        outs.append(lines)
    assert outs[0] == outs[1]


def _stable(lines: list[dict]) -> list[dict]:
    volatile = ("cached", "seconds", "cache_hits")
    return [{k: v for k, v in line.items() if k not in volatile} for line in lines]


def _cache_hits(out: Path) -> int:
    return _lines(out)[0]["cache_hits"]


def test_cache_hits_on_rescan_and_invalidation(corpus, tmp_path):
    require_tool("nvdisasm")
    cache, out = tmp_path / "cache.sqlite", tmp_path / "scan.jsonl"
    args = (corpus, "-j2", "--format", "json", "-o", out, "--cache", cache)
    assert scan(*args).returncode == 4
    first = _lines(out)
    total = first[0]["dumps"]
    assert _cache_hits(out) == 0
    # unchanged: every row, broken ones included, comes from the cache, and says so
    assert scan(*args).returncode == 4
    assert _cache_hits(out) == total
    assert all(o["cached"] for o in _lines(out) if o["type"] == "dump")
    # same results either way (except the cached flag and timings)
    assert _stable(_lines(out)) == _stable(first)
    # a changed mtime, and changed table bytes behind an unchanged size and mtime
    touched = corpus / "oob_store_r346.nvcudmp"
    os.utime(touched, (1, 1))
    edited = corpus / "fleet" / DEFAULT_NAME
    info = edited.stat()
    edited.write_bytes(_with_changed_table(edited.read_bytes()))
    os.utime(edited, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert scan(*args).returncode == 4
    assert _cache_hits(out) == total - 2
    # --no-cache analyzes everything again
    assert scan(*args, "--no-cache").returncode == 4
    assert _cache_hits(out) == 0


def _with_changed_table(data: bytes) -> bytes:
    """The dump with one byte of its device table changed (the PCI bus id), same size."""
    shoff = int.from_bytes(data[0x28:0x30], "little")
    count = int.from_bytes(data[0x3C:0x3E], "little")
    headers = np.frombuffer(data, SECTION_DTYPE, count, shoff)
    (index,) = np.flatnonzero(headers["type"] == DEV_TABLE)
    changed = bytearray(data)
    changed[int(headers["offset"][index]) + 28] ^= 0x01
    return bytes(changed)


def test_since_leaves_out_older_dumps(tmp_path):
    require_tool("nvdisasm")
    root = tmp_path / "dumps"
    root.mkdir()
    old, new = root / "old.nvcudmp", root / "new.nvcudmp"
    shutil.copy(OOB, old)  # r400 layout: no metadata timestamp, so the mtime counts
    shutil.copy(OOB, new)
    os.utime(old, (1_600_000_000, 1_600_000_000))  # 2020
    out = tmp_path / "scan.jsonl"
    result = scan(root, "--since", "2025-01-01", "--format", "json", "-o", out, "--no-cache")
    assert result.returncode == 0, result.stderr
    lines = _lines(out)
    assert [Path(o["path"]).name for o in lines if o["type"] == "dump"] == ["new.nvcudmp"]
    assert lines[0]["left_out"] == 1 and lines[0]["found"] == 2
    result = scan(root, "--since", "last tuesday")
    assert result.returncode == 2 and "--since" in result.stderr


def test_a_dump_over_the_time_limit_becomes_a_timeout_row(tmp_path):
    require_tool("nvdisasm")
    # GIVEN dumps that each need an nvdisasm run, far longer than 10 ms
    root = tmp_path / "dumps"
    root.mkdir()
    for name in ("a.nvcudmp", "b.nvcudmp"):
        shutil.copy(OOB, root / name)
    out = tmp_path / "scan.jsonl"
    # WHEN each may take 10 ms only (temporary files going to a directory of our own: a
    # subprocess, as TMPDIR is read once per process)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "postmortem", "scan", str(root), "-j1", "--timeout", "0.01",
         "--format", "json", "-o", str(out), "--no-cache"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip
    # THEN both are timeout rows, the scan finished, and its status says errors occurred
    assert result.returncode == 4, result.stderr
    rows = _by_name(_lines(out))
    assert {row["status"] for row in rows.values()} == {"timeout"}
    assert all("no result within 0.01 s" in row["error"] for row in rows.values())
    # AND the killed workers left no temporary files (cubin copies) behind
    assert list(scratch.iterdir()) == []


def test_ctrl_c_writes_partial_results_and_exits_130(tmp_path):
    require_tool("nvdisasm")
    # GIVEN a scan of 1,000 dumps, one at a time, so that it lasts long past the signal (150
    # were all done before it, now and then: a dump like these takes a few milliseconds)
    root = tmp_path / "dumps"
    root.mkdir()
    for number in range(1000):
        shutil.copy(OOB, root / f"dump{number:04d}.nvcudmp")
    out, reports = tmp_path / "index.md", tmp_path / "reports"
    proc = subprocess.Popen(
        [sys.executable, "-m", "postmortem", "scan", root, "-j1", "--format", "md", "-o", out,
         "--jsonl", tmp_path / "scan.jsonl", "--reports", reports, "--no-gdb", "--no-cache"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # WHEN Ctrl-C arrives once a few dumps are done
    started = time.monotonic()
    while len(list(reports.glob("*.md"))) < 3 and time.monotonic() < started + 120:
        time.sleep(0.05)
    seen = f"signalled after {time.monotonic() - started:.1f} s, "
    seen += f"{len(list(reports.glob('*.md')))} reports, scan running: {proc.poll() is None}"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    # THEN the partial results are written and the exit status is 130
    assert proc.returncode == 130, f"{seen}; {stderr}"
    assert "interrupted" in stderr
    summary = _lines(tmp_path / "scan.jsonl")[0]
    assert summary["interrupted"] and 3 <= summary["dumps"] < 1000
    assert "Interrupted: partial results" in out.read_text()
    assert "Traceback" not in stderr


def test_html_index_escapes_hostile_kernel_names(tmp_path):
    require_tool("nvdisasm")
    out = tmp_path / "index.html"
    hostile = REPO / "fixtures" / "dumps" / "hostile_names.nvcudmp"
    result = scan(hostile, "--format", "html", "-o", out, "--no-cache")
    assert result.returncode == 0, result.stderr
    page = out.read_text()
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "html::render&lt;html::script" in page  # the full name, shown as text
    assert "http://" not in page and "https://" not in page  # self-contained


def test_text_and_md_index_name_groups_and_errors(corpus, tmp_path):
    require_tool("nvdisasm")
    cache = tmp_path / "c.sqlite"
    text = scan(corpus, "-j2", "--cache", cache)
    assert text.returncode == 4
    assert "signatures, 3 errors" in text.stdout.splitlines()[0]
    assert "Warp Illegal Address in oob_kernel+0xd0" in text.stdout
    assert "truncated.nvcudmp: error:" in text.stdout
    assert "hosts: gpu-3.rack2.example.com, gpu-node-7" in text.stdout
    md = scan(corpus, "-j2", "--cache", cache, "--format", "md")
    assert md.returncode == 4
    first = next(line for line in md.stdout.splitlines() if line.startswith("| 1 | "))
    assert "| `Warp Illegal Address` | `oob_kernel` | 0xd0 |" in first
    total = len(dump_paths()) + 5  # two fleet-named copies, three broken files
    assert f"{total} found, {total} from the cache" in md.stdout  # the format is not a setting
    assert "## Errors (3)" in md.stdout


def test_signature_command_prints_components_and_matches_scan(tmp_path):
    require_tool("nvdisasm")
    dump = REPO / "fixtures" / "dumps" / "cutlass_like.nvcudmp"
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps({"name": "cl", "library_paths": ["cutlass_like/arch/*"], "top_frames": 2})
    )
    text = invoke("signature", dump, "--rules", rules)
    assert text.returncode == 0, text.stderr
    assert "components: exception, kernel, offset, function, frames" in text.stdout
    assert (
        "function:   cutlass_like::epilogue::PredicatedTileIterator<>::store_with_byte_offset"
        in (text.stdout)
    )
    # The wrapper kernel keyed with its identity (signature version 3).
    assert (
        "kernel:     cutlass_like::device_kernel<cutlass_like::gemm::kernel::Gemm<>>" in text.stdout
    )
    # the two library frames are skipped; the next two are the key
    assert " L #0 include/cutlass_like/arch/memory.cuh:9" in text.stdout
    assert "*  #2 include/cutlass_like/epilogue/predicated_tile_iterator.cuh:34" in text.stdout
    as_json = invoke("signature", dump, "--json", "--rules", rules, tmp_path / "missing")
    assert as_json.returncode == 2 and "missing: cannot read" in as_json.stderr
    sig = json.loads(as_json.stdout)
    assert sig["skipped"] == 2 and len(sig["frames"]) == 2
    out = tmp_path / "scan.jsonl"
    assert scan(dump, "--rules", rules, "--format", "json", "-o", out, "--no-cache").returncode == 0
    assert _by_name(_lines(out))["cutlass_like.nvcudmp"]["signature"]["id"] == sig["id"]


def test_library_scan_groups_identical_dumps(tmp_path):
    require_tool("nvdisasm")
    root = tmp_path / "dumps"
    root.mkdir()
    for number in range(3):
        shutil.copy(OOB, root / f"d{number}.nvcudmp")
    work = WorkOptions(AnalyzeOptions(cuda_gdb=False), load_rules())
    result = run_scan([root], ScanOptions(work, jobs=1))
    assert len(result.groups) == 1 and result.groups[0].count == 3
    assert "3 dumps  Warp Illegal Address in oob_kernel+0xd0" in render(
        "scan", build_index(result), "text"
    )


def test_a_report_that_cannot_be_written_is_an_error_row_not_cached(tmp_path):
    require_tool("nvdisasm")
    root, reports, cache = tmp_path / "dumps", tmp_path / "reports", tmp_path / "c.sqlite"
    root.mkdir()
    shutil.copy(OOB, root / "a.nvcudmp")
    shutil.copy(OOB, root / "b.nvcudmp")
    work = WorkOptions(
        AnalyzeOptions(cuda_gdb=False), load_rules(), reports_dir=reports, report_format="json"
    )
    blocked = report_path(str(root / "b.nvcudmp"), work)
    blocked.mkdir(parents=True)  # a directory where b's report should go
    out = tmp_path / "scan.jsonl"
    args = (root, "--reports", reports, "--no-gdb", "--format", "json", "-o", out, "--cache", cache)
    assert scan(*args).returncode == 4
    rows = _by_name(_lines(out))
    assert rows["a.nvcudmp"]["status"] == "ok"
    assert rows["b.nvcudmp"]["error"].startswith(f"cannot write its report {blocked}")
    blocked.rmdir()
    assert scan(*args).returncode == 0
    assert _cache_hits(out) == 1  # a's row; b is analyzed again and its report written
    assert blocked.is_file()


def test_cache_hits_however_the_directory_is_spelled(tmp_path, monkeypatch):
    require_tool("nvdisasm")
    root = tmp_path / "dumps"
    root.mkdir()
    shutil.copy(OOB, root / "a.nvcudmp")
    out, cache = tmp_path / "scan.jsonl", tmp_path / "c.sqlite"
    monkeypatch.chdir(tmp_path)
    assert scan("dumps", "--format", "json", "-o", out, "--cache", cache).returncode == 0
    assert scan(root, "--format", "json", "-o", out, "--cache", cache).returncode == 0
    assert _cache_hits(out) == 1
    assert _by_name(_lines(out))["a.nvcudmp"]["path"] == str(root / "a.nvcudmp")


def test_an_empty_directory_is_a_scan_of_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    result = scan(tmp_path / "empty", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("postmortem scan: 0 dumps, 0 signatures, 0 errors")


def test_a_terminal_gets_a_progress_bar(tmp_path):
    require_tool("nvdisasm")
    # GIVEN standard error on a terminal (a pseudo-terminal here)
    out = tmp_path / "index.txt"
    argv = [sys.executable, "-m", "postmortem", "scan", str(REPO / "fixtures" / "dumps"), "-j2",
            "--no-cache", "-o", str(out)]  # fmt: skip
    # WHEN the scan runs
    status, seen = run_on_terminal(argv, stream="stderr", timeout=120)
    assert status == 0
    # THEN it drew the bar, redrawn in place, up to every dump done and the errors so far
    text = seen.decode()
    total = len(dump_paths())
    assert f"]  {total}/{total}  0 errors" in text
    assert text.count("\rscan  [") + text.count("\r\x1b[?25lscan  [") > 1


def test_a_file_name_that_is_not_utf8_is_scanned_cached_and_reported(tmp_path):
    require_tool("nvdisasm")
    # GIVEN a dump whose name is not valid UTF-8
    root = tmp_path / "dumps"
    root.mkdir()
    shutil.copy(OOB, os.path.join(os.fsencode(root), b"core\xff.nvcudmp"))
    out, reports, cache = tmp_path / "index.html", tmp_path / "reports", tmp_path / "c.sqlite"
    args = (root, "--format", "html", "-o", out, "--reports", reports, "--cache", cache)
    # WHEN it is scanned twice, with the cache, an index file and per-dump reports
    first, second = scan(*args, "--no-gdb"), scan(*args, "--no-gdb")
    # THEN both scans succeed and the second one takes the dump from the cache
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert "1 dumps" in second.stderr or "1 dump" in second.stderr
    assert len(list(reports.iterdir())) == 1
    assert out.read_bytes().count(b"core\xff.nvcudmp") >= 1


def test_an_output_folder_that_does_not_exist_is_refused_before_scanning(tmp_path):
    result = scan(OOB.parent, "--jsonl", tmp_path / "nowhere" / "x.jsonl", "--no-cache")
    assert result.returncode == 2
    assert "--jsonl" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_rows_made_without_nvdisasm_are_not_reused_once_it_is_there(tmp_path):
    require_tool("nvdisasm")
    # GIVEN a scan made where nvdisasm could not be found
    root = tmp_path / "dumps"
    root.mkdir()
    shutil.copy(OOB, root / "a.nvcudmp")
    cache, out = tmp_path / "c.sqlite", tmp_path / "scan.jsonl"
    args = (root, "--format", "json", "-o", out, "--cache", cache)
    missing = {"POSTMORTEM_NVDISASM": str(tmp_path / "no-nvdisasm")}
    degraded = scan(*args, env=missing)
    assert degraded.returncode == 0, degraded.stderr
    first = _by_name(_lines(out))["a.nvcudmp"]["signature"]
    # (its source lines come from the cubin's line table: no nvdisasm needed for them)
    assert first["quality"]["line_info"] is True
    # WHEN it is scanned again with nvdisasm
    assert scan(*args).returncode == 0
    # THEN the dump is analyzed again (its report lacked the SASS), to the same signature
    assert _cache_hits(out) == 0
    assert _by_name(_lines(out))["a.nvcudmp"]["signature"]["id"] == first["id"]
