"""The hostile inputs besides dumps: what a user, a repository or a discovered folder hands the
commands (settings found by walking up, logs beside dumps, host logs, CODEOWNERS, rules, the
scan cache, a coredump pipe swapped while `trigger` waits), each as one whole command.

Each case makes its inputs under a folder of its own and returns the command, where it runs,
and a check of what it printed and left behind (None: the check holds; else what is wrong).
`bench_hostile.py --inputs-only` runs them; the tests of each case are named beside it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMPS = ROOT / "fixtures" / "dumps"
DUMP = DUMPS / "oob_store.nvcudmp"
SCAN = ("--no-disasm", "--no-gdb")


@dataclass
class Run:
    argv: list[str]
    cwd: Path
    check: Callable[[str, str, int], str | None]
    """(stdout, stderr, exit status) → None when the case holds, else what went wrong."""
    during: Callable[[], None] | None = None
    """Something done while the command runs (in a thread): a swap, a writer."""
    after: Callable[[], None] | None = None


def _folder_with_dump(base: Path) -> Path:
    folder = base / "dumps"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(DUMP, folder / DUMP.name)
    return folder


def _exit(*allowed: int) -> Callable[[str, str, int], str | None]:
    def check(out: str, err: str, code: int) -> str | None:
        if code not in allowed:
            return f"exit {code}, wanted {allowed}"
        if "Traceback" in err:
            return "a traceback"
        return None

    return check


def trigger_swap(base: Path) -> Run:
    """tests/unit/test_trigger_pipe.py: the FIFO becomes a regular file while trigger waits."""
    pipe = base / "corepipe"
    os.mkfifo(pipe)
    content = b"the user's file\n" * 64
    digest = hashlib.sha256(content).hexdigest()

    def swap() -> None:
        time.sleep(1.0)
        spare = base / "spare"
        spare.write_bytes(content)
        os.replace(spare, pipe)

    def check(out: str, err: str, code: int) -> str | None:
        if hashlib.sha256(pipe.read_bytes()).hexdigest() != digest:
            return "the swapped-in file was written"
        return _exit(2, 5)(out, err, code)

    return Run(["trigger", str(pipe), "--timeout", "3"], base, check, swap)


def logs_beside(base: Path) -> Run:
    """tests/unit/test_scan_beside.py: 300 one-MiB logs beside one dump."""
    folder = _folder_with_dump(base)
    line = b"INFO step done\n" * (1 << 16)
    for n in range(300):
        (folder / f"worker{n}.log").write_bytes(line)
    return Run(["scan", str(folder), "--no-cache", *SCAN, "-o", str(base / "i.txt")], base,
               _exit(0))  # fmt: skip


def pyproject_3gib(base: Path) -> Run:
    """tests/unit/test_config.py: a sparse 3 GiB pyproject.toml above the current folder."""
    inner = base / "project" / "work"
    inner.mkdir(parents=True)
    with (base / "project" / "pyproject.toml").open("wb") as file:
        file.truncate(3 << 30)
    return Run(["info", str(DUMP)], inner, _exit(0))


def _fifo(base: Path, name: str) -> Path:
    path = base / name
    os.mkfifo(path)
    return path


def host_log_fifo(base: Path) -> Run:
    """tests/unit/test_log_tail.py: a host log that is a FIFO nobody writes."""
    folder = _folder_with_dump(base)
    fifo = _fifo(base, "kernel.log")
    return Run(["scan", str(folder), "--no-cache", *SCAN, "--host-log", str(fifo), "-o",
                str(base / "i.txt")], base, _exit(2))  # fmt: skip


def host_log_endless(base: Path) -> Run:
    """tests/unit/test_scan_xid.py: `<(yes 'NVRM: Xid …')`, a pipe that never ends."""
    folder = _folder_with_dump(base)
    fifo = _fifo(base, "kernel.log")
    writer: list[subprocess.Popen[bytes]] = []

    def write() -> None:
        with fifo.open("wb") as out:
            line = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n"
            writer.append(subprocess.Popen(["yes", line.strip()], stdout=out))

    def stop() -> None:
        for process in writer:
            process.kill()
            process.wait()

    return Run(["scan", str(folder), "--no-cache", *SCAN, "--host-log", str(fifo), "-o",
                str(base / "i.txt")], base, _exit(0), write, stop)  # fmt: skip


def host_log_huge_line(base: Path) -> Run:
    """tests/unit/test_scan_xid.py: a 1 GiB log of one line."""
    folder = _folder_with_dump(base)
    log = base / "kernel.log"
    with log.open("wb") as file:
        file.truncate(1 << 30)
    return Run(["scan", str(folder), "--no-cache", *SCAN, "--host-log", str(log), "-o",
                str(base / "i.txt")], base, _exit(0))  # fmt: skip


def host_log_xids(base: Path) -> Run:
    """tests/unit/test_scan_xid.py: a 90 MB kernel log of 10^6 Xid lines."""
    folder = _folder_with_dump(base)
    log = base / "kernel.log"
    with log.open("w") as out:
        for n in range(1_000_000):
            out.write(f"[{n}.000000] NVRM: Xid (PCI:0000:{n % 8 + 0x18:02x}:00): "
                      f"{(13, 31, 43, 79)[n % 4]}, pid={n}, name=python\n")  # fmt: skip
    return Run(["scan", str(folder), "--no-cache", *SCAN, "--host-log", str(log), "-o",
                str(base / "i.txt")], base, _exit(0))  # fmt: skip


def codeowners_stars(base: Path) -> Run:
    """tests/unit/test_scan_owners.py: CODEOWNERS rules of many stars."""
    folder = _folder_with_dump(base)
    owners = base / "CODEOWNERS"
    owners.write_text("".join(f"{'*a' * 13}*b{n} @team\n" for n in range(2_000)))
    return Run(["scan", str(folder), "--no-cache", *SCAN, "--owners", str(owners), "-o",
                str(base / "i.txt")], base, _exit(0))  # fmt: skip


def rules_200k(base: Path) -> Run:
    """tests/unit/test_signature.py: a rules file of 200,000 library paths."""
    import json

    folder = _folder_with_dump(base)
    rules = json.loads((ROOT / "postmortem/analysis/fleet/signature_rules.json").read_text())
    rules["library_paths"] = [f"*x*y*z*{n}/*" for n in range(200_000)]
    path = base / "rules.json"
    path.write_text(json.dumps(rules))
    return Run(["scan", str(folder), "--no-cache", *SCAN, "--rules", str(path), "-o",
                str(base / "i.txt")], base, _exit(0))  # fmt: skip


def source_dirs_100k(base: Path) -> Run:
    """tests/unit/test_config.py: a project's file that sets 100,000 source-dirs."""
    project = base / "project"
    project.mkdir()
    dirs = ", ".join(f'"src{n}"' for n in range(100_000))
    (project / "pyproject.toml").write_text(f"[tool.postmortem]\nsource-dirs = [{dirs}]\n")
    return Run(["analyze", "--no-gdb", "--no-disasm", str(DUMP)], project, _exit(0))


def secrets_with_a_space(base: Path) -> Run:
    """tests/unit/test_redact.py: secret flags written with a space reach no report."""
    log = base / "server.log"
    secrets = ("sk-live-4f9a8b7c6d5e", "hunter2-prod", "glpat-abcdefghij0123456789")
    log.write_text(
        f"python -m sglang.launch_server --api-key {secrets[0]} --password {secrets[1]}\n"
        f"GITLAB_TOKEN={secrets[2]}\nRuntimeError: CUDA error: an illegal memory access\n"
    )

    def check(out: str, err: str, code: int) -> str | None:
        leaked = [s for s in secrets if s in out or s in err]
        return f"leaked {leaked}" if leaked else _exit(0)(out, err, code)

    return Run(["analyze", "--no-gdb", "--no-disasm", str(DUMP), "--host-log", str(log)],
               base, check)  # fmt: skip


def lost_lane_table(base: Path) -> Run:
    """tests/unit/test_lost_lanes.py: a dump whose lane tables are zero-filled."""
    sys.path.insert(0, str(ROOT))
    from elftools.elf.elffile import ELFFile

    path = base / "zeroed.nvcudmp"
    data = bytearray((DUMPS / "oob_store_r580.nvcudmp").read_bytes())
    with (DUMPS / "oob_store_r580.nvcudmp").open("rb") as file:
        for section in ELFFile(file).iter_sections():
            if section.name.startswith(".cudbg.lntbl"):
                start, size = section["sh_offset"], section["sh_size"]
                data[start : start + size] = bytes(size)
    path.write_bytes(bytes(data))

    def check(out: str, err: str, code: int) -> str | None:
        if "(None" in out or "exception 0)" in out:
            return "a lost exception reported as None / exception 0"
        return _exit(0, 1)(out, err, code)

    return Run(["analyze", "--no-gdb", "--no-disasm", str(path)], base, check)


def cache_locked(base: Path) -> Run:
    """tests/fixtures/test_scan_cache_lock.py: the scan cache locked by another process."""
    folder = _folder_with_dump(base)
    cache = base / "cache.sqlite"
    sqlite3.connect(cache).close()
    script = (
        "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(30)"
    )
    process = subprocess.Popen([sys.executable, "-c", script, str(cache)], stdout=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.readline()

    def stop() -> None:
        process.kill()
        process.wait()

    return Run(["scan", str(folder), *SCAN, "--cache", str(cache), "-o", str(base / "i.txt")],
               base, _exit(0), None, stop)  # fmt: skip


def cache_future(base: Path) -> Run:
    """tests/fixtures/test_scan_cache_lock.py: a cache of a newer schema is refused untouched."""
    folder = _folder_with_dump(base)
    cache = base / "cache.sqlite"
    with sqlite3.connect(cache) as connection:
        connection.execute("PRAGMA user_version = 99")
        connection.execute("CREATE TABLE rows (key TEXT)")
    digest = hashlib.sha256(cache.read_bytes()).hexdigest()

    def check(out: str, err: str, code: int) -> str | None:
        if hashlib.sha256(cache.read_bytes()).hexdigest() != digest:
            return "the newer cache was rewritten"
        return _exit(0, 2)(out, err, code)

    return Run(["scan", str(folder), *SCAN, "--cache", str(cache), "-o", str(base / "i.txt")],
               base, check)  # fmt: skip


def known_crashes_nested(base: Path) -> Run:
    """tests/unit/test_known_crashes.py: a known-crashes file of deeply nested arrays (the TOML
    parser recurses) is refused in one line, and a scan with it writes nothing."""
    folder = _folder_with_dump(base)
    known = base / "known-crashes.toml"
    known.write_text("[crash.aaaaaaaaaaaa]\nstate = " + "[" * 200_000 + "]" * 200_000 + "\n")

    def check(out: str, err: str, code: int) -> str | None:
        if (base / "i.txt").exists():
            return "an index was written"
        return _exit(2)(out, err, code) or (None if "known-crashes.toml" in err else err)

    return Run(["scan", str(folder), *SCAN, "--no-cache", "--known", str(known), "-o",
                str(base / "i.txt")], base, check)  # fmt: skip


def triage_scan_endless_line(base: Path) -> Run:
    """tests/unit/test_known_crashes.py: `triage --scan` of a 2 GiB file with no newline
    (sparse) is read a line at a time within its cap, and the known-crashes file untouched."""
    lines = base / "rows.jsonl"
    with lines.open("wb") as file:
        file.truncate(2 << 30)
    known = base / "known.toml"
    known.write_text("# ours\n")

    def check(out: str, err: str, code: int) -> str | None:
        if known.read_text() != "# ours\n":
            return "the known-crashes file was changed"
        return _exit(2)(out, err, code)

    return Run(["triage", "resolve", "aaaaaaaaaaaa", "--scan", str(lines), "--file", str(known)],
               base, check)  # fmt: skip


INPUT_CASES: dict[str, Callable[[Path], Run]] = {
    "input:trigger-pipe-swapped-for-a-file": trigger_swap,
    "input:300-logs-beside-a-dump": logs_beside,
    "input:pyproject-3GiB-above": pyproject_3gib,
    "input:host-log-fifo-no-writer": host_log_fifo,
    "input:host-log-endless-pipe": host_log_endless,
    "input:host-log-1GiB-line": host_log_huge_line,
    "input:host-log-10^6-xids": host_log_xids,
    "input:codeowners-13-stars": codeowners_stars,
    "input:rules-200k-library-paths": rules_200k,
    "input:pyproject-100k-source-dirs": source_dirs_100k,
    "input:secret-flags-with-a-space": secrets_with_a_space,
    "input:lane-tables-zero-filled": lost_lane_table,
    "input:scan-cache-locked": cache_locked,
    "input:scan-cache-newer-schema": cache_future,
    "input:known-crashes-nested-200k": known_crashes_nested,
    "input:triage-scan-2GiB-line": triage_scan_endless_line,
}


def run_case(make: Callable[[Path], Run], base: Path) -> tuple[float, int, int, str, str | None]:
    """Seconds, peak RSS of the command (bytes), exit status, first stderr line, and what went
    wrong (None: nothing)."""
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    case = make(base)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "postmortem", *case.argv], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=case.cwd,
        env=os.environ | {"NO_COLOR": "1", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if case.during is not None:
        threading.Thread(target=case.during, daemon=True).start()
    assert proc.stdout is not None and proc.stderr is not None
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    seconds = time.perf_counter() - started
    if case.after is not None:
        case.after()
    out = b"".join(chunks).decode("utf-8", "replace")
    text_err = err.decode("utf-8", "replace")
    first = next((line for line in text_err.splitlines() if line.strip()), "")
    return (
        seconds,
        usage.ru_maxrss * 1024,
        proc.returncode,
        first,
        case.check(out, text_err, proc.returncode),
    )
