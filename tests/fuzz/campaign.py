"""The fuzz campaign: `python -m tests.fuzz.campaign -n 100000 --seed 1`.

Mutants of every fixture dump (see `mutators.py`) go through the pipeline of `pipeline.py`
in worker processes. Outcomes: `ok`; `error:<class>`, one of our own `PostmortemError`s
(fine); and the failures: `crash:<type>`, `slow` (a step over the time limit in CPU time;
the worker is killed at WALL_SLACK times it in wall time) and `memory` (RSS growth or
tracemalloc peak over the memory limit, or MemoryError). The steps (pipeline.py) each open
the dump and do one command's work. Exit status 1 when any mutant failed. A mutant is named
by (dump, mutator, seed); `--replay DUMP MUTATOR SEED` runs it again and prints its
traceback, and `--save DIR` writes the mutant file.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.fuzz.mutant import build, dump_names, load_seed, mutators
from tests.fuzz.pool import Pool, usable_cpus
from tests.fuzz.worker import TRACE_SLOWDOWN, WALL_SLACK, Limits, Result, Task

REPLAY = ".venv/bin/python -m tests.fuzz.campaign --replay {triple}"
_MIB = 1 << 20


def schedule(
    count: int, seed: int, dumps: Sequence[str], names: Sequence[str], trace_every: int = 10
) -> Iterator[Task]:
    """`count` tasks: every mutator once first (when `count` allows), then by weight; one
    in `trace_every` measured with tracemalloc (0: none)."""
    rng = random.Random(seed)
    entries = mutators()
    weights = [entries[name].weight for name in names]
    first = list(names)
    rng.shuffle(first)
    for index in range(count):
        name = first[index] if index < len(first) else rng.choices(names, weights)[0]
        trace = trace_every > 0 and index % trace_every == 0
        yield Task(index, rng.choice(list(dumps)), name, rng.getrandbits(32), trace)


@dataclass
class Worst:
    value: float = 0.0
    result: Result | None = None

    def offer(self, value: float, result: Result) -> None:
        if self.result is None or value > self.value:
            self.value, self.result = value, result


@dataclass
class Summary:
    """What a campaign found."""

    count: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    by_mutator: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    failures: list[Result] = field(default_factory=list)
    time: Worst = field(default_factory=Worst)
    traced: Worst = field(default_factory=Worst)
    rss: Worst = field(default_factory=Worst)
    wall_seconds: float = 0.0
    restarts: int = 0
    traced_count: int = 0
    seconds: list[float] = field(default_factory=list)

    def add(self, result: Result) -> None:
        self.count += 1
        self.outcomes[result.outcome] += 1
        self.by_mutator[result.task.mutator][result.outcome] += 1
        if result.failed:
            self.failures.append(result)
        if result.outcome == "skipped":
            return
        self.rss.offer(result.rss_bytes, result)
        if result.traced_bytes is not None:
            self.traced_count += 1
            self.traced.offer(result.traced_bytes, result)
        else:  # tracing slows the pipeline down: traced mutants are not timed
            self.seconds.append(result.seconds)
            self.time.offer(result.step_seconds, result)

    def signatures(self) -> dict[tuple[str, str], list[Result]]:
        """Failures grouped by outcome and where they happened."""
        groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
        for result in self.failures:
            where = result.ours or result.where or f"mutator {result.task.mutator}"
            groups[(result.outcome, where)].append(result)
        return groups

    def render(self, limits: Limits) -> str:
        lines = [f"{self.count:,} mutants in {self.wall_seconds:,.0f} s ({self.restarts} restarts)"]
        lines.append("outcomes: " + _counts(self.outcomes))
        if self.seconds:
            ordered = sorted(self.seconds)
            median, p99 = (ordered[int(q * (len(ordered) - 1))] for q in (0.5, 0.99))
            lines.append(
                f"time per untraced mutant (all steps): median {median * 1000:.0f} ms, "
                f"99th percentile {p99 * 1000:.0f} ms, {sum(ordered) / 3600:.2f} worker-hours"
            )
        lines.append("per mutator:")
        width = max((len(n) for n in self.by_mutator), default=0)
        lines += [f"  {n:<{width}}  {_counts(self.by_mutator[n])}" for n in sorted(self.by_mutator)]
        for label, worst, unit in (
            ("step CPU time", self.time, "s"),
            (f"tracemalloc peak ({self.traced_count:,} traced)", self.traced, "MiB"),
            ("RSS growth (VmHWM)", self.rss, "MiB"),
        ):
            if worst.result is not None:
                value = worst.value if unit == "s" else worst.value / _MIB
                lines.append(
                    f"worst {label}: {value:,.2f} {unit} ({worst.result.outcome}): "
                    f"{worst.result.task.triple}"
                )
        lines.append(
            f"limits: {limits.seconds:g} s per step (CPU; killed at x{WALL_SLACK} wall; "
            f"x{TRACE_SLOWDOWN} when traced), "
            f"{limits.memory_bytes // _MIB} MiB of RSS growth or tracemalloc peak"
        )
        groups = self.signatures()
        lines.append(f"failures: {len(self.failures)} in {len(groups)} distinct places")
        for (outcome, where), results in sorted(groups.items(), key=lambda g: -len(g[1])):
            first = results[0]
            lines.append(f"  {outcome} x{len(results)} at {where}")
            if first.where and first.where != where:
                lines.append(f"    last frame: {first.where}")
            if first.message:
                lines.append(f"    {first.step}: {first.message[:200]}")
            lines += [f"    {REPLAY.format(triple=r.task.triple)}" for r in results[:3]]
        return "\n".join(lines) + "\n"

    def as_json(self) -> dict[str, object]:
        def worst(w: Worst) -> object:
            return None if w.result is None else {"value": w.value, **asdict(w.result)}

        return {
            "count": self.count,
            "wall_seconds": self.wall_seconds,
            "outcomes": dict(self.outcomes),
            "by_mutator": {k: dict(v) for k, v in self.by_mutator.items()},
            "worst_time": worst(self.time),
            "worst_tracemalloc": worst(self.traced),
            "worst_rss": worst(self.rss),
            "failures": [asdict(r) for r in self.failures],
        }


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1]))


def run_campaign(
    count: int,
    seed: int = 1,
    jobs: int | None = None,
    limits: Limits | None = None,
    dumps: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    save: Path | None = None,
    progress: bool = False,
    trace_every: int = 10,
    part: tuple[int, int] = (0, 1),
) -> Summary:
    """Run `count` mutants; failing mutants are written to `save` when given. `part` (k, n)
    runs the k-th of n equal slices of the same schedule (the first holds every mutator's
    first mutant), so that n runs side by side make one campaign."""
    limits = limits or Limits()
    dumps = list(dumps or dump_names())
    names = list(names or mutators())
    _warm_up(dumps)
    summary = Summary()
    pool = Pool(jobs or usable_cpus(), limits)
    start = last = time.monotonic()
    index, parts = part
    tasks = schedule(count, seed, dumps, names, trace_every)
    mine = itertools.islice(tasks, count * index // parts, count * (index + 1) // parts)
    for result in pool.run(mine):
        summary.add(result)
        if result.failed and save is not None:
            save_mutant(result.task, save)
        if progress and time.monotonic() - last > 30:
            last = time.monotonic()
            rate = summary.count / (last - start)
            print(
                f"{summary.count:,}/{count:,} mutants, {len(summary.failures)} failures, "
                f"{rate:.0f}/s",
                file=sys.stderr,
                flush=True,
            )
    summary.wall_seconds = time.monotonic() - start
    summary.restarts = pool.restarts
    return summary


def _warm_up(dumps: Sequence[str]) -> None:
    """Parse the fixtures and compile the templates once, before the workers fork."""
    from tests.fuzz.pipeline import STEPS

    for name in dumps:
        load_seed(name)
    plain = next((d for d in dumps if d.endswith(".nvcudmp")), None)
    if plain is not None:
        for step in STEPS:
            step.run(load_path(plain))


def load_path(name: str) -> Path:
    from tests.fuzz.mutant import DUMPS

    return Path(name) if "/" in name else DUMPS / name


def save_mutant(task: Task, directory: Path) -> Path:
    """Write the mutant file of `task` into `directory`."""
    mutant = build(task.dump, task.mutator, task.seed)
    directory.mkdir(parents=True, exist_ok=True)
    stem = task.dump.split(".nvcudmp")[0].rsplit("/", 1)[-1]
    suffix = ".nvcudmp.gz" if mutant.compressed else ".nvcudmp"
    path = directory / f"{stem}.{task.mutator}.{task.seed}{suffix}"
    mutant.write(path)
    return path


def replay(task: Task, limits: Limits, save: Path | None) -> int:
    """Run one mutant in a worker, as the campaign would, and print what happened."""
    if save is not None:
        print(f"mutant written to {save_mutant(task, save)}")
    _warm_up([task.dump])
    [result] = Pool(1, limits).run([task])
    traced = "-" if result.traced_bytes is None else f"{result.traced_bytes / _MIB:.1f}"
    rss = result.rss_bytes / _MIB
    print(
        f"{task.triple}: {result.outcome} in {result.seconds:.3f} s "
        f"(slowest step {result.step_seconds:.3f} s), "
        f"tracemalloc peak {traced} MiB, RSS growth {rss:.1f} MiB"
    )
    if result.step:
        print(f"step {result.step}: {result.message}\n  at {result.where}")
    if result.traceback:
        print(result.traceback, end="")
    return 1 if result.failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz.campaign",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-n", type=int, default=100_000, help="mutants to run (100,000)")
    parser.add_argument("--seed", type=int, default=1, help="campaign seed (1)")
    parser.add_argument("-j", "--jobs", type=int, default=None, help="workers (usable CPUs)")
    parser.add_argument("--time-limit", type=float, default=5.0, help="seconds per step (5)")
    parser.add_argument("--memory-limit", type=int, default=512, help="MiB per mutant (512)")
    parser.add_argument("--trace-every", type=int, default=10, metavar="K",
                        help="measure one mutant in K with tracemalloc (10; 0 none)")  # fmt: skip
    parser.add_argument("--dump", action="append", help="only this fixture (repeatable)")
    parser.add_argument("--mutator", action="append", help="only this mutator (repeatable)")
    parser.add_argument("--replay", nargs=3, metavar=("DUMP", "MUTATOR", "SEED"))
    parser.add_argument("--save", type=Path, metavar="DIR", help="write failing mutants here")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    parser.add_argument("--list", action="store_true", help="list the mutators and exit")
    args = parser.parse_args(argv)
    entries = mutators()
    if args.list:
        for entry in entries.values():
            doc = (entry.function.__doc__ or "").strip().splitlines()
            print(f"{entry.name:<20} {entry.weight:<5g} {doc[0] if doc else ''}")
        return 0
    unknown = [m for m in args.mutator or [] if m not in entries]
    if unknown:
        parser.error(f"unknown mutator(s): {', '.join(unknown)} (see --list)")
    if args.replay:
        limits = Limits(args.time_limit, args.memory_limit * _MIB, traceback=True)
        dump, name, seed = args.replay
        if name not in entries:
            parser.error(f"unknown mutator {name} (see --list)")
        return replay(Task(0, dump, name, int(seed), trace=True), limits, args.save)
    limits = Limits(args.time_limit, args.memory_limit * _MIB)
    summary = run_campaign(
        args.n, args.seed, args.jobs, limits, args.dump, args.mutator, args.save,
        progress=True, trace_every=args.trace_every,
    )  # fmt: skip
    print(summary.render(limits), end="")
    if args.json:
        args.json.write_text(json.dumps(summary.as_json(), indent=2, default=str) + "\n")
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
