"""A whole scan: find the dumps, reuse cached rows, analyze the rest in parallel, group them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from postmortem._version import __version__
from postmortem.analysis.fleet.signature import SIGNATURE_VERSION
from postmortem.dumpnames import parse_name
from postmortem.errors import ScanCacheError, ToolNotFound
from postmortem.scan.discover.beside import with_neighbours
from postmortem.scan.discover.local import Candidate, iter_dumps
from postmortem.scan.engines.choose import EngineChoice, EngineName, open_engine
from postmortem.scan.events.sentry import SentrySink, SentryTarget
from postmortem.scan.fleet.group import CoarseGroup, Group, coarse_groups, group_rows
from postmortem.scan.fleet.hardware import Gpu, join_xids, judge_fleet
from postmortem.scan.fleet.known.judge import mark_groups
from postmortem.scan.fleet.known.model import KnownCrashes
from postmortem.scan.fleet.owners import OwnerRule, owners_of
from postmortem.scan.fleet.runs import with_runs
from postmortem.scan.fleet.xid import find_host_xids
from postmortem.scan.row import DumpRow, RowStatus, error_row
from postmortem.scan.store.cache import FileState, ScanCache
from postmortem.scan.store.history import ScanHistory, apply_history
from postmortem.scan.work.fingerprint import fingerprint
from postmortem.scan.work.instruction import fill_instructions
from postmortem.scan.work.worker import REPORT_FAILED, WorkOptions, report_path, with_names
from postmortem.tools import Tool, tool_version
from postmortem.urls import DumpUrl, absolute_path

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
    engine: EngineChoice = EngineChoice()
    """Where the dumps are analyzed: worker processes here, or a Dask cluster."""
    sentry: SentryTarget | None = None
    """Send one event per dump there (`--sentry-dsn`); `work.triage` must be set."""
    owners: tuple[OwnerRule, ...] | None = None
    """The rules of an owners file (`--owners`): each group is given its owners."""
    host_logs: tuple[Path, ...] = ()
    """Kernel logs (`--host-log`) whose Xid lines are joined to the GPUs that faulted."""
    known: KnownCrashes | None = None
    """The repository's known crashes (`--known`): each group is marked known, new or
    regressed against them."""


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a scan found."""

    rows: tuple[DumpRow, ...]
    """One per dump scanned, in path order."""
    groups: tuple[Group, ...]
    coarse: tuple[CoarseGroup, ...]
    gpus: tuple[Gpu, ...]
    """Every GPU that faulted, with its verdict (`postmortem.scan.fleet.hardware`)."""
    found: int
    """Dumps discovered, before --since."""
    left_out: int
    """Dumps left out by --since."""
    interrupted: bool
    """True when Ctrl-C stopped the scan: `rows` holds what was finished."""
    seconds: float
    cache_hits: int
    warnings: tuple[str, ...] = ()
    """What went wrong besides the dumps, one line each (a Sentry that was not reached)."""
    history: ScanHistory | None = None
    """This scan among the scans of the same roots; None without a cache."""
    known: KnownCrashes | None = None
    """The known-crashes file the groups were marked against (`--known`)."""
    host_xids: tuple[int, int] | None = None
    """With `--host-log`: the Xid lines read (of `postmortem.scan.fleet.xid.JOINED_XIDS`), and
    how many of them joined no GPU that faulted."""

    @property
    def errors(self) -> tuple[DumpRow, ...]:
        return tuple(row for row in self.rows if row.failed)


def settings_key(work: WorkOptions) -> str:
    """A digest of every setting a row depends on: a cached row is reused only under the same
    (the nvdisasm actually found, and its version, included)."""
    localize = work.analyze.localize
    settings = [
        __version__, SIGNATURE_VERSION, work.rules.name, work.rules.digest,
        _tool_identity("nvdisasm", localize.nvdisasm) if localize.nvdisasm.run else None,
        [(m.old, m.new) for m in localize.sources.maps],
        [str(d) for d in localize.sources.dirs], localize.nvdisasm.run,
        str(localize.nvdisasm.path), work.analyze.cuda_gdb.run,
        str(work.analyze.cuda_gdb.path), list(work.name_patterns),
        str(work.reports_dir) if work.reports_dir else None,
        work.report_format if work.reports_dir else None,
        # Rows of the lean analysis carry the faulting GPU, SM and instruction.
        "rows-2", work.lean,
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]


def _tool_identity(name: str, tool: Tool) -> str:
    try:
        path = tool.locate(name).path
    except ToolNotFound:
        return "missing"
    return f"{path} {tool_version(path)}"


def run_scan(
    roots: Sequence[Path], options: ScanOptions, progress: Progress | None = None
) -> ScanResult:
    """Scan every dump under `roots`. Ctrl-C ends it early with what was finished."""
    started = time.monotonic()
    # Before the dumps: a host log that cannot be read is an error before any work.
    host = find_host_xids(options.host_logs) if options.host_logs else None
    unfollowed: list[Path] = []
    candidates = list(
        iter_dumps(roots, follow_symlinks=options.follow_symlinks, unfollowed=unfollowed)
    )
    todo = [c for c in candidates if not _before_since(c, options.since)]
    rows: list[DumpRow] = []
    state = _Tally(progress, len(todo))
    cache, cache_warnings = _open_cache(options.cache_path)
    events = _Events(SentrySink(options.sentry)) if options.sentry else None
    interrupted = False
    warnings: tuple[str, ...] = ()
    settings = ""  # for `events.close` when Ctrl-C comes before the settings are known
    code_cache, scratch = _code_cache(options, cache)
    try:
        settings = settings_key(options.work) if cache else ""
        fresh, seen = _from_cache(todo, cache, settings, options, rows, state)
        work = replace(options.work, code_cache=code_cache, remember_code=options.memo)
        engine = open_engine(
            options.engine, work, options.timeout_s, jobs=options.jobs, memo=_memo(options),
        )  # fmt: skip
        scan = _Arrivals(cache, settings, seen, options.work, rows, state, events)
        engine.run(fresh, scan.arrived)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        hits = cache.hits if cache else 0
        if events is not None:
            warnings = events.close(cache, settings)
        if cache is not None:
            cache_warnings += cache.warnings()
            cache.close()
        rows[:] = fill_instructions(rows, code_cache)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    kept, beside_warnings = with_neighbours(_since_kept(rows, todo, options.since))
    kept.sort(key=lambda r: r.path)
    groups, gpus = judge_fleet(kept, group_rows(kept))
    gpus, unjoined = join_xids(gpus, host.xids if host else ())
    if options.owners is not None:
        rules = options.owners
        groups = tuple(replace(g, ownership=owners_of(g.signature, rules)) for g in groups)
    scans = None
    if cache is not None and not cache.locked:  # locked: the history would wait for it too
        groups, scans = apply_history(cache.path, roots, groups, kept, record=not interrupted)
    if options.known is not None:
        groups = mark_groups(groups, kept, options.known, time.time())
    groups = with_runs(groups, kept, roots)
    return ScanResult(
        rows=tuple(kept), groups=groups, coarse=coarse_groups(groups), gpus=gpus, history=scans,
        known=options.known,
        host_xids=None if host is None else (host.lines, unjoined), found=len(candidates),
        left_out=len(candidates) - len(todo) + len(rows) - len(kept), interrupted=interrupted,
        seconds=time.monotonic() - started, cache_hits=hits,
        warnings=(
            *_unfollowed_warning(unfollowed), *cache_warnings,
            *_credentials_warning(kept, options.engine), *warnings,
            *(host.warnings if host else ()), *beside_warnings,
        ),
    )  # fmt: skip


_NO_CREDENTIALS = ("NoCredentialsError", "Unable to locate credentials", "DefaultCredentialsError")


def _credentials_warning(rows: Sequence[DumpRow], engine: EngineChoice) -> tuple[str, ...]:
    """On a Dask or Ray cluster the objects are read by the workers, with the workers' own
    environment: rows failing for want of credentials say so once, with where to fix it."""
    if engine.name is EngineName.LOCAL:
        return ()
    failed = [r for r in rows if r.error and any(word in r.error for word in _NO_CREDENTIALS)]
    if not failed:
        return ()
    return (
        f"{len(failed)} dump(s) could not be read on the {engine.name.capitalize()} workers for "
        "want of credentials (the workers read the store with their own environment, not this "
        "one): give the workers the store's credentials (their environment or config files), "
        "or pass them with --storage-option",
    )


def _code_cache(options: ScanOptions, cache: ScanCache | None) -> tuple[Path | None, str | None]:
    """Where the workers remember each function's instructions (the scan cache; without one,
    a file of this scan's own, removed after it), and that scratch folder. A Dask cluster's
    workers cannot reach this machine's files: each remembers in its memory."""
    if options.engine.name is not EngineName.LOCAL or not options.memo or not options.work.lean:
        return None, None
    if cache is not None:
        return cache.path, None
    scratch = tempfile.mkdtemp(prefix="postmortem-scan-code-")
    return Path(scratch) / "code.sqlite", scratch


def _open_cache(path: Path | None) -> tuple[ScanCache | None, tuple[str, ...]]:
    """The scan cache, or none and why: a cache that cannot be opened or written (a full
    disk, a read-only home) costs the scan its speed-up, never the scan."""
    if path is None:
        return None, ()
    try:
        return ScanCache(path), ()
    except ScanCacheError as error:
        return None, (f"{error}; scanned without the cache (--no-cache says so quietly)",)


def _unfollowed_warning(links: Sequence[Path]) -> tuple[str, ...]:
    if not links:
        return ()
    many = len(links) != 1
    return (
        f"{len(links)} symbolic link{'s' if many else ''} lead{'' if many else 's'} out of the "
        f"scanned folders and {'were' if many else 'was'} not followed (first: {links[0]}); "
        "--follow-symlinks follows them",
    )


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


def _before_since(candidate: Candidate, since: float | None) -> bool:
    # A dump's own timestamp is never later than its file's mtime, so an older mtime is enough.
    if since is None:
        return False
    if candidate.stored is not None:  # in an object store: its modification time there
        return 0.0 < candidate.stored.mtime < since
    try:
        return os.stat(candidate.path).st_mtime < since
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


def _file_state(candidate: Candidate) -> FileState | None:
    stored = candidate.stored
    if stored is not None:  # an object's size and time; its version tag is its fingerprint
        return FileState(stored.size, int(stored.mtime * 1e9), 0, 0, 0)
    try:
        return FileState.of(os.stat(candidate.path))
    except OSError:
        return None


def _from_cache(
    todo: list[Candidate],
    cache: ScanCache | None,
    settings: str,
    options: ScanOptions,
    rows: list[DumpRow],
    state: _Tally,
) -> tuple[list[Path], dict[str, tuple[FileState, str]]]:
    """Rows for the unchanged dumps; the paths that need an analysis, with their stat and
    fingerprint taken before it (a dump that changes while it is analyzed is then seen as
    changed at the next scan). A dump whose event Sentry has not taken yet is analyzed
    again, for its event."""
    work = options.work
    fresh: list[Path] = []
    seen: dict[str, tuple[FileState, str]] = {}
    for candidate in todo:
        if candidate.unreadable is not None:
            row = error_row(str(candidate.path), 0, 0.0, RowStatus.ERROR, candidate.unreadable)
            rows.append(with_names(row, parse_name(candidate.path.name, work.name_patterns)))
            state.add(rows[-1])
            continue
        state_now = _file_state(candidate) if cache else None
        hit = None
        if cache and state_now:
            hit = cache.get(
                absolute_path(candidate.path), settings, state_now,
                partial(_fingerprint, candidate),
            )  # fmt: skip
        if hit is not None:  # the path as given this time, however it was spelled before
            hit = replace(hit, path=str(candidate.path), cached=True)
        if hit is not None and _report_present(hit, work) and _sent(hit, cache, settings, options):
            rows.append(hit)
            state.add(hit)
            continue
        fresh.append(candidate.path)
        if cache and state_now:
            with contextlib.suppress(OSError):  # the analysis will say why it is unreadable
                seen[str(candidate.path)] = (state_now, _fingerprint(candidate))
    return fresh, seen


def _fingerprint(candidate: Candidate) -> str:
    if candidate.stored is not None:
        return candidate.stored.fingerprint(DumpUrl(str(candidate.path)))
    return fingerprint(candidate.path)


def _sent(row: DumpRow, cache: ScanCache | None, settings: str, options: ScanOptions) -> bool:
    """True unless a Sentry event is asked for and the cache has no record of it sent."""
    if options.sentry is None or row.signature is None or cache is None:
        return True
    return cache.was_sent(absolute_path(row.path), settings, options.sentry.id)


def _report_present(row: DumpRow, work: WorkOptions) -> bool:
    expected = report_path(row.path, work)
    if expected is None or row.failed:
        return True
    return row.report == str(expected) and expected.is_file()


@dataclass(slots=True)
class _Events:
    """The Sentry events of a scan: sent as rows arrive, recorded in the cache once taken."""

    sink: SentrySink
    pending: dict[str, str] = field(default_factory=dict)
    """Event id: the cache key of its dump."""

    def send(self, row: DumpRow) -> None:
        event_id = self.sink.send(row)
        if event_id is not None:
            self.pending[event_id] = absolute_path(row.path)

    def close(self, cache: ScanCache | None, settings: str) -> tuple[str, ...]:
        """Wait for Sentry; record what it took; the warning, if any."""
        delivery = self.sink.close()
        if cache is not None:
            for event_id in delivery.sent:
                cache.mark_sent(self.pending[event_id], settings, self.sink.target.id)
        warning = delivery.warning(self.sink.target, "they are sent again at the next scan")
        return (warning,) if warning else ()


@dataclass(slots=True)
class _Arrivals:
    """What the scan does with each row an engine gives back."""

    cache: ScanCache | None
    settings: str
    seen: dict[str, tuple[FileState, str]]
    work: WorkOptions
    rows: list[DumpRow]
    state: _Tally
    events: _Events | None

    def arrived(self, row: DumpRow) -> None:
        row = with_names(row, parse_name(Path(row.path).name, self.work.name_patterns))
        self._cache(row)
        if self.events is not None:
            self.events.send(row)
        self.rows.append(replace(row, triage=None))  # its Markdown is sent; not kept
        self.state.add(row)

    def _cache(self, row: DumpRow) -> None:
        cache = self.cache
        if cache is None or row.status not in (RowStatus.OK, RowStatus.ERROR) or row.degraded:
            return
        if row.error and row.error.startswith(REPORT_FAILED):
            return
        if row.path in self.seen:
            state_before, print_ = self.seen[row.path]
            cache.put(absolute_path(row.path), self.settings, state_before, print_, row)
