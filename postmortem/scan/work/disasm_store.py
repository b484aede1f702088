"""Disassemblies shared by the workers of a scan, and kept for the next scans.

A fleet's dumps mostly carry the same few cubins, so each (cubin content, function, nvdisasm)
is disassembled once: remembered in the worker's memory, and written as nvdisasm's own text
into a directory beside the scan cache, where the other workers, and later scans, find it
and parse it again (parsing one function's listing costs far less than running nvdisasm).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from postmortem.cubin.nvdisasm import Disassembly, RememberedDisassemblies
from postmortem.cubin.sass import parse_sass

_MEMORY_MAX = 256


class ScanDisassemblyStore(RememberedDisassemblies):
    """A `postmortem.cubin.nvdisasm.DisassemblyStore`: memory, then optionally a directory."""

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
        except OSError:
            pass  # a store that cannot be written only costs speed

    @staticmethod
    def _read(path: Path) -> Disassembly | None:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            listing = parse_sass(record["stdout"])
            return Disassembly(listing, record["version"], tuple(record["argv"]), 0.0,
                               record["stderr"])  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            return None
