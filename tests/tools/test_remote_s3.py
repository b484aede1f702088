"""Dumps in an object store: the commands read them by URL from a real S3-compatible server
(moto's, started here on the loopback address, as s3fs's own tests do), by ranges. The two
tests that start a Dask cluster are in the slow tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.tooling import DUMPS, invoke, require_module
from tests.tooling import REPO as ROOT

BUCKET = "crash-dumps"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "postmortem-test",
    "AWS_SECRET_ACCESS_KEY": "postmortem-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    """An S3 server on 127.0.0.1 holding a few dumps; yields its endpoint URL."""
    moto_server = require_module("moto.server", "the S3 server of the remote tests")
    s3fs = require_module("s3fs", "fsspec's S3 filesystem")
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
    fs.mkdir(BUCKET)
    for name in ("oob_store.nvcudmp", "oob_store_gzip.nvcudmp.gz", "hang_barrier.nvcudmp"):
        fs.put(str(DUMPS / name), f"{BUCKET}/job-7/{name}")
    larger = tmp_path_factory.mktemp("large") / "many_lanes.nvcudmp"
    subprocess.run(
        [sys.executable, str(ROOT / "fixtures" / "builder" / "large.py"), str(larger),
         "--layout", "r400", "--lanes", "8192", "--global-bytes", str(16 << 20)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    fs.put(str(larger), f"{BUCKET}/job-7/many_lanes.nvcudmp")
    # Found by content, whatever the name; an object that is no dump is passed over.
    fs.put(str(DUMPS / "device_assert.nvcudmp"), f"{BUCKET}/job-7/rank3/blob.bin")
    fs.pipe(f"{BUCKET}/job-7/rank3/notes.txt", b"not a dump\n" * 100)
    yield endpoint, larger
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _postmortem(endpoint: str, *args: str) -> types.SimpleNamespace:
    """The command line, in this process, with the store's endpoint: FSSPEC_S3, which the
    storage option sets, is put back as it was after the run."""
    env: dict[str, str | None] = {**CREDENTIALS, "FSSPEC_S3": None}
    return invoke(*args, "--storage-option", f"endpoint_url={endpoint}", cwd=ROOT, env=env)


def _postmortem_process(endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The command line in a subprocess, with the store's endpoint (the Dask scans)."""
    env = {**os.environ, **CREDENTIALS}
    env.pop("FSSPEC_S3", None)
    return subprocess.run(
        [sys.executable, "-m", "postmortem", *args, "--storage-option", f"endpoint_url={endpoint}"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip


def _without_paths(text: str, *paths: str) -> str:
    for path in paths:
        text = text.replace(path, "DUMP")
    return text


@pytest.mark.parametrize("name", ["oob_store.nvcudmp", "oob_store_gzip.nvcudmp.gz"])
def test_info_of_a_url_says_what_info_of_the_file_says(store, name: str) -> None:
    endpoint, _ = store
    url = f"s3://{BUCKET}/job-7/{name}"
    remote = _postmortem(endpoint, "info", url, "--json")
    local = invoke("info", DUMPS / name, "--json", cwd=ROOT)
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    assert json.loads(_without_paths(remote.stdout, url)) == json.loads(
        _without_paths(local.stdout, str(DUMPS / name))
    )


def test_analyze_of_a_url_finds_the_fault_and_says_why_cuda_gdb_did_not_run(store) -> None:
    endpoint, _ = store
    url = f"s3://{BUCKET}/job-7/oob_store.nvcudmp"
    remote = _postmortem(endpoint, "analyze", url, "--format", "json")
    local = invoke("analyze", DUMPS / "oob_store.nvcudmp", "--format", "json", "--no-gdb", cwd=ROOT)
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    report, expected = json.loads(remote.stdout), json.loads(local.stdout)
    assert report["dump"]["path"] == url
    assert report["verdict"] == expected["verdict"]
    assert report["sites"] == expected["sites"]
    assert "reads local files" in json.dumps(report["provenance"])


def test_signature_of_a_url_is_the_signature_of_the_file(store) -> None:
    endpoint, _ = store
    remote = _postmortem(endpoint, "signature", f"s3://{BUCKET}/job-7/hang_barrier.nvcudmp")
    local = invoke("signature", DUMPS / "hang_barrier.nvcudmp", cwd=ROOT)
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    key = [line for line in local.stdout.splitlines() if line.strip()][0].split()[-1]
    assert key in remote.stdout


def test_reading_a_url_fetches_the_tables_not_the_dump(store) -> None:
    # GIVEN a 19 MB dump of 8,192 lanes and 16 MiB of captured memory in the store
    endpoint, larger = store
    from postmortem.coredump import open_coredump
    from postmortem.summary import summarize
    from postmortem.urls import use_storage_options

    use_storage_options(["s3"], {"endpoint_url": endpoint})
    # WHEN the reader summarizes it and reads the faulting lanes' registers
    with open_coredump(f"s3://{BUCKET}/job-7/many_lanes.nvcudmp") as dump:
        summary = summarize(dump)
        fetched, size = dump.file.bytes_fetched, dump.file_size
        assert dump.file.requests < 40
    with open_coredump(larger) as local_dump:
        expected = summarize(local_dump)
    # THEN it says what the local file says, having read a small part of it
    assert size == larger.stat().st_size
    assert summary.faults == expected.faults
    assert fetched < size // 4, f"{fetched:,} of {size:,} bytes fetched"


def test_a_dask_task_past_its_time_limit_names_the_object_with_its_size(store) -> None:
    # GIVEN a dump in the store, and no time at all to analyze it
    endpoint, larger = store
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.fleet.signature import load_rules
    from postmortem.scan.engines.dask_cluster import scan_task
    from postmortem.scan.work.worker import WorkOptions
    from postmortem.urls import use_storage_options

    use_storage_options(["s3"], {"endpoint_url": endpoint})
    url = f"s3://{BUCKET}/job-7/many_lanes.nvcudmp"
    # WHEN a Dask task scans it
    row = scan_task(url, url, WorkOptions(AnalyzeOptions(cuda_gdb=False), load_rules()), 0.0)
    # THEN its timeout row names the object, with its size and version in the store
    assert (row.status, row.path) == ("timeout", url)
    assert row.size_bytes == larger.stat().st_size
    assert row.fingerprint is not None and row.fingerprint.startswith(f"object|{url}|")


def test_a_missing_object_is_one_line_and_exit_2(store) -> None:
    endpoint, _ = store
    result = _postmortem(endpoint, "info", f"s3://{BUCKET}/job-7/nothing.nvcudmp")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: s3://{BUCKET}/job-7/nothing.nvcudmp: cannot read: no such object"
    ]


def test_debug_refuses_a_url_in_one_line(store) -> None:
    endpoint, _ = store
    result = _postmortem(endpoint, "debug", f"s3://{BUCKET}/job-7/oob_store.nvcudmp")
    assert result.returncode == 2
    assert "cuda-gdb reads local files" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_bad_storage_option_is_refused(store) -> None:
    endpoint, _ = store
    result = _postmortem(endpoint, "info", "s3://x/y", "--storage-option", "novalue")
    assert result.returncode == 2
    assert "KEY=VALUE" in result.stderr


def test_a_file_url_is_a_local_path() -> None:
    local = DUMPS / "oob_store.nvcudmp"
    result = invoke("info", f"file://{local}", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert str(local) in result.stdout or local.name in result.stdout


def test_dump_url_keeps_its_url_through_path_operations() -> None:
    from postmortem.urls import DumpUrl, as_dump_path

    url = as_dump_path("gs://bucket/a/core_h.1.2.nvcudmp")
    assert isinstance(url, DumpUrl)
    assert str(url) == "gs://bucket/a/core_h.1.2.nvcudmp"
    assert url.name == "core_h.1.2.nvcudmp"
    assert str(url.parent) == "gs://bucket/a"
    assert str(url.with_suffix(".md")) == "gs://bucket/a/core_h.1.2.md"
    with pytest.raises(TypeError):
        os.fspath(url)
    assert as_dump_path("file:///data/x.nvcudmp") == Path("/data/x.nvcudmp")


def test_a_compressed_object_is_streamed_once(store) -> None:
    endpoint, _ = store
    from postmortem.coredump import open_coredump
    from postmortem.urls import use_storage_options

    use_storage_options(["s3"], {"endpoint_url": endpoint})
    name = "oob_store_gzip.nvcudmp.gz"
    with open_coredump(f"s3://{BUCKET}/job-7/{name}") as dump:
        assert dump.codec == "gzip"
        assert dump.file.bytes_fetched == (DUMPS / name).stat().st_size
        assert not dump.file.sparse


def _dump_lines(path: Path) -> dict[str, dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {Path(str(r["path"])).name: r for r in rows if r["type"] == "dump"}


def test_scan_of_a_prefix_groups_as_a_local_scan_and_caches_by_version(store, tmp_path) -> None:
    # GIVEN the dumps of a job in the store, and the same files on disk
    endpoint, larger = store
    local = tmp_path / "job-7"
    (local / "rank3").mkdir(parents=True)
    for name in ("oob_store.nvcudmp", "oob_store_gzip.nvcudmp.gz", "hang_barrier.nvcudmp"):
        (local / name).write_bytes((DUMPS / name).read_bytes())
    (local / "many_lanes.nvcudmp").write_bytes(larger.read_bytes())
    (local / "rank3" / "blob.bin").write_bytes((DUMPS / "device_assert.nvcudmp").read_bytes())
    cache = tmp_path / "cache.sqlite"
    # WHEN both are scanned, the store's twice with one cache
    remote_lines, local_lines = tmp_path / "remote.jsonl", tmp_path / "local.jsonl"
    first = _postmortem(
        endpoint, "scan", f"s3://{BUCKET}/job-7", "--jsonl", str(remote_lines),
        "--cache", str(cache), "-j", "2",
    )  # fmt: skip
    local_scan = invoke("scan", local, "--jsonl", local_lines, "--no-cache", "-j", "2", cwd=ROOT)
    assert local_scan.returncode == 0, local_scan.stderr
    again = _postmortem(
        endpoint, "scan", f"s3://{BUCKET}/job-7", "--jsonl", str(tmp_path / "again.jsonl"),
        "--cache", str(cache),
    )  # fmt: skip
    # THEN the rows and signatures are the local scan's, every dump by its URL
    assert first.returncode == 0, first.stderr
    remote, expected = _dump_lines(remote_lines), _dump_lines(local_lines)
    assert sorted(remote) == sorted(expected) == [
        "blob.bin", "hang_barrier.nvcudmp", "many_lanes.nvcudmp", "oob_store.nvcudmp",
        "oob_store_gzip.nvcudmp.gz",
    ]  # fmt: skip
    for name, row in remote.items():
        assert str(row["path"]).startswith(f"s3://{BUCKET}/job-7/"), row["path"]
        assert row["status"] == expected[name]["status"] == "ok"
        assert row["signature"] == expected[name]["signature"]
        assert row["size_bytes"] == expected[name]["size_bytes"]
    # and the second scan takes every row from the cache
    assert again.returncode == 0, again.stderr
    assert "5 from the cache" in again.stdout
    assert all(row["cached"] for row in _dump_lines(tmp_path / "again.jsonl").values())


def test_scan_of_a_missing_bucket_is_an_error_row(store, tmp_path) -> None:
    endpoint, _ = store
    lines = tmp_path / "rows.jsonl"
    result = _postmortem(endpoint, "scan", "s3://no-such-bucket/x", "--jsonl", str(lines))
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    dumps = [r for r in rows if r["type"] == "dump"]
    assert len(dumps) == 1 and dumps[0]["status"] == "error", result.stderr
    assert dumps[0]["path"] == "s3://no-such-bucket/x"


@pytest.mark.slow
def test_a_dask_scan_of_a_prefix_reads_the_store_on_the_workers(store, tmp_path) -> None:
    # GIVEN a Dask cluster whose workers know nothing of the store's endpoint
    endpoint, _ = store
    require_module("distributed", "postmortem[dask] runs scans on a Dask cluster")
    cluster = _cluster_without("FSSPEC_S3")
    # WHEN the prefix is scanned on it, with the endpoint given on the command line
    result, lines = _dask_scan(endpoint, cluster, tmp_path)
    # THEN every dump is read and signed on the worker
    assert result.returncode == 0, result.stderr
    rows = _dump_lines(lines)
    assert len(rows) == 5
    assert all(row["status"] == "ok" and row["signature"] for row in rows.values()), rows


def test_analyze_of_several_urls_is_one_incident(store) -> None:
    endpoint, _ = store
    urls = [f"s3://{BUCKET}/job-7/{n}" for n in ("oob_store.nvcudmp", "hang_barrier.nvcudmp")]
    result = _postmortem(endpoint, "analyze", *urls, "--format", "json", "--no-gdb")
    assert result.returncode == 0, result.stderr
    incident = json.loads(result.stdout)
    rows = {row["path"]: row for row in incident["dumps"]}
    assert sorted(rows) == sorted(urls)
    assert rows[urls[0]]["role"] == "first-fault"
    assert rows[urls[0]]["time_source"] == "mtime"  # the store's time: no metadata stamp
    assert rows[urls[0]]["time"] is not None


def test_an_object_replaced_while_it_is_read_gives_no_report(store) -> None:
    # GIVEN a dump in the store, opened and read in part
    endpoint, _ = store
    import s3fs

    from postmortem.coredump import open_coredump
    from postmortem.errors import UnreadableFile
    from postmortem.summary import summarize
    from postmortem.urls import use_storage_options

    use_storage_options(["s3"], {"endpoint_url": endpoint})
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
    key = f"{BUCKET}/changing/core.nvcudmp"
    fs.put(str(DUMPS / "oob_store.nvcudmp"), key)
    with open_coredump(f"s3://{key}") as dump:
        summarize(dump)
        dump.file.check_unchanged()  # the same object: nothing to say
        # WHEN another dump replaces it before the reading is done
        fs.put(str(DUMPS / "hang_barrier.nvcudmp"), key)
        # THEN the read is refused, naming both versions
        with pytest.raises(UnreadableFile, match="changed while read"):
            dump.file.check_unchanged()


def test_an_empty_object_named_like_a_dump_is_a_row(store, tmp_path) -> None:
    # GIVEN a prefix with an empty object named like a dump and an empty one that is not
    endpoint, _ = store
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
    fs.pipe(f"{BUCKET}/empties/core_host.42.1764201600.nvcudmp", b"")
    fs.pipe(f"{BUCKET}/empties/notes.txt", b"")
    lines = tmp_path / "rows.jsonl"
    # WHEN the prefix is scanned
    _postmortem(endpoint, "scan", f"s3://{BUCKET}/empties/", "--no-cache", "--jsonl", str(lines))
    # THEN the empty dump is an error row that says so, and the other object is no row
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    (row,) = [r for r in rows if r["type"] == "dump"]
    assert row["path"].endswith("core_host.42.1764201600.nvcudmp")
    assert row["status"] == "error" and "empty" in row["error"]


@pytest.mark.slow
def test_dask_workers_without_the_store_s_credentials_are_named_as_the_cause(store, tmp_path):
    # GIVEN a Dask cluster whose workers were started without the store's credentials
    endpoint, _ = store
    require_module("distributed", "postmortem[dask] runs scans on a Dask cluster")
    cluster = _cluster_without("FSSPEC_S3", *CREDENTIALS)
    # WHEN a prefix is scanned there from a client that has them
    result, lines = _dask_scan(endpoint, cluster, tmp_path)
    # THEN the dumps are error rows, and one warning says it is the workers' environment
    rows = _dump_lines(lines)
    assert rows and all(row["status"] == "error" for row in rows.values()), rows
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    assert f"{len(rows)} dump(s) could not be read on the Dask workers" in warnings[0]
    assert "with their own environment" in warnings[0]


def _cluster_without(*names: str):
    """A one-worker local Dask cluster whose worker processes lack these variables."""
    from distributed import LocalCluster

    saved = {name: os.environ.pop(name, None) for name in names}
    try:
        return LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        )  # fmt: skip
    finally:
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def _dask_scan(endpoint: str, cluster, tmp_path: Path):
    """`scan` of the job's prefix on `cluster` (closed after): the run and its JSON lines. A
    subprocess: the client sends the workers the FSSPEC_ variables of its own environment."""
    with cluster:
        lines = tmp_path / "dask.jsonl"
        result = _postmortem_process(
            endpoint, "scan", f"s3://{BUCKET}/job-7", "--engine", "dask", "--scheduler",
            cluster.scheduler_address, "--jsonl", str(lines), "--no-cache",
        )  # fmt: skip
    return result, lines
