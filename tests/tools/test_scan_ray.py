"""`postmortem scan --engine ray` on a real Ray cluster (one started on this machine by the
tests, two CPUs, shared by every test here): the same rows and outputs as a local scan."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import dump_paths
from tests.tooling import invoke, require_module, require_tool
from tests.tools.test_scan_dask import OOB, _lines, _rows, _untimed, _without, corpus  # noqa: F401

# A Ray of its own per module and per scan client (about 45 s in all on two cores): the slow
# tier, which CI runs; Dask, the other engine, stays in the default run.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_address():
    """The address of a Ray started for this module (about 5 s on two cores)."""
    ray = require_module("ray", "postmortem[ray] runs scans on a Ray cluster")
    started = time.monotonic()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    print(f"Ray started in {time.monotonic() - started:.1f} s at {address}")
    yield address
    ray.shutdown()


def scan(
    *args: object, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # ray.init set RAY_AUTH_MODE=token here (the cluster asks for ~/.ray/auth_token): the
    # scans inherit it, as a client of a cluster with token authentication must have it
    return subprocess.run(
        [sys.executable, "-m", "postmortem", "scan", *map(str, args)],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
    )  # fmt: skip


def _run_both(root: Path, tmp_path: Path, address: str, *args: object) -> dict[str, Path]:
    """The scan of `root` by each engine, each into a folder of its own, by relative paths."""
    outs = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        out.mkdir()
        engine_args = ("--engine", "ray", "--address", address) if engine == "ray" else ("-j", 2)
        result = scan(os.path.relpath(root, out), *args, *engine_args, cwd=out)
        assert result.returncode in (0, 4), result.stderr
        assert "Traceback" not in result.stderr
        outs[engine] = out
    return outs


def test_a_ray_scan_gives_the_rows_and_outputs_of_a_local_scan(ray_address, corpus, tmp_path):  # noqa: F811
    require_tool("nvdisasm")
    # GIVEN the fixture corpus with broken dumps, scanned by each engine (relative paths,
    # per-dump reports, an index and JSON lines)
    args = ("--no-cache", "--no-gdb", "--format", "md", "-o", "index.md", "--jsonl", "scan.jsonl",
            "--reports", "reports", "--report-format", "md")  # fmt: skip
    outs = _run_both(corpus, tmp_path, ray_address, *args)
    local, ray = (_lines(outs[e] / "scan.jsonl") for e in ("local", "ray"))
    # THEN the JSON lines are the same, row by row (but for the time each dump took)
    assert _without(ray, "seconds") == _without(local, "seconds")
    rows = _rows(outs["ray"] / "scan.jsonl")
    assert len(rows) == len(dump_paths()) + 3
    assert sum(r["status"] == "error" for r in rows.values()) == 2
    # AND so are the index and every per-dump report, file by file
    assert (outs["ray"] / "index.md").read_text() == (outs["local"] / "index.md").read_text()
    reports = {e: sorted(p.name for p in (outs[e] / "reports").iterdir()) for e in outs}
    assert reports["ray"] == reports["local"] and len(reports["ray"]) == len(dump_paths()) + 1
    for name in reports["ray"]:
        texts = [_untimed((outs[e] / "reports" / name).read_text()) for e in ("local", "ray")]
        assert texts[0] == texts[1], name


def test_dumps_over_the_time_limit_are_timeout_rows_on_ray(ray_address, tmp_path):
    # GIVEN dumps whose analysis waits on an "nvdisasm" that takes 5 s
    root = tmp_path / "dumps"
    root.mkdir()
    for name in ("a.nvcudmp", "b.nvcudmp"):
        (root / name).write_bytes(OOB.read_bytes())
    slow = tmp_path / "nvdisasm"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    out = tmp_path / "scan.jsonl"
    # WHEN each may take half a second
    result = scan(
        root, "--engine", "ray", "--address", ray_address, "--no-cache", "--timeout", "0.5",
        "--nvdisasm", slow, "--format", "json", "-o", out,
    )  # fmt: skip
    # THEN each is a timeout row, which says where its analysis was left
    assert result.returncode == 4, result.stderr
    rows = _rows(out)
    assert sorted(Path(p).name for p in rows) == ["a.nvcudmp", "b.nvcudmp"]
    assert {row["status"] for row in rows.values()} == {"timeout"}
    assert all(row["error"].startswith("no result within 0.5 s") for row in rows.values())
    assert all(row["error"].endswith("its Ray worker") for row in rows.values())


def test_an_unreachable_ray_address_is_a_one_line_error_within_the_scan_timeout():
    require_module("ray", "postmortem[ray] runs scans on a Ray cluster")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    result = scan(OOB.parent, "--no-cache", "--engine", "ray", "--timeout", "2",
                  "--address", f"127.0.0.1:{port}")  # fmt: skip
    assert time.monotonic() - started < 30
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: --address 127.0.0.1:{port}: cannot reach it: no answer in 2 s")


def test_a_cluster_that_refuses_the_token_is_a_one_line_error_that_says_what_to_set(
    ray_address, tmp_path
):
    (tmp_path / "a.nvcudmp").write_bytes(OOB.read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    started = time.monotonic()
    result = scan(tmp_path, "--no-cache", "--engine", "ray", "--address", ray_address, env=env)
    assert time.monotonic() - started < 30  # at the first refusal, not the connect timeout
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line == (
        f"error: --address {ray_address}: cannot reach it: the cluster refused this process's "
        "token (Ray's token authentication): set RAY_AUTH_MODE=token, with the cluster's token "
        "in RAY_AUTH_TOKEN or ~/.ray/auth_token"
    )


@pytest.fixture
def own_tmp():
    """A short TMPDIR for a scan's own Ray (its socket paths must stay under 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="pm-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_without_an_address_a_scan_starts_a_ray_of_its_own(tmp_path, own_tmp):
    require_module("ray", "postmortem[ray] runs scans on a Ray cluster")
    # GIVEN no RAY_ADDRESS (and, maybe, the last Ray started on this machine gone)
    root = tmp_path / "dumps"
    root.mkdir()
    for name in ("a.nvcudmp", "b.nvcudmp"):
        (root / name).write_bytes(OOB.read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"TMPDIR": str(own_tmp)}
    # WHEN scanned on Ray with no address
    out = tmp_path / "scan.jsonl"
    result = scan(root, "--no-cache", "--no-disasm", "--engine", "ray", "--format", "json",
                  "-o", out, env=env)  # fmt: skip
    # THEN the Ray it started lives until the scan ends (it once died with the thread that
    # started it), and each dump is analyzed
    assert result.returncode == 0, result.stderr
    assert {row["status"] for row in _rows(out).values()} == {"ok"}
    # AND the session folder of that Ray is gone with it
    assert list(own_tmp.iterdir()) == []


def _processes_naming(text: str) -> list[tuple[int, list[bytes]]]:
    """The process ids and command lines of the processes whose command line holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if text.encode() in b" ".join(argv):
            found.append((int(entry.name), argv))
    return found


def test_a_raylet_that_dies_ends_the_scan_in_one_line_and_its_session_is_removed(tmp_path, own_tmp):
    require_module("ray", "postmortem[ray] runs scans on a Ray cluster")
    # GIVEN a scan on a Ray of its own, its dumps held up by an "nvdisasm" that takes 20 s,
    # more of them than the CPUs its Ray runs tasks on (the tasks left wait on the raylet)
    root = tmp_path / "dumps"
    root.mkdir()
    dumps = 2 * (os.cpu_count() or 1) + 1
    for n in range(dumps):
        (root / f"{n}.nvcudmp").write_bytes(OOB.read_bytes())
    slow = tmp_path / "nvdisasm"
    slow.write_text("#!/bin/sh\nsleep 20\n")
    slow.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"TMPDIR": str(own_tmp)}
    process = subprocess.Popen(
        [sys.executable, "-m", "postmortem", "scan", str(root), "--no-cache", "--no-gdb",
         "--engine", "ray", "--nvdisasm", str(slow), "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        # WHEN its raylet is killed while the tasks run (an "nvdisasm" is running)
        deadline = time.monotonic() + 120
        running = [b"/bin/sh", str(slow).encode()]
        while not any(argv[:2] == running for _, argv in _processes_naming(str(slow))):
            assert time.monotonic() < deadline, "no task ran"
            assert process.poll() is None, process.communicate()[1]
            time.sleep(0.5)
        raylets = [p for p, argv in _processes_naming(str(own_tmp)) if argv[0].endswith(b"raylet")]
        assert raylets, "the scan's Ray did not start"
        for pid in raylets:
            os.kill(pid, signal.SIGKILL)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # THEN the scan ends with one line that says the cluster died, not with error rows
    assert process.returncode == 3, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: --engine ray: the cluster died during the scan (")
    done, left = map(int, re.search(r"; (\d+) dump\(s\) analyzed, (\d+) not", last).groups())
    assert done + left == dumps and left > 0
    # AND the Ray it started left no session folder behind (the folders of the tools its
    # killed workers ran are theirs)
    assert list(own_tmp.glob("postmortem-ray-*")) == []


def test_an_address_is_for_engine_ray_and_a_scheduler_for_engine_dask(tmp_path):
    result = invoke("scan", tmp_path, "--address", "127.0.0.1:6379")
    assert result.returncode == 2 and "--address: is for --engine ray" in result.stderr
    result = invoke("scan", tmp_path, "--engine", "ray", "--scheduler", "tcp://127.0.0.1:8786")
    assert result.returncode == 2 and "is for --engine dask" in result.stderr


def test_without_the_extra_engine_ray_is_a_one_line_error(tmp_path):
    code = (
        "import sys; sys.modules['ray'] = None; from postmortem.cli import main; "
        f"main(['scan', {str(tmp_path)!r}, '--engine', 'ray'], prog_name='postmortem')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "--engine ray needs the ray extra (ray is not installed)" in line
    assert "pip install ray" in line
