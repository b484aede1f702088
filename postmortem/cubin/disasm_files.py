"""Disassemblies kept in memory and in a folder, for the next dump and the next command.

nvdisasm costs over half a second a run whatever the function's size, and the dumps users
analyze mostly carry the same few cubins: the ranks of one job, a fleet's dumps, the same
dump analyzed again for another format. Each (cubin content, function, nvdisasm) is
disassembled once: remembered in memory, and written as nvdisasm's own text into a folder
where other processes (a scan's workers, the next `postmortem analyze`) find it and parse it
again, which costs far less than running nvdisasm. The key names the content, not the file
(`postmortem.cubin.nvdisasm`), so a listing is never taken for another cubin's.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from postmortem.cubin.nvdisasm import Disassembly, RememberedDisassemblies
from postmortem.cubin.sass import parse_sass
from postmortem.errors import UnreadableFile
from postmortem.safefile import read_regular

_MEMORY_MAX = 256
RECORD_MAX_BYTES = 64 << 20
"""A kept listing larger than this is not read (a whole cubin's listing stays far below)."""
FOLDER_MAX_FILES = 4096
"""Kept listings past this many: the oldest are removed as new ones are written."""


class DisassemblyFiles(RememberedDisassemblies):
    """A `postmortem.cubin.nvdisasm.DisassemblyStore`: memory, then optionally a folder."""

    def __init__(self, directory: Path | None) -> None:
        super().__init__(_MEMORY_MAX)
        self._directory = directory

    def get(self, key: str) -> Disassembly | None:
        found = super().get(key)
        if found is None and self._directory is not None:
            found = self._read(self._directory / f"{key}.json")
            if found is not None:
                super().put(key, "", found)
        return found

    def put(self, key: str, stdout: str, result: Disassembly) -> None:
        super().put(key, stdout, result)
        if self._directory is None:
            return
        record = {"stdout": stdout, "stderr": result.stderr, "version": result.tool_version,
                  "argv": list(result.argv)}  # fmt: skip
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
            partial = self._directory / f".{key}.{os.getpid()}.part"
            partial.write_text(json.dumps(record), encoding="utf-8")
            partial.replace(self._directory / f"{key}.json")
            _prune(self._directory, FOLDER_MAX_FILES)
        except OSError:
            pass  # a folder that cannot be written only costs speed

    @staticmethod
    def _read(path: Path) -> Disassembly | None:
        try:
            record = json.loads(read_regular(path, RECORD_MAX_BYTES).decode("utf-8"))
            listing = parse_sass(record["stdout"])
            return Disassembly(listing, record["version"], tuple(record["argv"]), 0.0,
                               record["stderr"])  # fmt: skip
        except (UnreadableFile, ValueError, KeyError, TypeError):
            return None  # not there, or not ours: nvdisasm runs


def _prune(directory: Path, keep: int) -> None:
    """Remove the oldest listings of `directory` past `keep` (by modification time)."""
    with os.scandir(directory) as entries:
        kept = [e for e in entries if e.name.endswith(".json") and e.is_file(follow_symlinks=False)]
    if len(kept) <= keep:
        return
    kept.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime)
    for entry in kept[: len(kept) - keep]:
        _remove(entry.path)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):  # another process removed it first
        os.unlink(path)
