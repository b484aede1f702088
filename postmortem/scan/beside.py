"""What lies beside a dump: a serving engine's crash folder, read as one.

SGLang's crash path writes, per host folder, the dump it triggered (`core.cuda.%t.%p`), the
requests in flight (pickles), py-spy's stacks and its logs; its log says "Triggered CUDA user
coredump for PID N via PIPE". A row lists the files in its dump's folder that are not dumps
(the first `SHOWN` by name, and how many more), and names the log line when the engine
itself asked for the dump: a hang the engine saw, not a fault. Each folder is listed once
and each log read once, its last `LOG_TAIL_BYTES`, however many dumps share them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from postmortem.capture.dumps import triggered_pid
from postmortem.dumpnames import named_like_a_dump
from postmortem.safefile import open_regular
from postmortem.scan.row import DumpRow

SHOWN = 16
"""Files beside a dump a row names; the rest are counted."""
LOG_TAIL_BYTES = 1 << 20
"""How much of the end of each log beside a dump is searched for the engine's trigger line."""
_LISTED = 4096
"""Entries of one folder looked at (a fleet's flat folder of dumps is not a crash folder)."""
_LOG_NAMES = (".log", ".txt", ".out", ".err")


def with_neighbours(rows: Sequence[DumpRow]) -> list[DumpRow]:
    """`rows` with the files beside each local dump, and the engine's trigger line when its
    log names the dump's process."""
    dumps = {os.path.abspath(r.path) for r in rows if "://" not in r.path}
    folders: dict[str, tuple[tuple[str, ...], dict[int, str]]] = {}
    found = []
    for row in rows:
        if "://" in row.path:
            found.append(row)
            continue
        folder = os.path.dirname(os.path.abspath(row.path))
        if folder not in folders:
            folders[folder] = _read_folder(Path(folder), dumps)
        names, triggers = folders[folder]
        trigger = triggers.get(row.pid) if row.pid is not None else None
        found.append(
            replace(row, beside=names[:SHOWN], beside_more=max(len(names) - SHOWN, 0),
                    engine_trigger=trigger)
        )  # fmt: skip
    return found


def _read_folder(folder: Path, dumps: set[str]) -> tuple[tuple[str, ...], dict[int, str]]:
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= _LISTED:
                    break
                if not entry.is_file(follow_symlinks=False) or entry.path in dumps:
                    continue
                if not named_like_a_dump(entry.name):
                    names.append(entry.name)
    except OSError:
        return (), {}
    names.sort()
    triggers: dict[int, str] = {}
    for name in names:
        if name.lower().endswith(_LOG_NAMES):
            triggers.update((pid, f"{name}:{line}") for pid, line in _triggers(folder / name))
    return tuple(names), triggers


def _triggers(path: Path) -> list[tuple[int, int]]:
    # (pid, line number in the tail read) of each trigger line; an unreadable log has none.
    try:
        with open_regular(path) as stream:
            size = os.fstat(stream.fileno()).st_size
            stream.seek(max(size - LOG_TAIL_BYTES, 0))
            tail = stream.read(LOG_TAIL_BYTES)
    except OSError:
        return []
    found = []
    for number, line in enumerate(tail.split(b"\n"), start=1):
        pid = triggered_pid(line)
        if pid is not None:
            found.append((pid, number))
    return found
