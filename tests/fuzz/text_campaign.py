"""The fuzz campaign of the text inputs: host logs and settings files.

`python -m tests.fuzz.text_campaign -n 100000 --seed 1` (`make fuzz` runs it after the dump
campaign). Each case is rebuilt from (target, seed, index) alone, so a failure prints the
command that replays it (`--replay TARGET SEED INDEX`).

- `hostlog`: a mutant of a published excerpt (fixtures/hostlogs/) or a crafted log
  (fixtures/builder/hostile_logs.py), mutated knowing the formats: lines spliced from other
  logs, dropped, repeated, reordered, cut, unindented; numbers in the fields the parsers read
  (Xid codes, PCs, addresses, coordinates, shapes, counts) made huge, negative or hex garbage;
  markers repeated; NUL, bidirectional controls and long runs inserted. Every parser must
  return without raising. One case in `JOIN_EVERY` also joins the log to a fixture dump
  (`analyze_dump`, no tools) and renders the report in every format: only a
  `PostmortemError` may come out.
- `config`: a user file and a project's `pyproject.toml`, mutated knowing the keys (wrong
  types, unknown keys, deep nesting, huge and broken strings, duplicate keys,
  `trusted-projects` in the project's table, tool paths). `load_settings` may raise only
  `ConfigError`; and a project's `nvdisasm` or `cuda-gdb` is never taken unless the user's
  file trusts the project.

A case slower than `--limit-s` is a failure too. Exit status 1 when any case failed.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from postmortem.errors import ConfigError, PostmortemError

ROOT = Path(__file__).resolve().parent.parent.parent
HOSTLOGS = ROOT / "fixtures" / "hostlogs"
DUMP = ROOT / "fixtures" / "dumps" / "oob_store.nvcudmp"
JOIN_EVERY = 200
REPLAY = ".venv/bin/python -m tests.fuzz.text_campaign --replay {target} {seed} {index}"

_MARKERS = (
    "SGLang Kernel API Call: ", "SGLang Kernel API Exception: ", "NVRM: Xid (PCI:0000:3b:00): ",
    "CUDA Exception: ", "The exception was triggered at PC ", "coredump: Writing ELF file to ",
    "========= Invalid __global__ write of size 4 bytes", "Traceback (most recent call last):",
    'File "x.py", line 3, in f', "RuntimeError: CUDA error: an illegal memory access",
    "arg[0]=Tensor(", "nan_count=", "shape=(", "Positional input arguments:", "Output:",
    "Address 0x", "by thread (", "in block (", "MMU Fault: ENGINE ", "pid=", "@ 0x",
)  # fmt: skip
_ODD = ("\x00", "\u202e", "\u2028", "\ufffd", "\x1b[2J", "(" * 64, ")" * 64, " " * 4096, "\t")
_NUMBERS = ("-1", "0", "99999999999999999999999", "0x", "0xffffffffffffffffff", "nan", "1e999")


def _seed_logs() -> list[list[str]]:
    logs = [
        [line for line in p.read_text(errors="replace").splitlines() if not line.startswith("#")]
        for p in sorted(HOSTLOGS.glob("*.txt"))
    ]
    sys.path.insert(0, str(ROOT / "fixtures" / "builder"))
    import hostile_logs  # noqa: PLC0415 (the fixture builder is not a package)

    for parser, case in hostile_logs.all_cases():
        logs.append(hostile_logs.crafted_lines(parser, case, log_bytes=64 << 10))
    return logs


def _mutate_line(rng: random.Random, line: str) -> str:
    choice = rng.randrange(7)
    if choice == 0 and line:
        at = rng.randrange(len(line) + 1)
        return line[:at] + rng.choice(_ODD) + line[at:]
    if choice == 1:
        digits = [i for i, c in enumerate(line) if c.isdigit()]
        if digits:
            at = rng.choice(digits)
            return line[:at] + rng.choice(_NUMBERS) + line[at + 1 :]
    if choice == 2:
        return line.strip()
    if choice == 3:
        return rng.choice(_MARKERS) + line
    if choice == 4 and line:
        return line[: rng.randrange(len(line))]
    if choice == 5:
        return line * rng.randint(2, 50)
    return rng.choice(_MARKERS) * rng.randint(1, 20) + rng.choice(_NUMBERS)


def hostlog_case(seed: int, index: int, logs: list[list[str]]) -> list[str]:
    """The mutated log of case `index`."""
    rng = random.Random(seed * 1_000_003 + index)
    lines = list(rng.choice(logs))
    for _ in range(rng.randint(1, 12)):
        what = rng.randrange(6)
        if what == 0 and lines:
            lines[rng.randrange(len(lines))] = _mutate_line(rng, rng.choice(lines))
        elif what == 1:
            other = rng.choice(logs)
            if other:
                start = rng.randrange(len(other))
                at = rng.randrange(len(lines) + 1)
                lines[at:at] = other[start : start + rng.randint(1, 30)]
        elif what == 2 and lines:
            del lines[rng.randrange(len(lines))]
        elif what == 3 and lines:
            at = rng.randrange(len(lines))
            lines[at:at] = [lines[at]] * rng.randint(2, 200)
        elif what == 4:
            rng.shuffle(lines)
        else:
            lines.append(_mutate_line(rng, rng.choice(_MARKERS)))
    return lines


def check_hostlog(seed: int, index: int, logs: list[list[str]]) -> None:
    from postmortem.host.cudaerror import parse_cuda_errors
    from postmortem.host.driver import parse_driver_log
    from postmortem.host.reader import parse_host_lines
    from postmortem.host.sanitizer import parse_sanitizer_report
    from postmortem.host.sglang import parse_sglang_api_log

    lines = hostlog_case(seed, index, logs)
    for parse in (parse_sglang_api_log, parse_cuda_errors, parse_driver_log,
                  parse_sanitizer_report):  # fmt: skip
        parse(lines)
    parse_host_lines(Path("case.log"), lines, 0, 0)
    if index % JOIN_EVERY == 0:
        _join(lines)


def _join(lines: list[str]) -> None:
    from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
    from postmortem.analysis.fault.fault import LocalizeOptions
    from postmortem.report.context import build_report
    from postmortem.report.render import render

    with tempfile.TemporaryDirectory(prefix="postmortem-fuzz-") as scratch:
        log = Path(scratch) / "host.log"
        log.write_text("\n".join(lines), errors="surrogateescape")
        options = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False, host_logs=(log,))
        try:
            report = build_report(analyze_dump(DUMP, options))
        except PostmortemError:
            return
        for fmt in ("text", "md", "html", "json"):
            render("analyze", report, fmt)


_KEYS = ("source-dirs", "map-paths", "nvdisasm", "cuda-gdb", "rules", "trusted-projects", "x")
_VALUES = (
    '"a"', '["a", "b"]', "3", "true", '"/tmp/t=/u"', '["/tmp/t=/u"]', "[" * 64 + "]" * 64,
    "[" * 5000, '"' + "x" * 10_000 + '"', '"unterminated', "{a = 1}", "1979-05-27", '"\\u0000"',
    "'''\nmulti\n'''", "[[1], [2]]", '"./evil.sh"', '"~"', '"."',
)  # fmt: skip


def config_case(seed: int, index: int) -> tuple[bytes, bytes, bool]:
    """(the user's file, the project's pyproject.toml, whether the user trusts it)."""
    rng = random.Random(seed * 1_000_003 + index)
    trusted = rng.random() < 0.3

    def table(keys: int) -> str:
        return "".join(f"{rng.choice(_KEYS)} = {rng.choice(_VALUES)}\n" for _ in range(keys))

    user = table(rng.randint(0, 3)) + ('trusted-projects = ["PROJECT"]\n' if trusted else "")
    heading = rng.choice(
        ("[tool.postmortem]", "[tool.postmortem.x]", "[tool]", "[[tool.postmortem]]")
    )
    project = f'[project]\nname = "p"\n\n{heading}\n' + table(rng.randint(0, 5))
    project += rng.choice(('nvdisasm = "./evil.sh"\n', 'cuda-gdb = "./gdb.sh"\n', ""))
    raw = project.encode()
    if rng.random() < 0.1:
        at = rng.randrange(len(raw))
        raw = raw[:at] + bytes([rng.randrange(256)]) + raw[at:]
    return user.encode(), raw, trusted


def check_config(seed: int, index: int) -> None:
    from postmortem.config import load_settings

    user, project, trusted = config_case(seed, index)
    with tempfile.TemporaryDirectory(prefix="postmortem-fuzz-") as scratch:
        home, folder = Path(scratch) / "config", Path(scratch) / "project"
        (home / "postmortem").mkdir(parents=True)
        folder.mkdir()
        (home / "postmortem" / "postmortem.toml").write_bytes(
            user.replace(b"PROJECT", str(folder).encode())
        )
        (folder / "pyproject.toml").write_bytes(project)
        saved = os.environ.get("XDG_CONFIG_HOME")
        os.environ["XDG_CONFIG_HOME"] = str(home)
        try:
            settings = load_settings(folder)
        except ConfigError:
            return
        finally:
            if saved is None:
                os.environ.pop("XDG_CONFIG_HOME", None)
            else:
                os.environ["XDG_CONFIG_HOME"] = saved
        for key in ("nvdisasm", "cuda-gdb"):
            origin = settings.origin(key) or ""
            if origin.startswith("project config") and not trusted:
                raise AssertionError(f"an untrusted project's {key} was taken: {origin}")


def run(count: int, seed: int, limit_s: float, out: Callable[[str], None]) -> int:
    """Run `count` cases, alternating the targets; the number of failures."""
    logs = _seed_logs()
    failures = 0
    worst = {"hostlog": 0.0, "config": 0.0}
    started = time.perf_counter()
    for index in range(count):
        target = "hostlog" if index % 2 == 0 else "config"
        began = time.process_time()  # CPU: a loaded CI machine does not make a case slow
        try:
            if target == "hostlog":
                check_hostlog(seed, index, logs)
            else:
                check_config(seed, index)
            problem = None
        except Exception:  # a case's own failure, reported with its replay command
            problem = traceback.format_exc(limit=-3)
        took = time.process_time() - began
        worst[target] = max(worst[target], took)
        if problem is None and took > limit_s:
            problem = f"slow: {took:.2f} s of CPU (limit {limit_s} s)"
        if problem is not None:
            failures += 1
            out(f"FAIL {REPLAY.format(target=target, seed=seed, index=index)}\n{problem}")
    out(
        f"{count} cases ({(count + 1) // 2} host logs, {count // 2} settings files), "
        f"{failures} failed, in {time.perf_counter() - started:.1f} s; slowest case: "
        f"host log {worst['hostlog']:.3f} s, settings {worst['config']:.3f} s"
    )
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit-s", type=float, default=5.0)
    parser.add_argument("--replay", nargs=3, metavar=("TARGET", "SEED", "INDEX"))
    args = parser.parse_args()
    if args.replay:
        target, seed, index = args.replay[0], int(args.replay[1]), int(args.replay[2])
        if target == "hostlog":
            check_hostlog(seed, index, _seed_logs())
        else:
            check_config(seed, index)
        print("no failure")
        return 0
    return 1 if run(args.n, args.seed, args.limit_s, print) else 0


if __name__ == "__main__":
    sys.exit(main())
