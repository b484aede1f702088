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
from postmortem.model import TextEnum
from postmortem.scan.row import DumpRow
from postmortem.scan.work.worker import WorkOptions


class EngineName(TextEnum):
    """Where a scan's dumps are analyzed (`--engine`)."""

    LOCAL = "local"
    """Worker processes on this machine."""
    DASK = "dask"
    """The workers of a Dask cluster."""
    RAY = "ray"
    """The workers of a Ray cluster."""


ENGINES = tuple(e.value for e in EngineName)
"""The engines `--engine` takes."""


class Engine(Protocol):
    """Runs the per-dump analysis of a scan: paths go out, rows come back."""

    def run(self, paths: Sequence[Path], on_row: Callable[[DumpRow], None]) -> None:
        """Scan every path, calling `on_row` in this process as each row arrives, once per
        path. Raises KeyboardInterrupt, once the work is stopped, when interrupted."""


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """Which engine a scan runs on, and where it is."""

    name: EngineName = EngineName.LOCAL
    address: str | None = None
    """The Dask scheduler (``tcp://HOST:PORT``) or the Ray cluster (``HOST:PORT``, or
    ``ray://HOST:PORT``); None for the local engine, and for Ray's default cluster."""


def choose_engine(
    name: EngineName | str, scheduler: str | None, address: str | None
) -> EngineChoice:
    """The engine `--engine`, `--scheduler` (Dask's) and `--address` (Ray's) name.

    Raises:
        BadOption: an unknown engine, or an address given to the engine that does not take it.
    """
    engine = _engine_name(name)
    if scheduler is not None and engine is not EngineName.DASK:
        raise BadOption("--scheduler", "is for --engine dask")
    if address is not None and engine is not EngineName.RAY:
        raise BadOption("--address", "is for --engine ray")
    return EngineChoice(engine, scheduler if engine is EngineName.DASK else address)


def _engine_name(name: EngineName | str) -> EngineName:
    try:
        return EngineName(name)
    except ValueError:
        raise BadOption("--engine", f"{name}: not one of {', '.join(ENGINES)}") from None


def check_engine(choice: EngineChoice) -> None:
    """Refuse, before any work, an engine that cannot be used.

    Raises:
        BadOption: an unknown engine, or a scheduler address missing or given for no use.
        MissingExtra: the engine's packages are not installed.
    """
    name = _engine_name(choice.name)
    if name is EngineName.LOCAL:
        if choice.address is not None:
            raise BadOption("--scheduler", "is for --engine dask")
        return
    if name is EngineName.RAY:
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
    if choice.name is EngineName.RAY:
        from postmortem.scan.engines.ray_cluster import RayEngine

        return RayEngine(choice.address, work, timeout_s)
    if choice.name is EngineName.DASK:
        from postmortem.scan.engines.dask_cluster import DaskEngine

        return DaskEngine(choice.address or "", work, timeout_s)
    from postmortem.scan.engines.pool import WorkerPool

    return WorkerPool(jobs, work, timeout_s, memo=memo)
