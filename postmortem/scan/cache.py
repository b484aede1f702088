"""The incremental scan cache: a dump unchanged since the last scan is not analyzed again.

An entry is keyed by the dump's path, size, modification time, content fingerprint
(`postmortem.scan.fingerprint`) and the scan's settings (`settings_key`: postmortem's and the
signature's version, the rules, path maps, tools), and holds the row as JSON. It lives in
one SQLite file outside the scanned trees (by default ``$XDG_CACHE_HOME/postmortem``), so a
scan never writes where it reads.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from types import TracebackType

from postmortem.errors import PostmortemError
from postmortem.scan.row import DumpRow, row_from_dict, row_to_dict

_SCHEMA = 1
_CREATE = """
create table if not exists rows (
    path text not null, settings text not null, size integer not null,
    mtime_ns integer not null, fingerprint text not null, row text not null,
    primary key (path, settings)
)
"""


class ScanCacheError(PostmortemError):
    """The cache file cannot be opened or written."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: cannot use the scan cache: {self.reason}"

    hint = "pass --cache FILE somewhere writable, or --no-cache"


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/postmortem/scan-v1.sqlite`` (``~/.cache`` when the variable is unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "postmortem" / f"scan-v{_SCHEMA}.sqlite"


class ScanCache:
    """Rows of earlier scans, by path and settings; valid while size, mtime and content match."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=30)
            self._db.execute("pragma journal_mode=wal")
            self._db.execute(_CREATE)
        except (OSError, sqlite3.Error) as error:
            raise ScanCacheError(path, str(error)) from None
        self.hits = 0
        self.misses = 0

    def get(
        self, path: str, settings: str, size: int, mtime_ns: int, print_: str
    ) -> DumpRow | None:
        """The cached row, or None when there is none or the file has changed since."""
        found = self._db.execute(
            "select size, mtime_ns, fingerprint, row from rows where path = ? and settings = ?",
            (path, settings),
        ).fetchone()
        if found is None or tuple(found[:3]) != (size, mtime_ns, print_):
            self.misses += 1
            return None
        try:
            row = row_from_dict(json.loads(found[3]))
        except (ValueError, KeyError, TypeError):  # written by another version: recompute
            self.misses += 1
            return None
        self.hits += 1
        return row

    def put(
        self, path: str, settings: str, size: int, mtime_ns: int, print_: str, row: DumpRow
    ) -> None:
        """Store `row` for `path` (committed by `commit` or on close)."""
        self._db.execute(
            "insert or replace into rows values (?, ?, ?, ?, ?, ?)",
            (path, settings, size, mtime_ns, print_, json.dumps(row_to_dict(row))),
        )

    def commit(self) -> None:
        self._db.commit()

    def close(self) -> None:
        self._db.commit()
        self._db.close()

    def __enter__(self) -> ScanCache:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
