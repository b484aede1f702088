"""A scan's per-dump analyses on an existing Dask cluster (`--engine dask --scheduler ...`).

Paths go out, rows come back: each dump is one task, which a worker runs by reading the dump
itself, so the dumps never pass through this process. The workers must see the dumps (and
`--reports`, `--source-dir`) at the same absolute paths as this process, and have
postmortem (with its tools) installed. The task's row names the dump as the scan does, and
its report gets the same file name as a local scan's, so rows, groups and outputs are those
of a local scan of the same dumps.

The rows of dumps that give no result are those of the local pool: a task past `--timeout`
is a "timeout" row (a task's analysis runs in a thread of its own, which is left to finish
on the worker, as a Dask task cannot be killed without its whole worker, and that worker
may be running someone else's work); a task whose workers died (Dask's `KilledWorker`) is a
"crashed" row; any other failure an "error" row. Dask reruns a task whose worker was lost
before it finished, so one row comes back per dump.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from postmortem.cubin.disasm_files import DisassemblyFiles
from postmortem.cubin.nvdisasm import Disassembly
from postmortem.errors import EngineUnreachable, MissingExtra
from postmortem.scan.row import DumpRow, RowStatus
from postmortem.scan.work.worker import WorkOptions, lost_row, report_path, scan_dump, with_store
from postmortem.tools import Tool
from postmortem.urls import absolute_path, as_dump_path, is_url

CONNECT_TIMEOUT_S = 10.0
_CONNECT_GRACE_S = 2.0
"""How much longer than its own timeout a connection may take before it is given up on."""
"""How long to wait for the scheduler to answer."""


class DaskEngine:
    """Scans dumps as the tasks of the Dask cluster whose scheduler is at `address`."""

    def __init__(self, address: str, work: WorkOptions, timeout_s: float) -> None:
        self._address = address
        self._work = work
        self._timeout_s = timeout_s

    def run(self, paths: Sequence[Path], on_row: Callable[[DumpRow], None]) -> None:
        """Scan every path on the cluster, calling `on_row` here as each row arrives.

        Raises:
            EngineUnreachable: the scheduler cannot be reached.
            MissingExtra: Dask's distributed package is not installed.
            KeyboardInterrupt: interrupted, once the tasks not yet finished are cancelled.
        """
        if not paths:
            return
        distributed = _distributed()
        client = self._connect(distributed)
        try:
            self._scan(client, distributed, paths, on_row)
        finally:
            with contextlib.suppress(Exception):  # the scheduler gone: nothing left to close
                client.close()

    def _connect(self, distributed: Any) -> Any:
        # Bounded by the scan's --timeout too: a scheduler that does not answer is given up
        # on no later than a dump that does not finish would be. Dask's own timeout covers a
        # refused or unroutable address, not a port that accepts and then says nothing: the
        # connection is made in a thread of its own, and given up on when it outlasts that.
        limit = min(CONNECT_TIMEOUT_S, self._timeout_s)
        made: list[Any] = []
        failed: list[Exception] = []

        def connect() -> None:
            try:
                made.append(distributed.Client(self._address, timeout=limit, set_as_default=False))
            except Exception as error:  # OSError, TimeoutError, ValueError for a bad address
                failed.append(error)

        thread = threading.Thread(target=connect, name="postmortem-dask-connect", daemon=True)
        thread.start()
        thread.join(limit + _CONNECT_GRACE_S)
        if failed:
            raise EngineUnreachable("--scheduler", self._address, oneline(failed[0]))
        if not made:
            raise EngineUnreachable(
                "--scheduler", self._address,
                f"no answer in {limit:g} s (a port that accepts connections, but no Dask "
                "scheduler behind it?)",
            )  # fmt: skip
        return made[0]

    def _scan(
        self,
        client: Any,
        distributed: Any,
        paths: Sequence[Path],
        on_row: Callable[[DumpRow], None],
    ) -> None:
        work = portable(self._work)
        # Dumps given by URL are read by the workers from the store, with the options the
        # command line gave (--storage-option), which only this process's environment holds.
        storage = {k: v for k, v in os.environ.items() if k.startswith("FSSPEC_")}
        waiting: dict[Any, Path] = {}
        for path in paths:
            future = client.submit(
                scan_task, absolute_path(path), str(path),
                work, self._timeout_s, storage if is_url(path) else {},
                key=f"postmortem-scan-{uuid.uuid4().hex}", pure=False,
            )  # fmt: skip
            waiting[future] = path
        try:
            for future in distributed.as_completed(list(waiting), loop=client.loop):
                path = waiting.pop(future)
                on_row(self._row(future, path, distributed))
        except KeyboardInterrupt:
            with contextlib.suppress(Exception):  # stopping anyway
                client.cancel(list(waiting), force=True)
            raise

    def _row(self, future: Any, path: Path, distributed: Any) -> DumpRow:
        try:
            row: DumpRow = future.result()
        except distributed.KilledWorker:
            message = "worker process died (Dask gave up on the task: its workers died)"
            return lost_row(path, RowStatus.CRASHED, message, 0.0)
        except (Exception, concurrent.futures.CancelledError) as error:
            message = f"internal error: {type(error).__name__}: {oneline(error)}"
            return lost_row(path, RowStatus.ERROR, message, 0.0)
        # The report as a local scan names it (the worker wrote it under the absolute path).
        report = report_path(row.path, self._work) if row.report is not None else None
        return replace(row, report=None if report is None else str(report))


def scan_task(
    path: str,
    name: str,
    work: WorkOptions,
    timeout_s: float,
    storage: dict[str, str] | None = None,
    engine: str = "Dask",
) -> DumpRow:
    """The row of one dump, on a Dask (or Ray) worker: `path` is opened, `name` is what the
    row says.

    The analysis runs in a thread of its own; past `timeout_s` seconds the task gives a
    timeout row and leaves it to finish. `storage` holds the client's fsspec variables
    (`FSSPEC_<PROTOCOL>`) for a dump given by URL. `engine` names the cluster in that row.
    """
    if storage:
        os.environ.update(storage)
        import fsspec.config  # type: ignore[import-untyped, unused-ignore]

        fsspec.config.set_conf_env(fsspec.config.conf)  # read again, with the client's
    options = with_store(work, _WORKER_STORE)
    dump = as_dump_path(path)
    done: list[DumpRow] = []
    started = time.monotonic()
    thread = threading.Thread(
        target=lambda: done.append(scan_dump(dump, options, name)),
        name="postmortem-scan", daemon=True,
    )  # fmt: skip
    thread.start()
    thread.join(timeout_s)
    if done:
        return done[0]
    message = (
        f"no result within {timeout_s:g} s (--timeout); the analysis was left to finish on "
        f"its {engine} worker"
    )
    return lost_row(dump, RowStatus.TIMEOUT, message, round(time.monotonic() - started, 4), name)


class _SharedStore:
    """The disassemblies of one worker process, shared by its threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._store = DisassemblyFiles(None)

    def get(self, key: str) -> Disassembly | None:
        with self._lock:
            return self._store.get(key)

    def put(self, key: str, stdout: str, result: Disassembly) -> None:
        with self._lock:
            self._store.put(key, stdout, result)


_WORKER_STORE = _SharedStore()  # one per worker process, for every task it runs


def portable(work: WorkOptions) -> WorkOptions:
    """`work` with its paths made absolute: a Dask or Ray worker runs in a folder of its own."""
    localize = work.analyze.localize
    dirs = tuple(Path(os.path.abspath(d)) for d in localize.sources.dirs)
    localize = replace(
        localize, sources=replace(localize.sources, dirs=dirs),
        nvdisasm=_absolute(localize.nvdisasm),
    )  # fmt: skip
    analyze = replace(work.analyze, localize=localize, cuda_gdb=_absolute(work.analyze.cuda_gdb))
    reports = Path(os.path.abspath(work.reports_dir)) if work.reports_dir is not None else None
    return replace(work, analyze=analyze, reports_dir=reports)


def _absolute(tool: Tool) -> Tool:
    # A bare name is looked up on the worker's PATH; a path is made absolute.
    if tool.path is None or os.sep not in str(tool.path):
        return tool
    return replace(tool, path=Path(os.path.abspath(tool.path)))


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as error:
        raise MissingExtra("--engine dask", "dask", f"distributed ({error})") from None
    return distributed


def oneline(error: BaseException) -> str:
    """The message of `error` on one line (its type's name when it has none)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__
