"""Benchmark: dumps read from an object store, by ranges, against the same dumps on disk.

Starts an S3-compatible server on the loopback address (moto's, as the tests do), uploads
the committed fixture dumps and a larger synthetic one (fixtures/builder/large.py: N lanes,
r400 rows, and M bytes of captured global memory), then, for each dump, runs the native
reader and the whole analysis (no cuda-gdb: it reads local files only) in this process on
the URL and on the local file. It prints the bytes transferred and the requests per dump
against the dump's size (what a scan's worker reads of each dump; discovery adds one 4 KiB
ranged read per object), and the time of the remote analysis next to the local one. Then
it times two whole `postmortem scan` commands, one of the bucket and one of the same files
on disk (no cache, -j 2).

    python bench/bench_remote.py [--lanes N] [--global-mib M]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump  # noqa: E402
from postmortem.analysis.fault.fault import LocalizeOptions  # noqa: E402
from postmortem.urls import use_storage_options  # noqa: E402

BUCKET = "bench"
OPTIONS = AnalyzeOptions(LocalizeOptions(), cuda_gdb=False)


def _transfer(url: str) -> tuple[int, int]:
    """Bytes fetched and requests made by one whole analysis of `url`, as its report's
    provenance states them ("read by ranges from the store: F of S bytes in N requests")."""
    note = analyze_dump(_as_path(url), OPTIONS).provenance[0].note or ""
    fetched = int(note.split(": ", 1)[1].split(" of ")[0].replace(",", ""))
    requests = int(note.rsplit(" in ", 1)[1].split()[0])
    return fetched, requests


def _as_path(url: str) -> Path:
    from postmortem.urls import as_dump_path

    return as_dump_path(url)


def _seconds(target: str | Path) -> float:
    started = time.perf_counter()
    analyze_dump(_as_path(str(target)), OPTIONS)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=16_384)
    parser.add_argument("--global-mib", type=int, default=256)
    args = parser.parse_args()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    use_storage_options(["s3"], {"endpoint_url": endpoint})
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint)
    fs.mkdir(BUCKET)
    with tempfile.TemporaryDirectory(prefix="postmortem-bench-") as scratch:
        large = Path(scratch) / "large.nvcudmp"
        subprocess.run(
            [sys.executable, str(ROOT / "fixtures" / "builder" / "large.py"), str(large),
             "--layout", "r400", "--lanes", str(args.lanes),
             "--global-bytes", str(args.global_mib << 20)],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        dumps = sorted((ROOT / "fixtures" / "dumps").glob("*.nvcudmp*")) + [large]
        print(f"{'dump':44s} {'size':>12s} {'fetched':>12s} {'share':>7s} {'reqs':>5s} "
              f"{'remote s':>9s} {'local s':>8s}")  # fmt: skip
        total_size = total_fetched = 0
        remote_seconds = local_seconds = 0.0
        for dump in dumps:
            url = f"s3://{BUCKET}/{dump.name}"
            fs.put(str(dump), url)
            fetched, requests = _transfer(url)
            remote, local = _seconds(url), _seconds(dump)
            total_size += dump.stat().st_size
            total_fetched += fetched
            remote_seconds += remote
            local_seconds += local
            share = fetched / dump.stat().st_size
            print(f"{dump.name[:44]:44s} {dump.stat().st_size:12,d} {fetched:12,d} "
                  f"{share:7.1%} {requests:5d} {remote:9.2f} {local:8.2f}")  # fmt: skip
        print(f"\n{len(dumps)} dumps: {total_fetched:,} of {total_size:,} bytes fetched "
              f"({total_fetched / total_size:.2%}); analysis {remote_seconds:.1f} s from the "
              f"store, {local_seconds:.1f} s from disk")  # fmt: skip
        local_folder = Path(scratch) / "corpus"
        local_folder.mkdir()
        for dump in dumps:
            (local_folder / dump.name).write_bytes(dump.read_bytes())
        remote_scan = _scan(f"s3://{BUCKET}", "--storage-option", f"endpoint_url={endpoint}")
        local_scan = _scan(str(local_folder))
        print(f"postmortem scan of the bucket: {remote_scan:.1f} s; of the same files on disk: "
              f"{local_scan:.1f} s (whole commands, no cache, -j 2)")  # fmt: skip
    server.stop()


def _scan(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "postmortem", "scan", *args, "--no-cache", "-j", "2"],
        check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
