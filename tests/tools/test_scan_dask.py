"""`postmortem scan --engine dask` on a real Dask cluster (a LocalCluster of two worker
processes on the loopback, started by the test): the same rows and outputs as a local scan.
The tests that start a cluster are in the slow tier, as Ray's are; those of the errors that
need none run by default."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import dump_paths
from tests.tooling import REPO, invoke, require_module, require_tool

OOB = REPO / "fixtures" / "dumps" / "oob_store.nvcudmp"
FLEET_NAME = "core_1763800000_gpu-node-7_4242.nvcudmp"  # the driver's core_%t_%h_%p.nvcudmp


def _local_cluster(**config: object):
    require_module("distributed", "postmortem[dask] runs scans on a Dask cluster")
    import dask
    from distributed import LocalCluster

    with dask.config.set(config):
        return LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        )  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    cluster = _local_cluster()
    yield cluster
    cluster.close()


def scan(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "postmortem", "scan", *map(str, args)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rows(path: Path) -> dict[str, dict]:
    return {o["path"]: o for o in _lines(path) if o["type"] == "dump"}


def _without(lines: list[dict], *keys: str) -> list[dict]:
    return [{k: v for k, v in line.items() if k not in keys} for line in lines]


@pytest.fixture
def corpus(tmp_path):
    """The fixture dumps, a fleet-named copy, and broken files."""
    root = tmp_path / "dumps"
    (root / "broken").mkdir(parents=True)
    for path in dump_paths():
        shutil.copy2(path, root / path.name)
    shutil.copy2(OOB, root / FLEET_NAME)
    data = OOB.read_bytes()
    (root / "broken" / "truncated.nvcudmp").write_bytes(data[:4096])
    (root / "broken" / "cut.nvcudmp.gz").write_bytes(gzip.compress(data)[:3000])
    return root


def _run_both(
    root: Path, tmp_path: Path, cluster, *args: object, local_here: bool = True
) -> dict[str, Path]:
    """The scan of `root` by each engine, each into a folder of its own; the relative
    paths (dumps, outputs) are the same for both. The Dask scan runs in a subprocess (the
    client and its event loop kept out of this one); the local one, with its pool of
    workers, runs in this process where `local_here`."""
    outs = {}
    for engine in ("local", "dask"):
        out = tmp_path / engine
        out.mkdir()
        engine_args = ("--engine", "dask", "--scheduler", cluster.scheduler_address)
        where = os.path.relpath(root, out)
        if engine == "local" and local_here:
            result = invoke("scan", where, *args, "-j", "2", cwd=out)
        else:
            result = subprocess.run(
                [sys.executable, "-m", "postmortem", "scan", where, *map(str, args),
                 *(engine_args if engine == "dask" else ("-j", "2"))],
                capture_output=True, text=True, timeout=300, cwd=out,
            )  # fmt: skip
        assert result.returncode in (0, 4), result.stderr
        assert "Traceback" not in result.stderr
        outs[engine] = out
    return outs


@pytest.mark.slow
def test_a_dask_scan_gives_the_rows_and_outputs_of_a_local_scan(cluster, corpus, tmp_path):
    require_tool("nvdisasm")
    # GIVEN the fixture corpus with broken dumps, scanned by each engine (relative paths,
    # per-dump reports, an index and JSON lines)
    args = ("--no-cache", "--no-gdb", "--format", "md", "-o", "index.md", "--jsonl", "scan.jsonl",
            "--reports", "reports", "--report-format", "md")  # fmt: skip
    outs = _run_both(corpus, tmp_path, cluster, *args)
    local, dask = (_lines(outs[e] / "scan.jsonl") for e in ("local", "dask"))
    # THEN the JSON lines are the same, row by row (but for the time each dump took)
    assert _without(dask, "seconds") == _without(local, "seconds")
    rows = _rows(outs["dask"] / "scan.jsonl")
    assert len(rows) == len(dump_paths()) + 3
    assert {r["status"] for r in rows.values()} == {"ok", "error"}
    assert sum(r["status"] == "error" for r in rows.values()) == 2
    # AND so are the index and every per-dump report, file by file
    assert (outs["dask"] / "index.md").read_text() == (outs["local"] / "index.md").read_text()
    reports = {e: sorted(p.name for p in (outs[e] / "reports").iterdir()) for e in outs}
    assert reports["dask"] == reports["local"] and len(reports["dask"]) == len(dump_paths()) + 1
    for name in reports["dask"]:
        # the seconds a tool took vary from run to run, whatever the engine
        texts = [_untimed((outs[e] / "reports" / name).read_text()) for e in ("local", "dask")]
        assert texts[0] == texts[1], name


def _untimed(text: str) -> str:
    return re.sub(r"\b\d+\.\d+ s\b", "N s", text)


@pytest.mark.slow
def test_dask_scan_uses_and_fills_the_cache_like_a_local_scan(cluster, tmp_path):
    require_tool("nvdisasm")
    root = tmp_path / "dumps"
    root.mkdir()
    for name in ("a.nvcudmp", "b.nvcudmp"):
        shutil.copy2(OOB, root / name)
    cache, out = tmp_path / "cache.sqlite", tmp_path / "scan.jsonl"
    dask = ("--engine", "dask", "--scheduler", cluster.scheduler_address)
    # a Dask scan fills the cache; a local scan then takes every row from it, and back
    assert scan(root, *dask, "--cache", cache, "--format", "json", "-o", out).returncode == 0
    assert _lines(out)[0]["cache_hits"] == 0
    assert invoke("scan", root, "--cache", cache, "--format", "json", "-o", out).returncode == 0
    assert _lines(out)[0]["cache_hits"] == 2
    assert scan(root, *dask, "--cache", cache, "--format", "json", "-o", out).returncode == 0
    assert _lines(out)[0]["cache_hits"] == 2


@pytest.mark.slow
def test_dumps_over_the_time_limit_are_timeout_rows_on_both_engines(cluster, tmp_path):
    # GIVEN dumps whose analysis waits on an "nvdisasm" that takes 5 s (a stand-in that
    # sleeps: no worker has its disassembly from an earlier scan)
    root = tmp_path / "dumps"
    root.mkdir()
    for name in ("a.nvcudmp", "b.nvcudmp"):
        shutil.copy2(OOB, root / name)
    slow = tmp_path / "nvdisasm"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    # WHEN each may take half a second
    outs = _run_both(root, tmp_path, cluster, "--no-cache", "--timeout", "0.5", "--nvdisasm",
                     slow, "--format", "json", "-o", "scan.jsonl")  # fmt: skip
    # THEN both engines give a timeout row for each, and nothing else
    for out in outs.values():
        rows = _rows(out / "scan.jsonl")
        assert sorted(Path(p).name for p in rows) == ["a.nvcudmp", "b.nvcudmp"]
        assert {row["status"] for row in rows.values()} == {"timeout"}
        assert all(row["error"].startswith("no result within 0.5 s") for row in rows.values())
        assert all(row["fingerprint"] for row in rows.values())


def _killing_tool(folder: Path) -> Path:
    """A stand-in nvdisasm that kills the process that runs it (a worker), as a crash would."""
    tool = folder / "nvdisasm"
    tool.write_text("#!/bin/sh\nkill -9 $PPID\n")
    tool.chmod(0o755)
    return tool


@pytest.mark.slow
def test_a_dump_whose_worker_dies_is_a_crashed_row_on_both_engines(tmp_path):
    # GIVEN a cluster that gives up on a task at the first death of its worker (Dask's
    # default is the fourth), and an "nvdisasm" that kills whoever runs it (both scans in a
    # subprocess: should the tool ever run in the scan's own process, it kills that one only)
    cluster = _local_cluster(**{"distributed.scheduler.allowed-failures": 0})
    try:
        root = tmp_path / "dumps"
        root.mkdir()
        for name in ("a.nvcudmp", "b.nvcudmp"):
            shutil.copy2(OOB, root / name)
        tool = _killing_tool(tmp_path)
        # WHEN the dumps are scanned
        outs = _run_both(root, tmp_path, cluster, "--no-cache", "--nvdisasm", tool,
                         "--format", "json", "-o", "scan.jsonl", local_here=False)  # fmt: skip
    finally:
        cluster.close()
    # THEN each engine gives one crashed row per dump
    for engine, out in outs.items():
        rows = _rows(out / "scan.jsonl")
        assert sorted(Path(p).name for p in rows) == ["a.nvcudmp", "b.nvcudmp"], engine
        assert {row["status"] for row in rows.values()} == {"crashed"}, engine
        assert all(row["error"].startswith("worker process died") for row in rows.values())


@pytest.mark.slow
def test_a_worker_lost_mid_scan_loses_no_dump_and_counts_none_twice(cluster, tmp_path):
    require_tool("nvdisasm")
    from distributed import Client

    # GIVEN sixty dumps scanned on the cluster, with a report for each
    root, reports = tmp_path / "dumps", tmp_path / "reports"
    root.mkdir()
    for number in range(60):
        shutil.copy2(OOB, root / f"dump{number:02d}.nvcudmp")
    out = tmp_path / "scan.jsonl"
    with Client(cluster.scheduler_address, set_as_default=False) as client:
        pids = list(client.run(os.getpid).values())
    proc = subprocess.Popen(
        [sys.executable, "-m", "postmortem", "scan", root, "--engine", "dask", "--scheduler",
         cluster.scheduler_address, "--no-cache", "--no-gdb", "--reports", reports,
         "--report-format", "md", "--format", "json", "-o", out],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # WHEN one worker process is killed once the first reports are written
    deadline = time.monotonic() + 120
    while (
        not reports.is_dir() or len(list(reports.iterdir())) < 2
    ) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(list(reports.iterdir())) < 60  # the scan is under way
    os.kill(pids[0], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=300)
    # THEN the scan finishes with one row per dump, every one analyzed
    assert proc.returncode == 0, stderr
    rows = _rows(out)
    assert sorted(Path(p).name for p in rows) == [f"dump{n:02d}.nvcudmp" for n in range(60)]
    assert {row["status"] for row in rows.values()} == {"ok"}
    assert _lines(out)[0]["dumps"] == 60
    # AND the worker did die (its nanny started another)
    with Client(cluster.scheduler_address, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        assert pids[0] not in client.run(os.getpid).values()


def test_an_unreachable_scheduler_is_a_one_line_error_within_the_scan_timeout():
    require_module("distributed", "postmortem[dask] runs scans on a Dask cluster")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = scan(OOB.parent, "--no-cache", "--engine", "dask", "--timeout", "2",
                  "--scheduler", f"tcp://127.0.0.1:{port}")  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: --scheduler tcp://127.0.0.1:{port}: cannot reach it:")
    # given up on at the scan's --timeout, not at Dask's own 10 s
    assert line.endswith("after 2 s"), line


def test_without_the_extra_engine_dask_is_a_one_line_error(tmp_path):
    # distributed hidden, as if not installed (a None entry in sys.modules makes it unfindable)
    code = (
        "import sys; sys.modules['distributed'] = None; from postmortem.cli import main; "
        f"main(['scan', {str(tmp_path)!r}, '--engine', 'dask', '--scheduler', "
        "'tcp://127.0.0.1:8786'], prog_name='postmortem')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "--engine dask needs the dask extra (distributed is not installed)" in line
    assert "pip install 'dask[distributed]'" in line


def test_engine_dask_needs_a_scheduler_and_a_scheduler_needs_engine_dask(tmp_path):
    result = invoke("scan", tmp_path, "--engine", "dask")
    assert result.returncode == 2 and "--scheduler" in result.stderr
    result = invoke("scan", tmp_path, "--scheduler", "tcp://127.0.0.1:8786")
    assert result.returncode == 2 and "is for --engine dask" in result.stderr


def test_a_scheduler_that_accepts_but_never_answers_is_a_one_line_error():
    require_module("distributed", "postmortem[dask] runs scans on a Dask cluster")
    # GIVEN a port that accepts connections and says nothing (no Dask scheduler behind it)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        held = []
        stop = threading.Event()

        def accept() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    held.append(server.accept()[0])

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        try:
            # WHEN a scan is sent there with a 2 s timeout
            result = scan(OOB.parent, "--no-cache", "--engine", "dask", "--timeout", "2",
                          "--scheduler", f"tcp://127.0.0.1:{port}")  # fmt: skip
        finally:
            stop.set()
            acceptor.join()
            for connection in held:
                connection.close()
    # THEN it ends (it waited forever before) with one line saying what was there
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.endswith("no answer in 2 s (a port that accepts connections, but no Dask "
                         "scheduler behind it?)")  # fmt: skip
