"""Benchmark: the hostile dumps and host logs of the security campaign, as whole commands.

Rebuilds each case from its description (in bench/out/hostile/, in child processes), runs
`postmortem info` and `postmortem analyze --no-gdb` on it as a user would, and prints the
wall time, the peak RSS of the command, its exit status and first line of stderr. The bar
(issue: tolerant reading): every case within 5 s and 512 MiB, a clean one-line outcome.

The host-log cases (``host:<parser>-<case>``) are the 8 MB logs of crafted lines of
fixtures/builder/hostile_logs.py, each given to `postmortem analyze --no-gdb --host-log` over
the oob_store fixture dump; ``host:none`` is that command without a log, for reference.
The input cases (``input:…``, bench/hostile_inputs.py) are the other inputs a command reads:
settings found by walking up, logs beside dumps, host logs that are pipes or huge, CODEOWNERS,
rules, the scan cache, a coredump pipe swapped while `trigger` waits; each also checks what
the command printed and left behind (a secret leaked, a file written, a lost exception).

    python bench/bench_hostile.py [--only NAME] [--hosts-only | --dumps-only | --inputs-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from hostile_inputs import INPUT_CASES, run_case

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "hostile"
BUILDER = ROOT / "fixtures" / "builder"
DUMPS = ROOT / "fixtures" / "dumps"
_SHDR = struct.Struct("<IIQQQQIIQQ")
LOUSER = 0x80000000
MOD_TABLE, GRID_TABLE, CTA_TABLE, LN_TABLE = LOUSER + 16, LOUSER + 12, LOUSER + 13, LOUSER + 15


def _headers(data: bytes) -> tuple[int, list[list[int]]]:
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    count = struct.unpack_from("<H", data, 0x3C)[0] or _SHDR.unpack_from(data, shoff)[5]
    return shoff, [list(_SHDR.unpack_from(data, shoff + 64 * i)) for i in range(count)]


def _store(data: bytearray, shoff: int, headers: list[list[int]]) -> bytes:
    for i, fields in enumerate(headers):
        _SHDR.pack_into(data, shoff + 64 * i, *fields)
    return bytes(data)


def overlapping_tables(path: Path) -> None:
    """Every lane table of a 28 MB dump spans the whole file."""
    big = OUT / "large-50k.nvcudmp"
    if not big.exists():
        code = (
            f"import sys; sys.path.insert(0, {str(BUILDER)!r}); from large import "
            f"write_large_dump; write_large_dump({str(big)!r}, lanes=50_000, global_bytes=0)"
        )
        subprocess.run([sys.executable, "-c", code], check=True)
    data = bytearray(big.read_bytes())
    shoff, headers = _headers(data)
    for fields in headers:
        if fields[1] == LN_TABLE:
            fields[4], fields[5] = 0, len(data) // fields[9] * fields[9]
    path.write_bytes(_store(data, shoff, headers))


def cta_table_over_a_hole(path: Path) -> None:
    """A CTA table claims 3 GiB of a sparse hole."""
    data = bytearray((DUMPS / "oob_store.nvcudmp").read_bytes())
    shoff, headers = _headers(data)
    table = next(h for h in headers if h[1] == CTA_TABLE)
    table[4], table[5] = len(data), (3 << 30) // 24 * 24
    path.write_bytes(_store(data, shoff, headers))
    with path.open("r+b") as file:
        file.truncate(len(data) + (3 << 30))


def _deflate_zeros(out, total: int, head: bytes = b"") -> None:  # type: ignore[no-untyped-def]
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip container
    out.write(packer.compress(head))
    chunk = bytes(16 << 20)
    for _ in range(total // len(chunk)):
        out.write(packer.compress(chunk))
    out.write(packer.flush())


def gzip_bomb(path: Path) -> None:
    """A 10 MB gzip stream of 10 GiB of zeros."""
    with path.open("wb") as out:
        _deflate_zeros(out, 10 << 30)


def gzip_bomb_with_a_header(path: Path) -> None:
    """The same, behind the ELF header of a real CUDA dump: passes the first-chunk check."""
    head = (DUMPS / "oob_store.nvcudmp").read_bytes()[:64]
    with path.open("wb") as out:
        _deflate_zeros(out, 10 << 30, head)


def module_handle_zero(path: Path) -> None:
    """The module (and the grid that names it) has handle 0."""
    data = bytearray((DUMPS / "oob_store.nvcudmp").read_bytes())
    _, headers = _headers(data)
    for fields in headers:
        if fields[1] == MOD_TABLE:
            struct.pack_into("<Q", data, fields[4], 0)
        if fields[1] == GRID_TABLE:
            struct.pack_into("<Q", data, fields[4] + 32, 0)
    path.write_bytes(bytes(data))


CASES: dict[str, tuple[str, Callable[[Path], None]]] = {
    "overlapping-tables": ("overlap.nvcudmp", overlapping_tables),
    "cta-table-over-3GiB-hole": ("hole.nvcudmp", cta_table_over_a_hole),
    "gzip-10GiB-of-zeros": ("bomb.nvcudmp.gz", gzip_bomb),
    "gzip-header-then-10GiB-of-zeros": ("bomb-header.nvcudmp.gz", gzip_bomb_with_a_header),
    "module-handle-0": ("handle0.nvcudmp", module_handle_zero),
}


def _host_cases() -> dict[str, tuple[str, str] | None]:
    sys.path.insert(0, str(BUILDER))
    from hostile_logs import all_cases

    return {"host:none": None, **{f"host:{p}-{c}": (p, c) for p, c in all_cases()}}


HOST_CASES = _host_cases()


def _host_log(case: tuple[str, str]) -> Path:
    from hostile_logs import write_log

    path = OUT / "hostlogs" / f"{case[0]}-{case[1]}.log"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_log(path, *case)
    return path


def run(argv: list[str]) -> tuple[float, int, int, str]:
    """Seconds, peak RSS in bytes, exit status and first stderr line of one command."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
        env=os.environ | {"NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.stderr is not None
    err = proc.stderr.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    first = next((line for line in err.splitlines() if line.strip()), "")
    return seconds, usage.ru_maxrss * 1024, proc.returncode, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", choices=sorted([*CASES, *HOST_CASES, *INPUT_CASES])
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--hosts-only", action="store_true", help="only the host-log cases")
    which.add_argument("--dumps-only", action="store_true", help="only the dump cases")
    which.add_argument("--inputs-only", action="store_true", help="only the input cases")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    postmortem = [sys.executable, "-m", "postmortem"]
    print(f"{'case':40} {'command':8} {'seconds':>8} {'peak RSS':>10} exit  first line of stderr")
    worst_seconds, worst_rss = 0.0, 0
    runs: list[tuple[str, str, list[str]]] = []
    for name, (file, make) in CASES.items():
        if (args.only and name not in args.only) or args.hosts_only or args.inputs_only:
            continue
        path = OUT / file
        if not path.exists():
            make(path)
        shown = str(path.relative_to(ROOT))
        runs += [
            (name, command[0], [*command, shown]) for command in (["info"], ["analyze", "--no-gdb"])
        ]
    dump = str((DUMPS / "oob_store.nvcudmp").relative_to(ROOT))
    for name, case in HOST_CASES.items():
        if (args.only and name not in args.only) or args.dumps_only or args.inputs_only:
            continue
        log = ["--host-log", str(_host_log(case).relative_to(ROOT))] if case else []
        runs.append((name, "analyze", ["analyze", "--no-gdb", dump, *log]))
    for name, command, argv in runs:
        seconds, rss, code, first = run([*postmortem, *argv])
        worst_seconds, worst_rss = max(worst_seconds, seconds), max(worst_rss, rss)
        print(f"{name:40} {command:8} {seconds:8.2f} {rss / 2**20:8.0f} MiB {code:4}  "
              f"{first[:90]}", flush=True)  # fmt: skip
    failed = 0
    for name, make in INPUT_CASES.items():
        if (args.only and name not in args.only) or args.dumps_only or args.hosts_only:
            continue
        seconds, rss, code, first, problem = run_case(make, OUT / "inputs" / name[6:])
        worst_seconds, worst_rss = max(worst_seconds, seconds), max(worst_rss, rss)
        failed += problem is not None
        verdict = f"FAILED: {problem}" if problem else first[:90]
        print(f"{name:40} {'':8} {seconds:8.2f} {rss / 2**20:8.0f} MiB {code:4}  {verdict}",
              flush=True)  # fmt: skip
    if failed:
        print(f"{failed} input case(s) failed their check")
    print(f"worst: {worst_seconds:.2f} s, {worst_rss / 2**20:.0f} MiB "
          f"(bar: 5 s, 512 MiB); this script's own peak: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
