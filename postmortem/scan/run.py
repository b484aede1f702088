"""A whole scan: find the dumps, reuse cached rows, analyze the rest in parallel, group them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from postmortem._version import __version__
from postmortem.analysis.signature import SIGNATURE_VERSION
from postmortem.errors import ToolNotFound
from postmortem.scan.cache import FileState, ScanCache
from postmortem.scan.discover import Candidate, iter_dumps
from postmortem.scan.fingerprint import fingerprint
from postmortem.scan.group import CoarseGroup, Group, coarse_groups, group_rows
from postmortem.scan.names import parse_name
from postmortem.scan.pool import WorkerPool
from postmortem.scan.row import STATUS_ERROR, STATUS_OK, DumpRow, error_row
from postmortem.scan.worker import REPORT_FAILED, WorkOptions, report_path, with_names
from postmortem.tools import find_tool, tool_version

Progress = Callable[[int, int, int], None]
"""Called as rows arrive with (dumps done, errors so far, dumps to do)."""


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """How to scan: the per-dump work, parallelism, limits, filters and the cache."""

    work: WorkOptions
    jobs: int = 1
    timeout_s: float = 300.0
    """Seconds one dump may take before its worker is killed and it becomes a timeout row."""
    follow_symlinks: bool = False
    since: float | None = None
    """Unix seconds: dumps written before are left out."""
    cache_path: Path | None = None
    """The cache file; None: no cache (`--no-cache`)."""
    memo: bool = True
    """Disassemble each (cubin, function) once: shared through a directory beside the cache
    (``<cache>.disasm``), or once per worker without a cache; False: once per dump."""


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a scan found."""

    rows: tuple[DumpRow, ...]
    """One per dump scanned, in path order."""
    groups: tuple[Group, ...]
    coarse: tuple[CoarseGroup, ...]
    found: int
    """Dumps discovered, before --since."""
    left_out: int
    """Dumps left out by --since."""
    interrupted: bool
    """True when Ctrl-C stopped the scan: `rows` holds what was finished."""
    seconds: float
    cache_hits: int

    @property
    def errors(self) -> tuple[DumpRow, ...]:
        return tuple(row for row in self.rows if row.failed)


def settings_key(work: WorkOptions) -> str:
    """A digest of every setting a row depends on: a cached row is reused only under the same
    (the nvdisasm actually found, and its version, included)."""
    localize = work.analyze.localize
    settings = [
        __version__, SIGNATURE_VERSION, work.rules.name, work.rules.digest,
        _tool_identity("nvdisasm", localize.nvdisasm) if localize.disassemble else None,
        [(m.old, m.new) for m in localize.path_maps], [str(d) for d in localize.source_dirs],
        localize.disassemble, str(localize.nvdisasm), work.analyze.cuda_gdb,
        str(work.analyze.cuda_gdb_path), list(work.name_patterns),
        str(work.reports_dir) if work.reports_dir else None,
        work.report_format if work.reports_dir else None,
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]


def _tool_identity(name: str, explicit: str | Path | None) -> str:
    try:
        path = find_tool(name, explicit)
    except ToolNotFound:
        return "missing"
    return f"{path} {tool_version(path)}"


def run_scan(
    roots: Sequence[Path], options: ScanOptions, progress: Progress | None = None
) -> ScanResult:
    """Scan every dump under `roots`. Ctrl-C ends it early with what was finished."""
    started = time.monotonic()
    candidates = list(iter_dumps(roots, follow_symlinks=options.follow_symlinks))
    todo = [c for c in candidates if not _before_since(c.path, options.since)]
    rows: list[DumpRow] = []
    state = _Tally(progress, len(todo))
    cache = ScanCache(options.cache_path) if options.cache_path else None
    interrupted = False
    try:
        settings = settings_key(options.work) if cache else ""
        fresh, seen = _from_cache(todo, cache, settings, options.work, rows, state)
        pool = WorkerPool(options.jobs, options.work, options.timeout_s, memo=_memo(options))
        pool.run(fresh, lambda row: _arrived(row, cache, settings, seen, options.work, rows, state))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        hits = cache.hits if cache else 0
        if cache is not None:
            cache.close()
    kept = _since_kept(rows, todo, options.since)
    kept.sort(key=lambda r: r.path)
    groups = group_rows(kept)
    return ScanResult(
        rows=tuple(kept), groups=groups, coarse=coarse_groups(groups), found=len(candidates),
        left_out=len(candidates) - len(todo) + len(rows) - len(kept), interrupted=interrupted,
        seconds=time.monotonic() - started, cache_hits=hits,
    )  # fmt: skip


def _memo(options: ScanOptions) -> Path | bool:
    if options.memo and options.cache_path is not None:
        return options.cache_path.with_name(options.cache_path.name + ".disasm")
    return options.memo


def _since_kept(rows: list[DumpRow], todo: list[Candidate], since: float | None) -> list[DumpRow]:
    """The rows of dumps written since `since`, by their own time. A path that could not be
    read or listed has none: it was kept or left out by its mtime already (`_before_since`;
    a folder's mtime moves when a dump is written into it)."""
    if since is None:
        return list(rows)
    unread = {str(c.path) for c in todo if c.unreadable is not None}
    return [r for r in rows if r.time >= since or r.path in unread]


def _before_since(path: Path, since: float | None) -> bool:
    # A dump's own timestamp is never later than its file's mtime, so an older mtime is enough.
    if since is None:
        return False
    try:
        return os.stat(path).st_mtime < since
    except OSError:
        return False


@dataclass(slots=True)
class _Tally:
    progress: Progress | None
    total: int
    done: int = 0
    errors: int = 0

    def add(self, row: DumpRow) -> None:
        self.done += 1
        self.errors += int(row.failed)
        if self.progress is not None:
            self.progress(self.done, self.errors, self.total)


def _file_state(path: Path) -> FileState | None:
    try:
        return FileState.of(os.stat(path))
    except OSError:
        return None


def _from_cache(
    todo: list[Candidate],
    cache: ScanCache | None,
    settings: str,
    work: WorkOptions,
    rows: list[DumpRow],
    state: _Tally,
) -> tuple[list[Path], dict[str, tuple[FileState, str]]]:
    """Rows for the unchanged dumps; the paths that need an analysis, with their stat and
    fingerprint taken before it (a dump that changes while it is analyzed is then seen as
    changed at the next scan)."""
    fresh: list[Path] = []
    seen: dict[str, tuple[FileState, str]] = {}
    for candidate in todo:
        if candidate.unreadable is not None:
            row = error_row(str(candidate.path), 0, 0.0, STATUS_ERROR, candidate.unreadable)
            rows.append(with_names(row, parse_name(candidate.path.name, work.name_patterns)))
            state.add(rows[-1])
            continue
        state_now = _file_state(candidate.path) if cache else None
        hit = None
        if cache and state_now:
            hit = cache.get(
                _cache_path(candidate.path), settings, state_now,
                partial(fingerprint, candidate.path),
            )  # fmt: skip
        if hit is not None:  # the path as given this time, however it was spelled before
            hit = replace(hit, path=str(candidate.path), cached=True)
        if hit is not None and _report_present(hit, work):
            rows.append(hit)
            state.add(hit)
            continue
        fresh.append(candidate.path)
        if cache and state_now:
            with contextlib.suppress(OSError):  # the analysis will say why it is unreadable
                seen[str(candidate.path)] = (state_now, fingerprint(candidate.path))
    return fresh, seen


def _cache_path(path: str | Path) -> str:
    return os.path.abspath(path)


def _report_present(row: DumpRow, work: WorkOptions) -> bool:
    expected = report_path(row.path, work)
    if expected is None or row.failed:
        return True
    return row.report == str(expected) and expected.is_file()


def _arrived(
    row: DumpRow,
    cache: ScanCache | None,
    settings: str,
    seen: dict[str, tuple[FileState, str]],
    work: WorkOptions,
    rows: list[DumpRow],
    state: _Tally,
) -> None:
    row = with_names(row, parse_name(Path(row.path).name, work.name_patterns))
    rows.append(row)
    state.add(row)
    if cache is None or row.status not in (STATUS_OK, STATUS_ERROR) or row.degraded:
        return
    if row.error and row.error.startswith(REPORT_FAILED):
        return
    if row.path in seen:
        state_before, print_ = seen[row.path]
        cache.put(_cache_path(row.path), settings, state_before, print_, row)
