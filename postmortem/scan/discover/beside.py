"""What lies beside a dump: a serving engine's crash folder, read as one.

SGLang's crash path writes, per host folder, the dump it triggered (`core.cuda.%t.%p`), the
requests in flight (pickles), py-spy's stacks and its logs; its log says "Triggered CUDA user
coredump for PID N via PIPE". A row lists the files in its dump's folder that are not dumps
(the first `SHOWN` by name, and how many more), and names the log line when the engine
itself asked for a dump that holds no exception: a hang the engine saw. (Beside a dump that
holds one, the fault is what the engine saw; of a dump that could not be read, nobody knows.)

Each folder is listed once and each log read once, however many dumps share them: the last
`LOG_TAIL_BYTES` of its newest `LOGS_PER_FOLDER` logs, `LOG_BUDGET_BYTES` of logs in all,
each searched by one regular expression. The logs left unsearched are one scan warning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from postmortem.dumpnames import named_like_a_dump
from postmortem.errors import UnreadableFile
from postmortem.safefile import open_regular
from postmortem.scan.row import DumpRow, RowStatus

SHOWN = 16
"""Files beside a dump a row names; the rest are counted."""
LOG_TAIL_BYTES = 1 << 20
"""How much of the end of each log beside a dump is searched for the engine's trigger line."""
LOGS_PER_FOLDER = 16
"""Logs of one folder searched, the newest first."""
LOG_BUDGET_BYTES = 64 << 20
"""Bytes of logs one scan reads, all folders together."""
_LISTED = 4096
"""Entries of one folder looked at (a fleet's flat folder of dumps is not a crash folder)."""
_LOG_NAMES = (".log", ".txt", ".out", ".err")
# The line `postmortem.capture.dumps.triggered_pid` reads.
_TRIGGERED = re.compile(rb"Triggered CUDA user coredump for PID (\d{1,10}) via \S")


_OVER_CAP = f"past the newest {LOGS_PER_FOLDER} of a folder"
_OVER_BUDGET = f"past the {LOG_BUDGET_BYTES >> 20} MiB a scan reads"
_UNREADABLE = "unreadable"


@dataclass(slots=True)
class _Logs:
    """The bytes of logs a scan may still read, and the logs it left unsearched."""

    budget_bytes: int = LOG_BUDGET_BYTES
    left: dict[str, int] = field(default_factory=dict)
    """How many logs were not searched, by why."""
    first_left: str | None = None

    def leave(self, path: Path, why: str) -> None:
        self.left[why] = self.left.get(why, 0) + 1
        self.first_left = self.first_left or str(path)

    def warnings(self) -> tuple[str, ...]:
        if not self.left:
            return ()
        why = ", ".join(f"{count} {why}" for why, count in self.left.items())
        return (
            f"{sum(self.left.values())} log(s) beside the dumps not searched for the engine's "
            f"trigger line ({why}; first: {self.first_left})",
        )


def with_neighbours(rows: Sequence[DumpRow]) -> tuple[list[DumpRow], tuple[str, ...]]:
    """`rows` with the files beside each local dump, and the engine's trigger line when its
    log names the dump's process and the dump holds no exception; and one warning when some
    logs there were not searched."""
    dumps = {os.path.abspath(r.path) for r in rows if "://" not in r.path}
    # Folders in name order: which ones the budget covers does not depend on row order.
    folders = sorted({os.path.dirname(path) for path in dumps})
    logs = _Logs()
    found = {folder: _read_folder(Path(folder), dumps, logs) for folder in folders}
    with_files = []
    for row in rows:
        if "://" in row.path:
            with_files.append(row)
            continue
        names, triggers = found[os.path.dirname(os.path.abspath(row.path))]
        # The trigger means a hang only when the dump itself holds no exception.
        hang = row.status == RowStatus.OK and row.exception is None
        trigger = triggers.get(row.pid) if row.pid is not None and hang else None
        with_files.append(
            replace(row, beside=names[:SHOWN], beside_more=max(len(names) - SHOWN, 0),
                    engine_trigger=trigger)
        )  # fmt: skip
    return with_files, logs.warnings()


def _read_folder(
    folder: Path, dumps: set[str], logs: _Logs
) -> tuple[tuple[str, ...], dict[int, str]]:
    names: list[str] = []
    newest: list[tuple[int, str]] = []
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= _LISTED:
                    break
                if not entry.is_file(follow_symlinks=False) or entry.path in dumps:
                    continue
                if named_like_a_dump(entry.name):
                    continue
                names.append(entry.name)
                if entry.name.lower().endswith(_LOG_NAMES):
                    newest.append((-_mtime_ns(entry), entry.name))
    except OSError:
        return (), {}
    names.sort()
    newest.sort()
    for _, name in newest[LOGS_PER_FOLDER:]:
        logs.leave(folder / name, _OVER_CAP)
    triggers: dict[int, str] = {}
    for _, name in newest[:LOGS_PER_FOLDER]:  # a process's newest trigger line is kept
        for pid, line in reversed(_triggers(folder / name, logs)):
            triggers.setdefault(pid, f"{name}:{line}")
    return tuple(names), triggers


def _mtime_ns(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_mtime_ns
    except OSError:  # gone since listed: its read says so
        return 0


def _triggers(path: Path, logs: _Logs) -> list[tuple[int, int]]:
    # (pid, line number in the tail read) of each trigger line; an unreadable log has none.
    try:
        with open_regular(path) as stream:
            size = os.fstat(stream.fileno()).st_size
            wanted = min(size, LOG_TAIL_BYTES)
            if wanted > logs.budget_bytes:
                logs.leave(path, _OVER_BUDGET)
                return []
            stream.seek(size - wanted)
            tail = stream.read(wanted)
    except (OSError, UnreadableFile):
        logs.leave(path, _UNREADABLE)
        return []
    logs.budget_bytes -= len(tail)
    found = []
    line, counted = 1, 0
    for match in _TRIGGERED.finditer(tail):
        line += tail.count(b"\n", counted, match.start())
        counted = match.start()
        found.append((int(match[1]), line))
    return found
