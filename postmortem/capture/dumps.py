"""The driver's name patterns, expanded, and the dumps a process wrote.

`CUDA_COREDUMP_FILE` and `CUDA_COREDUMP_PIPE` may hold ``%h`` (the host name), ``%p`` (the
process id) and ``%t`` (Unix seconds when the dump is written), anywhere in the path (NVIDIA's
cuda-gdb manual, "GPU core dump support"). A relative name is relative to the process's working
folder. After a capture, a dump is found two ways: by the pattern, expanded for the captured
process (``%t`` matched as digits), and by the line the driver prints for every dump when
`CUDA_COREDUMP_SHOW_PROGRESS=1` (as the vLLM and NVIDIA samples show it; read by
`postmortem.host.driver.written_path`):

    [00:40:46.806153] coredump: Writing ELF file to /dumps/cuda_coredump_xxx.1799919.1754898045

The line also names the dumps of the command's own child processes (a server's workers), whose
process ids the pattern cannot know. What a log says is untrusted: a named path is used only
when it is a file that exists.

A dump can be asked for rather than caused by a fault, and is then analyzed as a hang: one
that `capture --hang-after` triggered, and one a serving engine triggered itself. SGLang's
crash path writes the coredump pipe of each scheduler process and logs (as its
`cudacore_pyspy_dump_utils.trigger_cuda_user_coredump` does):

    Triggered CUDA user coredump for PID 4242 via /run/corepipe.cuda.node-1.4242

`triggered_pid` reads that line. A dump is tied to such a trigger by the process id in its
name (`dump_pid`), and SGLang's own crash folder names its dumps ``core.cuda.%t.%p``, without
``.nvcudmp``, possibly in a folder per host (`crash_folder_dumps`).
"""

from __future__ import annotations

import glob
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from postmortem.dumpnames import DEFAULT_PATTERNS, parse_name
from postmortem.errors import TriggerTimedOut

_PLACEHOLDER = re.compile(r"%(.)", re.DOTALL)
_TRIGGERED = re.compile(rb"Triggered CUDA user coredump for PID (\d{1,10}) via \S")
SGLANG_DUMP_NAME = "core.cuda.%t.%p"
"""The name SGLang's crash folder gives each dump (no ``.nvcudmp``)."""
MTIME_SLACK_S = 0.5
"""How much older than the start of a capture or trigger a dump's time may read (file times
are kept at the kernel's coarse clock)."""


def expand(pattern: str, *, host: str, pid: int | None) -> str:
    """`pattern` as a glob: ``%h`` and ``%p`` filled in (``*`` for an unknown pid), ``%t`` as
    ``*``, ``%%`` as ``%``; everything else matched literally."""
    fields = {"h": glob.escape(host), "p": "*" if pid is None else str(pid), "t": "*"}
    return _translate(pattern, fields, glob.escape)


def _translate(pattern: str, fields: dict[str, str], literal: Callable[[str], str]) -> str:
    # split() alternates literal text and the one character after each %.
    parts = _PLACEHOLDER.split(pattern)
    out = [literal(parts[0])]
    for spec, text in zip(parts[1::2], parts[2::2], strict=True):
        out.append(fields.get(spec, literal("%" if spec == "%" else "%" + spec)))
        out.append(literal(text))
    return "".join(out)


def _regex(pattern: str, *, host: str, pid: int | None) -> re.Pattern[str]:
    """The full-path regular expression of `pattern`: ``%t`` as digits, ``%p`` as the pid (or
    digits), ``%h`` as the host."""
    fields = {"h": re.escape(host), "p": r"\d+" if pid is None else str(pid), "t": r"\d+"}
    return re.compile(_translate(pattern, fields, re.escape))


def matching_files(
    pattern: str, *, host: str, pid: int | None, base: Path, since: float | None = None
) -> list[Path]:
    """The regular files `pattern` names for `host` and `pid` (any pid when None), relative
    names taken from `base`; only those written since `since` (Unix seconds) when it is given.
    Oldest first."""
    full = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
    regex = _regex(full, host=host, pid=pid)
    found = []
    for name in glob.glob(expand(full, host=host, pid=pid)):
        if regex.fullmatch(name) is None:
            continue
        mtime = file_mtime(Path(name))
        if mtime is not None and (since is None or mtime >= since - MTIME_SLACK_S):
            found.append((mtime, name))
    return [Path(name) for _, name in sorted(found)]


def named_files(paths: Iterable[str], base: Path) -> list[Path]:
    """The paths printed by the driver that are regular files (relative ones from `base`)."""
    found = []
    for text in paths:
        path = Path(text) if os.path.isabs(text) else base / text
        if file_mtime(path) is not None:
            found.append(path)
    return found


def unique(paths: Iterable[Path]) -> list[Path]:
    """`paths` in order, each file once however it was named."""
    seen: set[tuple[int, int]] = set()
    out = []
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            continue
        if (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            out.append(path)
    return out


def file_mtime(path: Path) -> float | None:
    """When `path` was last written, Unix seconds; None when it is not a regular file."""
    try:
        info = path.stat()
    except (OSError, ValueError):
        return None
    return info.st_mtime if stat.S_ISREG(info.st_mode) else None


Progress = Callable[[Path | None, int], None]
"""Told, at each look, the newest dump seen so far (None: none yet) and its size in bytes."""


def wait_for_dump(
    globs: Sequence[str],
    *,
    since: float,
    timeout: float,
    settle: float = 1.0,
    interval: float = 0.25,
    progress: Progress | None = None,
) -> Path:
    """The newest file any of `globs` matches, written since `since`, once its size has not
    changed for `settle` seconds (the driver has finished writing it).

    Raises:
        TriggerTimedOut: no such file, or none that stopped growing, within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    seen: tuple[Path, int] | None = None
    steady_since = 0.0
    while True:
        newest = _newest(globs, since)
        size = _size(newest) if newest is not None else 0
        now = time.monotonic()
        if newest is None or seen != (newest, size) or size == 0:
            seen, steady_since = (newest, size) if newest is not None else None, now
        elif now - steady_since >= settle:
            return newest
        if progress is not None:
            progress(newest, size)
        if now >= deadline:
            what = "no dump was written" if newest is None else f"{newest} did not stop growing"
            raise TriggerTimedOut(Path(globs[0]), timeout, what)
        time.sleep(interval)


def _newest(globs: Sequence[str], since: float) -> Path | None:
    best: tuple[float, str] | None = None
    for pattern in globs:
        for name in glob.glob(pattern):
            mtime = file_mtime(Path(name))
            if mtime is not None and mtime >= since - MTIME_SLACK_S:
                best = max(best, (mtime, name)) if best else (mtime, name)
    return Path(best[1]) if best else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def triggered_pid(line: bytes) -> int | None:
    """The process id in SGLang's "Triggered CUDA user coredump for PID N via PIPE" line;
    None for any other line."""
    if b"Triggered CUDA" not in line:
        return None
    match = _TRIGGERED.search(line)
    return int(match[1]) if match else None


def dump_pid(path: Path, pattern: str = "") -> int | None:
    """The process id a dump's name carries: by `pattern` (a `CUDA_COREDUMP_FILE`), SGLang's
    ``core.cuda.%t.%p``, then the driver's defaults; None when no pattern names it."""
    patterns = [pattern.rsplit("/", 1)[-1]] if "%p" in pattern else []
    try:
        return parse_name(path.name, (*patterns, SGLANG_DUMP_NAME, *DEFAULT_PATTERNS)).pid
    except ValueError:  # a pattern with another % specifier: only the defaults apply
        return parse_name(path.name, (SGLANG_DUMP_NAME, *DEFAULT_PATTERNS)).pid


def crash_folder_dumps(folder: Path, since: float) -> list[Path]:
    """Dumps named as SGLang's crash folder names them (``core.cuda.%t.%p``), in `folder` or
    a folder directly in it (one per host), written since `since`. Oldest first."""
    found = []
    for pattern in ("core.cuda.*", "*/core.cuda.*"):
        for name in glob.glob(os.path.join(glob.escape(str(folder)), pattern)):
            path = Path(name)
            mtime = file_mtime(path)
            if mtime is None or mtime < since - MTIME_SLACK_S:
                continue
            if parse_name(path.name, (SGLANG_DUMP_NAME, "core.cuda.%h.%p")).pid is not None:
                found.append((mtime, name))
    return [Path(name) for _, name in sorted(found)]


def matching_pipes(pattern: str, *, host: str, base: Path, since: float) -> list[Path]:
    """The named pipes `pattern` (a `CUDA_COREDUMP_PIPE`) names for `host` and any process,
    made since `since` (relative names taken from `base`)."""
    full = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
    regex = _regex(full, host=host, pid=None)
    found = []
    for name in glob.glob(expand(full, host=host, pid=None)):
        try:
            info = os.stat(name)
        except (OSError, ValueError):
            continue
        if (
            regex.fullmatch(name) is not None
            and stat.S_ISFIFO(info.st_mode)
            and info.st_mtime >= since - MTIME_SLACK_S
        ):
            found.append(Path(name))
    return sorted(found)
