"""Where a scan's per-dump analyses run: worker processes on this machine, or a Dask or Ray
cluster.

An engine takes paths and gives back one row per path; everything else of a scan (the
cache, the grouping, the index, the Sentry events) stays in the process that runs it. The
local pool (`postmortem.scan.engines.pool.WorkerPool`) is the default; `--engine dask` sends the
dumps' paths to an existing Dask cluster whose workers read the dumps themselves
(`postmortem.scan.engines.dask_cluster`); `--engine ray` sends them to a Ray cluster in the same way
(`postmortem.scan.engines.ray_cluster`). Either way a dump that overruns its time limit is a
"timeout" row, one whose worker died a "crashed" row, one that cannot be read an "error"
row, and no dump is lost or counted twice.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from postmortem.errors import BadOption, MissingExtra
from postmortem.scan.row import DumpRow
from postmortem.scan.work.worker import WorkOptions

ENGINES = ("local", "dask", "ray")
"""The engines `--engine` takes."""


class Engine(Protocol):
    """Runs the per-dump analysis of a scan: paths go out, rows come back."""

    def run(self, paths: Sequence[Path], on_row: Callable[[DumpRow], None]) -> None:
        """Scan every path, calling `on_row` in this process as each row arrives, once per
        path. Raises KeyboardInterrupt, once the work is stopped, when interrupted."""


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """Which engine a scan runs on, and where it is."""

    name: str = "local"
    """"local": worker processes on this machine; "dask" or "ray": the workers of a cluster."""
    address: str | None = None
    """The Dask scheduler (``tcp://HOST:PORT``) or the Ray cluster (``HOST:PORT``, or
    ``ray://HOST:PORT``); None for the local engine, and for Ray's default cluster."""


def choose_engine(name: str, scheduler: str | None, address: str | None) -> EngineChoice:
    """The engine `--engine`, `--scheduler` (Dask's) and `--address` (Ray's) name.

    Raises:
        BadOption: an address given to the engine that does not take it.
    """
    if scheduler is not None and name != "dask":
        raise BadOption("--scheduler", "is for --engine dask")
    if address is not None and name != "ray":
        raise BadOption("--address", "is for --engine ray")
    return EngineChoice(name, scheduler if name == "dask" else address)


def check_engine(choice: EngineChoice) -> None:
    """Refuse, before any work, an engine that cannot be used.

    Raises:
        BadOption: an unknown engine, or a scheduler address missing or given for no use.
        MissingExtra: the engine's packages are not installed.
    """
    if choice.name not in ENGINES:
        raise BadOption("--engine", f"{choice.name}: not one of {', '.join(ENGINES)}")
    if choice.name == "local":
        if choice.address is not None:
            raise BadOption("--scheduler", "is for --engine dask")
        return
    if choice.name == "ray":
        if importlib.util.find_spec("ray") is None:
            raise MissingExtra("--engine ray", "ray", "ray")
        return
    if not choice.address:
        raise BadOption("--engine", "dask needs --scheduler tcp://HOST:PORT (the scheduler)")
    if importlib.util.find_spec("distributed") is None:
        raise MissingExtra("--engine dask", "dask", "distributed")


def open_engine(
    choice: EngineChoice, work: WorkOptions, timeout_s: float, *, jobs: int, memo: Path | bool
) -> Engine:
    """The engine `choice` names, for dumps scanned with `work`, `timeout_s` seconds each.

    `jobs` and `memo` are the local pool's (see `WorkerPool`); a Dask cluster has its own
    workers, and each remembers disassemblies in its own memory; so has a Ray cluster.
    """
    if choice.name == "ray":
        from postmortem.scan.engines.ray_cluster import RayEngine

        return RayEngine(choice.address, work, timeout_s)
    if choice.name == "dask":
        from postmortem.scan.engines.dask_cluster import DaskEngine

        return DaskEngine(choice.address or "", work, timeout_s)
    from postmortem.scan.engines.pool import WorkerPool

    return WorkerPool(jobs, work, timeout_s, memo=memo)
