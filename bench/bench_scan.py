"""Benchmark: `postmortem scan` over 2,000 distinct generated dumps, cold -j1 and -j2, warm.

Generates N distinct dumps (default 2,000) in a temporary directory with the fixture
builder (bench/fleet.py: six faulting kernels, several PCs each, varied grids, lanes, SMs,
GPUs, hosts, driver generations, load addresses, and a quarter written by a producer whose
images nvdisasm refuses as dumped), under the driver's names ``core_%t_%h_%p.nvcudmp``
spread over a week; every 20th file (5 %) is broken instead: cut short, or its section
header offset pointed past the end. Then each scan runs in a fresh process (a signature
scan: no cuda-gdb, no per-dump reports):

1. cold, -j1, filling a new cache;  2. cold, -j2, filling another new cache;
3. warm, -j2, the cache of (2), every dump unchanged;
4. cold, -j1, no cache and nothing remembered, over the first 200 dumps only (it is slow):
   nvdisasm runs for every dump, as before a scan remembered each function's outcome.

A cold scan works out the instruction at each faulting PC once per (cubin content,
function) for all its workers, refusals included, and keeps it in the cache's code table.
It prints dumps/second, the -j2/-j1 scaling ratio, what remembering the functions saves, the
peak RSS of the scanning process and of its largest worker, and the warm re-scan time
against the cold one (scan time inside the process; process start-up shown apart).

With ``--remote M`` (default 200; 0: none), M of the dumps also go to an S3-compatible
server on the loopback address (moto's, as the tests use), and the bucket is scanned
cold at -j1 and -j2 (no cache); the bytes and requests each dump's row cost are counted
in this process over the same objects, against the dumps' sizes.

    python bench/bench_scan.py [--count N] [--remote M] [--keep DIR] [--copies]

``--copies`` generates the former corpus instead: copies of the committed fixture dumps.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "fixtures" / "dumps"
BUCKET = "bench-scan"
_WEEK_S = 7 * 86400
_BASE_TIME = 1_763_000_000


def generate_fleet(target: Path, count: int, seed: int = 29) -> dict[str, int]:
    """`count` distinct dumps in `target`, 5 % broken; returns how many of each kind."""
    sys.path.insert(0, str(ROOT / "bench"))
    from fleet import dump_bytes, random_fleet

    rng = random.Random(seed)
    kinds = {"good": 0, "broken": 0}
    for number, dump in enumerate(random_fleet(count, seed)):
        path = target / f"batch{number // 500:03d}" / dump.name
        path.parent.mkdir(exist_ok=True)
        data = dump_bytes(dump)
        if number % 20 == 19:
            _write_broken(path, rng, data)
            kinds["broken"] += 1
        else:
            path.write_bytes(data)
            kinds["good"] += 1
        os.utime(path, (dump.time, dump.time))
    return kinds


def generate(target: Path, count: int, seed: int = 6) -> dict[str, int]:
    """`count` copies of the fixture dumps in `target`, 5 % broken; how many of each kind."""
    rng = random.Random(seed)
    sources = sorted(p for p in FIXTURES.iterdir() if ".nvcudmp" in p.name)
    kinds = {"good": 0, "broken": 0}
    for number in range(count):
        source = sources[number % len(sources)]
        host, pid = f"gpu-node-{number % 40:02d}", 1000 + number
        when = _BASE_TIME + rng.randrange(_WEEK_S)
        suffix = ".gz" if source.name.endswith(".gz") else ""
        name = (
            f"core_{when}_{host}_{pid}.nvcudmp{suffix}",
            f"{host}.{pid}.{when}{suffix}",
            f"dump-{number:05d}.bin",
        )[number % 3]
        path = target / f"host{number % 40:02d}" / name
        path.parent.mkdir(exist_ok=True)
        if number % 20 == 19:
            _write_broken(path, rng)
            kinds["broken"] += 1
        else:
            shutil.copyfile(source, path)
            kinds["good"] += 1
        os.utime(path, (when, when))
    return kinds


def _write_broken(path: Path, rng: random.Random, data: bytes | None = None) -> None:
    data = data or (FIXTURES / "oob_store.nvcudmp").read_bytes()
    if rng.random() < 0.5:
        path.write_bytes(data[: rng.randrange(64, len(data) // 2)])
    else:
        broken = bytearray(data)
        broken[0x28:0x30] = (len(data) + 4096).to_bytes(8, "little")
        path.write_bytes(bytes(broken))


def child(args: argparse.Namespace) -> None:
    """One scan in this process; prints its figures as JSON."""
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.fleet.signature import load_rules
    from postmortem.scan.run import ScanOptions, run_scan
    from postmortem.scan.work.worker import WorkOptions

    work = WorkOptions(AnalyzeOptions(cuda_gdb=False), load_rules())
    cache = Path(args.cache) if args.cache else None
    options = ScanOptions(work, jobs=args.jobs, cache_path=cache, memo=not args.no_memo)
    root = Path(args.root)
    if args.root.startswith("s3://"):
        from postmortem.urls import as_dump_path, use_storage_options

        use_storage_options(["s3"], {"endpoint_url": args.endpoint})
        root = as_dump_path(args.root)
    started = time.perf_counter()
    result = run_scan([root], options)
    seconds = time.perf_counter() - started
    figures = {
        "seconds": seconds, "dumps": len(result.rows), "errors": len(result.errors),
        "groups": len(result.groups), "cache_hits": result.cache_hits,
        "rss_self_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "rss_workers_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    }  # fmt: skip
    print(json.dumps(figures))


def run_child(
    root: Path | str, jobs: int, cache: Path | None, memo: bool = True, endpoint: str = ""
) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", "--root", str(root), "--jobs", str(jobs)]
    argv += ["--cache", str(cache)] if cache else []
    argv += ["--endpoint", endpoint] if endpoint else []
    argv += [] if memo else ["--no-memo"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_seconds"] = time.perf_counter() - started
    return figures


def _line(label: str, run: dict[str, float]) -> str:
    rate = run["dumps"] / run["seconds"]
    return (
        f"  {label:<34} {run['seconds']:7.2f} s  {rate:7.1f} dumps/s  "
        f"({run['dumps']:.0f} dumps, {run['errors']:.0f} errors, {run['groups']:.0f} groups, "
        f"{run['cache_hits']:.0f} cache hits; process {run['process_seconds']:.2f} s)"
    )


_SPIN = "x = 0\nfor i in range(8_000_000):\n    x += i * i\n"


def machine_scaling() -> float:
    """How much more work two CPU-bound processes get done than one: the ceiling for -j2 on
    this machine (shared or throttled cores give less than 2). The median of five
    alternating one/two runs, as single runs are noisy on shared machines."""

    def wall(copies: int) -> float:
        start = time.perf_counter()
        spins = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(copies)]
        for spin in spins:
            spin.wait()
        return time.perf_counter() - start

    return statistics.median(2 * wall(1) / wall(2) for _ in range(5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--remote", type=int, default=200, help="dumps scanned from the store")
    parser.add_argument("--copies", action="store_true", help="copies of the fixture dumps")
    parser.add_argument("--keep", type=Path, help="generate into this directory and keep it")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the slow scan remembering nothing (4)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--no-memo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    work = Path(tempfile.mkdtemp(prefix="postmortem-bench-scan-"))
    root = args.keep or work / "dumps"
    try:
        root.mkdir(parents=True, exist_ok=True)
        kinds = (generate if args.copies else generate_fleet)(root, args.count)
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        fixtures = len(list(FIXTURES.glob("*.nvcudmp*")))
        what = f"copies of the {fixtures} fixture dumps" if args.copies else "distinct dumps"
        print(
            f"generated {args.count} dumps ({kinds['good']} {what}, {kinds['broken']} broken),"
            f" {size / 2**20:.1f} MiB; {os.cpu_count()} CPUs; no cuda-gdb, no reports"
        )
        report(root, work, baseline=not args.no_baseline)
        if args.remote:
            remote(root, args.remote)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(root: Path, work: Path, baseline: bool) -> None:
    j1 = run_child(root, 1, work / "j1" / "cache.sqlite")
    print(_line("cold -j1 (new cache)", j1))
    j2 = run_child(root, 2, work / "j2" / "cache.sqlite")
    print(_line("cold -j2 (new cache)", j2))
    warm = run_child(root, 2, work / "j2" / "cache.sqlite")
    print(_line("warm -j2 (unchanged dumps)", warm))
    runs = [j1, j2, warm]
    if baseline:
        few = work / "first200"
        few.mkdir()
        for dump in sorted(p for p in root.rglob("*") if p.is_file())[:200]:
            os.link(dump, few / dump.name)
        runs.append(run_child(few, 1, None, memo=False))
        print(_line("cold -j1, 200 dumps, nothing remembered", runs[-1]))
    scaling = j1["seconds"] / j2["seconds"]
    machine = machine_scaling()
    print(
        f"scaling -j2 / -j1: {scaling:.2f}x (2.00 is linear; on this machine two CPU-bound "
        f"processes get through {machine:.2f}x the work of one: the practical ceiling here)"
    )
    if baseline:
        rate = (j1["dumps"] / j1["seconds"]) / (runs[-1]["dumps"] / runs[-1]["seconds"])
        print(f"remembering each function: cold -j1 {rate:.1f}x more dumps/s with it")
    peak_self = max(r["rss_self_kib"] for r in runs) / 1024
    peak_worker = max(r["rss_workers_kib"] for r in runs) / 1024
    print(f"peak RSS: scanning process {peak_self:.0f} MiB, largest worker {peak_worker:.0f} MiB")
    ratio = j2["seconds"] / warm["seconds"]
    print(
        f"warm re-scan: {warm['seconds']:.3f} s vs cold {j2['seconds']:.2f} s: {ratio:.0f}x faster"
        f" (target >= 50x); with process start-up {warm['process_seconds']:.2f} s"
    )


def remote(root: Path, count: int) -> None:
    """Scan `count` of the dumps from a loopback S3 server; bytes and requests per dump."""
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        import s3fs

        fs = s3fs.S3FileSystem(endpoint_url=endpoint)
        fs.mkdir(BUCKET)
        dumps = sorted(p for p in root.rglob("*.nvcudmp") if p.is_file())[:count]
        for dump in dumps:
            fs.put(str(dump), f"s3://{BUCKET}/{dump.name}")
        size = sum(d.stat().st_size for d in dumps)
        print(f"object store (moto on the loopback address): {len(dumps)} of the dumps, "
              f"{size / 2**20:.1f} MiB")  # fmt: skip
        for jobs in (1, 2):
            run = run_child(f"s3://{BUCKET}", jobs, None, endpoint=endpoint)
            print(_line(f"store, cold -j{jobs} (no cache)", run))
        fetched, requests = _transfer(dumps, endpoint)
        print(
            f"  per dump: {fetched / len(dumps):,.0f} bytes in {requests / len(dumps):.1f} "
            f"requests for its row ({fetched / size:.1%} of the dumps' bytes; discovery adds "
            "one ranged read of the first 4 KiB per object)"
        )
    finally:
        server.stop()


def _transfer(dumps: list[Path], endpoint: str) -> tuple[int, int]:
    """Bytes and requests the rows of `dumps`, read from the bucket, cost in all."""
    import postmortem.scan.work.lean as lean
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.scan.work.instruction import InstructionMemo
    from postmortem.urls import as_dump_path, use_storage_options

    use_storage_options(["s3"], {"endpoint_url": endpoint})
    files = []
    real = lean.open_coredump

    def spy(path: Path) -> object:
        core = real(path)
        files.append(core.file)
        return core

    lean.open_coredump = spy  # type: ignore[assignment]
    memo = InstructionMemo(None)
    from postmortem.errors import PostmortemError

    for dump in dumps:  # a broken dump's bytes count too: the scan reads them to say so
        with contextlib.suppress(PostmortemError):
            url = as_dump_path(f"s3://{BUCKET}/{dump.name}")
            lean.lean_analysis(url, AnalyzeOptions(cuda_gdb=False), memo)
    lean.open_coredump = real
    return sum(f.bytes_fetched for f in files), sum(f.requests for f in files)


if __name__ == "__main__":
    main()
