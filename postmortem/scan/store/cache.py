"""The incremental scan cache: a dump unchanged since the last scan is not analyzed again.

An entry is keyed by the dump's path, size, modification time, content fingerprint
(`postmortem.scan.work.fingerprint`) and the scan's settings (`settings_key`: postmortem's and the
signature's version, the rules, path maps, tools), and holds the row as JSON, and the Sentry
projects that took the dump's event (`--sentry-dsn`), so that no scan sends it twice. It lives in
one SQLite file outside the scanned trees (by default ``$XDG_CACHE_HOME/postmortem``), so a
scan never writes where it reads.

As in git's index, a file whose size, mtime, ctime, inode and device all equal what was
recorded when its fingerprint was taken is not read again: no writer can change the bytes
without moving ctime. A file modified within two seconds of being recorded ("racy"), and
any file whose stat differs, is fingerprinted again and is a hit only if the fingerprint
still matches.

Another process may hold the cache's write lock (a scan of other folders, a copy): a scan
waits for it once, `BUSY_S`, and then runs without the cache, saying which lock stopped it.
A cache written by a newer postmortem (a higher schema) is refused and left as it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from postmortem.config import cache_folder
from postmortem.errors import ScanCacheError
from postmortem.scan.row import DumpRow, row_from_dict, row_to_dict

_SCHEMA = 4
_CREATE = """
create table if not exists rows (
    path text not null, settings text not null, size integer not null,
    mtime_ns integer not null, fingerprint text not null, row text not null,
    ctime_ns integer not null, inode integer not null, device integer not null,
    recorded_ns integer not null, sent text not null default '',
    primary key (path, settings)
)
"""
BUSY_S = 1.0
"""How long a scan waits, once, for another process's lock on the cache."""
_LOCKED = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
# A file whose mtime is this close to when it was recorded may have changed again within
# the timestamp's granularity: it is always fingerprinted again.
_RACY_NS = 2_000_000_000


@dataclass(frozen=True, slots=True)
class FileState:
    """What stat says of a dump, and its fingerprint once taken."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, info: os.stat_result) -> FileState:
        return cls(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)


def _is_locked(error: BaseException) -> bool:
    """Whether SQLite gave up waiting for another connection's lock."""
    code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return int(code) & 0xFF in _LOCKED
    return "locked" in str(error)


def _key(path: str) -> bytes:
    # The file system's own bytes: a name that is not UTF-8 is still a key.
    return os.fsencode(path)


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/postmortem/scan-vN.sqlite`` (``~/.cache`` when the variable is unset)."""
    return cache_folder() / f"scan-v{_SCHEMA}.sqlite"


class ScanCache:
    """Rows of earlier scans, by path and settings; valid while size, mtime and content match."""

    def __init__(self, path: Path) -> None:
        """Open (or create) the cache at `path`.

        Raises:
            ScanCacheError: it cannot be opened, another process holds its write lock past
                `BUSY_S`, or a newer postmortem wrote it (then it is left untouched).
        """
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=BUSY_S)
        except (OSError, sqlite3.Error) as error:
            raise ScanCacheError(path, str(error)) from None
        try:
            self._prepare()
        except (OSError, sqlite3.Error) as error:
            self._db.close()
            raise ScanCacheError(path, self._reason(error)) from None
        except ScanCacheError:
            self._db.close()
            raise
        self.hits = 0
        self.misses = 0
        self.write_failures = 0
        # Set once another process's lock stopped a write: the cache is used no more.
        self.locked = False

    def _prepare(self) -> None:
        # Read before anything is written: a newer schema is refused with the file untouched
        # (even setting WAL rewrites its header).
        found = self._db.execute("pragma user_version").fetchone()[0]
        if found > _SCHEMA:
            raise ScanCacheError(
                self.path, f"it was written by a newer postmortem (schema {found}; this one "
                f"reads {_SCHEMA}); it is left as it is",
            )  # fmt: skip
        # Take the write lock once, now: held elsewhere, the scan runs without the cache
        # rather than wait at each row.
        self._db.execute("begin immediate")
        self._db.rollback()
        self._db.execute("pragma journal_mode=wal")
        # WAL with synchronous=normal makes a commit cheap: each row is committed at once,
        # so a long scan never holds the write lock other scans wait for.
        self._db.execute("pragma synchronous=normal")
        if found != _SCHEMA:
            # Rows written in an older layout: a cache, so start it again.
            self._db.execute("drop table if exists rows")
            self._db.execute(f"pragma user_version = {_SCHEMA}")
        self._db.execute(_CREATE)
        self._db.commit()

    def _reason(self, error: OSError | sqlite3.Error) -> str:
        if _is_locked(error):
            return (
                f"another process holds its SQLite write lock ({error}, still held after "
                f"{BUSY_S:g} s: a scan running with the same cache?)"
            )
        return str(error)

    def _failed(self, error: sqlite3.Error) -> None:
        """Count a write that failed; a lock stops every later use of the cache."""
        self.write_failures += 1
        self.locked = self.locked or _is_locked(error)

    def warnings(self) -> tuple[str, ...]:
        """What the scan should say of its use of the cache: rows not stored, and why."""
        if not self.write_failures:
            return ()
        lost = f"{self.write_failures} row(s) could not be written"
        if self.locked:
            return (
                f"the scan cache {self.path}: another process took its SQLite write lock "
                f"(still held after {BUSY_S:g} s): {lost}, and the rest of the scan ran "
                "without the cache; the next scan analyzes those dumps again",
            )
        return (
            f"the scan cache {self.path}: {lost} (a full disk or a read-only cache?); the "
            "next scan analyzes those dumps again",
        )

    def get(
        self, path: str, settings: str, state: FileState, fingerprint: Callable[[], str]
    ) -> DumpRow | None:
        """The cached row, or None when there is none or the file has changed since.

        `fingerprint` is called only when stat alone cannot vouch for the file.
        """
        if self.locked:
            self.misses += 1
            return None
        try:
            found = self._db.execute(
                "select size, mtime_ns, fingerprint, row, ctime_ns, inode, device, recorded_ns "
                "from rows where path = ? and settings = ?",
                (_key(path), settings),
            ).fetchone()
        except sqlite3.Error:  # locked past the timeout, or damaged: analyze it again
            found = None
        if found is None or tuple(found[:2]) != (state.size, state.mtime_ns):
            self.misses += 1
            return None
        same_inode = tuple(found[4:7]) == (state.ctime_ns, state.inode, state.device)
        racy = state.mtime_ns >= found[7] - _RACY_NS
        if not same_inode or racy:
            try:
                if fingerprint() != found[2]:
                    self.misses += 1
                    return None
            except OSError:
                self.misses += 1
                return None
        try:
            row = row_from_dict(json.loads(found[3]))
        except (ValueError, KeyError, TypeError):  # written by another version: recompute
            self.misses += 1
            return None
        self.hits += 1
        return row

    def put(self, path: str, settings: str, state: FileState, print_: str, row: DumpRow) -> None:
        """Store `row` for `path`. A cache that cannot be written only costs the next scan
        time: the failure is counted in `write_failures`, never raised."""
        if self.locked:
            self.write_failures += 1
            return
        try:
            with self._db:
                self._db.execute(
                    "insert or replace into rows values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '')",
                    (_key(path), settings, state.size, state.mtime_ns, print_,
                     json.dumps(row_to_dict(row)), state.ctime_ns, state.inode, state.device,
                     time.time_ns()),
                )  # fmt: skip
        except sqlite3.Error as error:
            self._failed(error)

    def was_sent(self, path: str, settings: str, target: str) -> bool:
        """True when the entry of `path` records its event as taken by `target` (a Sentry
        project's `SentryTarget.id`). A new entry (the dump changed) records nothing."""
        if self.locked:
            return False
        try:
            found = self._db.execute(
                "select sent from rows where path = ? and settings = ?", (_key(path), settings)
            ).fetchone()
        except sqlite3.Error:
            return False
        return found is not None and target in found[0].split()

    def mark_sent(self, path: str, settings: str, target: str) -> None:
        """Record in the entry of `path` that `target` took its event (never raises, as
        `put`: the cost of a failure is an event sent again, which Sentry takes as the same)."""
        if self.locked:
            return
        try:
            with self._db:
                self._db.execute(
                    "update rows set sent = trim(sent || ' ' || ?) "
                    "where path = ? and settings = ? and instr(' ' || sent || ' ', ?) = 0",
                    (target, _key(path), settings, f" {target} "),
                )
        except sqlite3.Error as error:
            self._failed(error)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
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
