"""A scan's per-dump analyses on a Ray cluster (`--engine ray [--address HOST:PORT]`).

The shape of the Dask engine (`postmortem.scan.engines.dask_cluster`), for teams whose serving stack
already runs Ray (vLLM's does): paths go out, rows come back, each dump is one Ray task that
reads the dump itself, with the scan's options made absolute; a worker process remembers
the disassemblies of every task it runs. The workers must see the dumps (and `--reports`,
`--source-dir`) at the same absolute paths as this process, and have postmortem (with its
tools) installed. Without `--address`, Ray's own rule applies: the cluster in `RAY_ADDRESS`,
else a Ray started for this scan on this machine.

A task past `--timeout` is a "timeout" row (its analysis is left to finish in its worker, as
on Dask); a task whose worker died on each of Ray's tries is a "crashed" row; any other
failure an "error" row. One row comes back per dump, unless the cluster itself dies (its
raylet, a node, the control store): that ends the scan with one line, `EngineDied`.

A Ray started for the scan keeps its session folder (sockets, logs) in a temporary folder of
its own, removed when the scan ends; without a token of the user's, it is given one in its
environment, so that Ray writes none to ``~/.ray``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from postmortem.errors import EngineDied, EngineUnreachable, MissingExtra
from postmortem.scan.engines.dask_cluster import oneline, portable, scan_task
from postmortem.scan.row import DumpRow, RowStatus
from postmortem.scan.work.worker import WorkOptions, lost_row, report_path
from postmortem.urls import absolute_path, is_url

CONNECT_TIMEOUT_S = 10.0
"""How long to wait for the cluster at `--address` to answer."""
START_TIMEOUT_S = 60.0
"""How long a Ray started for the scan (no `--address`) may take to start."""
_CONNECT_GRACE_S = 2.0
"""How much longer than its own timeout a connection may take before it is given up on."""


class RayEngine:
    """Scans dumps as the tasks of the Ray cluster at `address` (None: Ray's default)."""

    def __init__(self, address: str | None, work: WorkOptions, timeout_s: float) -> None:
        self._address = address
        self._work = work
        self._timeout_s = timeout_s
        self._session: str | None = None  # the temporary folder of a Ray started here
        self._died: tuple[type[BaseException], ...] = ()
        self._done = 0

    def run(self, paths: Sequence[Path], on_row: Callable[[DumpRow], None]) -> None:
        """Scan every path on the cluster, calling `on_row` here as each row arrives.

        Raises:
            EngineUnreachable: the cluster cannot be reached.
            EngineDied: the cluster died before every row came back.
            MissingExtra: Ray is not installed.
            KeyboardInterrupt: interrupted, once the tasks not yet finished are cancelled.
        """
        if not paths:
            return
        ray = _ray()
        self._died = _died(ray)
        # Without an address: RAY_ADDRESS's cluster, else a Ray of this scan's own ("local"),
        # never the last one started on this machine, which Ray's default would try, gone or not.
        address = self._address
        if address is None and not os.environ.get("RAY_ADDRESS"):
            address = "local"
        with _own_token(address == "local"):
            try:
                self._connect(ray, address)
                self._scan(ray, paths, on_row)
            except self._died as error:
                raise EngineDied(
                    "--engine ray", _death(error), self._done, len(paths) - self._done
                ) from None
            finally:
                with contextlib.suppress(Exception):  # the cluster gone: nothing left to close
                    ray.shutdown()
                if self._session is not None:
                    shutil.rmtree(self._session, ignore_errors=True)

    def _connect(self, ray: Any, address: str | None) -> None:
        # ray.init keeps retrying an address that does not answer (minutes): it runs in a
        # thread of its own, given up on at CONNECT_TIMEOUT_S or the scan's --timeout.
        if self._address is None:
            limit = START_TIMEOUT_S
        else:
            limit = min(CONNECT_TIMEOUT_S, self._timeout_s)
        made: list[bool] = []
        failed: list[Exception] = []
        own: dict[str, Any] = {}
        if address == "local":
            self._session = tempfile.mkdtemp(prefix="postmortem-ray-")
            own["_temp_dir"] = self._session

        def connect() -> None:
            try:
                ray.init(
                    address=address, include_dashboard=False, log_to_driver=False,
                    logging_level=logging.ERROR, configure_logging=True, **own,
                )  # fmt: skip
                made.append(True)
            except Exception as error:  # ConnectionError, ValueError for a bad address
                failed.append(error)

        thread = threading.Thread(target=connect, name="postmortem-ray-connect", daemon=True)
        deadline = time.monotonic() + limit + _CONNECT_GRACE_S
        with _stderr_kept() as said:
            refused = False
            if address == "local":
                # Started, not reached: in this thread, as the processes Ray starts end
                # with the thread that started them (PR_SET_PDEATHSIG).
                connect()
            else:
                thread.start()
            while thread.is_alive() and time.monotonic() < deadline and not refused:
                thread.join(0.2)
                refused = _NO_TOKEN in said()
        option = "--address" if self._address is not None else "--engine ray"
        where = self._address or "(Ray's default: RAY_ADDRESS, else a Ray started here)"
        if made:
            return
        if refused:
            raise EngineUnreachable(option, where, _TOKEN_REASON)
        if failed:
            raise EngineUnreachable(option, where, oneline(failed[0]))
        raise EngineUnreachable(
            option, where, f"no answer in {limit:g} s (no Ray cluster at that address?)"
        )

    def _scan(self, ray: Any, paths: Sequence[Path], on_row: Callable[[DumpRow], None]) -> None:
        work = portable(self._work)
        # Dumps given by URL are read by the workers from the store, with the options the
        # command line gave (--storage-option), which only this process's environment holds.
        storage = {k: v for k, v in os.environ.items() if k.startswith("FSSPEC_")}
        task = ray.remote(scan_task)
        waiting: dict[Any, Path] = {}
        for path in paths:
            ref = task.remote(
                absolute_path(path), str(path), work, self._timeout_s,
                storage if is_url(path) else {}, "Ray",
            )  # fmt: skip
            waiting[ref] = path
        try:
            pending = list(waiting)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                if pending:  # and every other one ready by now, without waiting
                    more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                    ready += more
                for ref in ready:
                    on_row(self._row(ray, ref, waiting.pop(ref)))
                    self._done += 1
        except KeyboardInterrupt:
            for ref in waiting:
                with contextlib.suppress(Exception):  # stopping anyway
                    ray.cancel(ref, force=True)
            raise

    def _row(self, ray: Any, ref: Any, path: Path) -> DumpRow:
        try:
            row: DumpRow = ray.get(ref)
        except ray.exceptions.WorkerCrashedError:
            message = "worker process died (Ray gave up on the task: its workers died)"
            return lost_row(path, RowStatus.CRASHED, message, 0.0)
        except self._died:
            raise  # the cluster, not this dump: the scan ends
        except Exception as error:
            cause = getattr(error, "cause", None) or error  # a RayTaskError's own exception
            message = f"internal error: {type(cause).__name__}: {oneline(cause)}"
            return lost_row(path, RowStatus.ERROR, message, 0.0)
        # The report as a local scan names it (the worker wrote it under the absolute path).
        report = report_path(row.path, self._work) if row.report is not None else None
        return replace(row, report=None if report is None else str(report))


def _died(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors that say the cluster died, not a task."""
    raised = ray.exceptions
    return (raised.LocalRayletDiedError, raised.NodeDiedError, raised.RaySystemError)


def _death(error: BaseException) -> str:
    # Ray's own words, first line, less its "Check raylet.out" advice (the session is gone).
    return oneline(error).split(". Check ")[0].rstrip(".")


_AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@contextlib.contextmanager
def _own_token(started: bool) -> Iterator[None]:
    """For a Ray `started` here, a token in this process's environment when the user has
    none, so that `ray.init` writes none to ``~/.ray/auth_token`` (the environment is put
    back after: `ray.init` sets RAY_AUTH_MODE in it too)."""
    home = Path.home() / ".ray" / "auth_token"
    if not started or any(v in os.environ for v in _AUTH) or home.exists():
        yield
        return
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    try:
        yield
    finally:
        for variable in _AUTH:
            os.environ.pop(variable, None)


_NO_TOKEN = "InvalidAuthToken"
_TOKEN_REASON = (
    "the cluster refused this process's token (Ray's token authentication): set "
    "RAY_AUTH_MODE=token, with the cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token"
)


@contextlib.contextmanager
def _stderr_kept() -> Iterator[Callable[[], str]]:
    """What Ray's C++ client writes to this process's stderr meanwhile (a line a second while
    it retries an address), kept out of the scan's stderr: the context gives a function that
    returns the text so far."""
    with tempfile.TemporaryFile() as kept:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(kept.fileno(), 2)
        try:
            yield lambda: os.pread(kept.fileno(), 1 << 16, 0).decode("utf-8", "replace")
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _ray() -> Any:
    try:
        import ray  # type: ignore[import-untyped, unused-ignore]
    except ImportError as error:
        raise MissingExtra("--engine ray", "ray", f"ray ({error})") from None
    return ray
