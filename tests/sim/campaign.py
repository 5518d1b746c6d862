"""Many seeds at once: what CI runs, what a soak runs, and the bug hunt's numbers.

``python -m tests.sim --seeds 2000`` (or ``--soak 600``) prints the same summary
the CI test does: seeds per second, distinct interleavings (schedule hashes), and
for each invariant broken, how many seeds broke it and the first seed that did.
``--ignore a,b`` lets the seeds that break only those invariants go on, so the
bugs behind them do not hide others.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.sim.patches import patched
from tests.sim.scenario import SeedResult, forced_store, run_seed

#: the scenarios' variants a campaign may run (make_scenario's flags)
VARIANTS = ("hot", "race", "fanout")


@dataclass
class Summary:
    seeds: int = 0
    seconds: float = 0.0
    steps: int = 0
    exhausted: int = 0
    schedules: set[str] = field(default_factory=set)
    #: invariant -> (seeds that broke it, the first of them)
    broken: dict[str, tuple[int, int]] = field(default_factory=dict)
    failures: list[SeedResult] = field(default_factory=list)

    def add(self, result: SeedResult) -> None:
        self.seeds += 1
        self.steps += result.steps
        self.exhausted += result.exhausted
        self.schedules.add(result.schedule)
        for name in sorted({v.invariant for v in result.violations}):
            count, first = self.broken.get(name, (0, result.seed))
            self.broken[name] = (count + 1, first)
        if result.violations:
            self.failures.append(result)

    def describe(self) -> str:
        rate = self.seeds / self.seconds if self.seconds else 0.0
        lines = [
            f"{self.seeds} seeds in {self.seconds:.1f} s ({rate:.1f} seeds/s), {self.steps} "
            f"steps, {len(self.schedules)} distinct interleavings, {self.exhausted} stopped "
            "at the step or time budget"
        ]
        for name, (count, first) in sorted(self.broken.items()):
            lines.append(f"  {name}: broken by {count} seed(s), first seed {first}")
        return "\n".join(lines)


def run_many(
    seeds: Iterable[int],
    *,
    ignore: frozenset[str] = frozenset(),
    until: float | None = None,
    keep: int = 5,
    variant: frozenset[str] = frozenset(),
) -> Summary:
    """Run ``seeds`` (until the monotonic time ``until``, if given); keep the first
    ``keep`` failing results in full. ``variant``: the scenarios' (``hot``, ``race``,
    ``fanout``: :func:`~tests.sim.scenario.make_scenario`'s)."""
    summary = Summary()
    started = time.monotonic()
    with patched():
        for seed in seeds:
            if until is not None and time.monotonic() >= until:
                break
            result = run_seed(seed, ignore=ignore, hot="hot" in variant, race="race" in variant,
                              fanout="fanout" in variant)  # fmt: skip
            summary.add(result)
            if len(summary.failures) > keep:
                summary.failures.pop()
    summary.seconds = time.monotonic() - started
    return summary


def _chunk(args: tuple[range, frozenset[str], frozenset[str]]) -> Summary:
    seeds, ignore, variant = args
    return run_many(seeds, ignore=ignore, variant=variant)


def run_parallel(
    start: int,
    count: int,
    *,
    workers: int,
    ignore: frozenset[str] = frozenset(),
    variant: frozenset[str] = frozenset(),
) -> Summary:
    """``count`` seeds from ``start`` over ``workers`` fresh processes (one per core): the
    same seeds, results and schedules as one process gives, sooner."""
    if workers <= 1 or count < 2 * workers:
        return run_many(range(start, start + count), ignore=ignore, variant=variant)
    started = time.monotonic()
    chunks = [(range(start + i, start + count, workers), ignore, variant)
              for i in range(workers)]  # fmt: skip
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        parts = pool.map(_chunk, chunks)
    summary = Summary()
    for part in parts:
        summary.seeds += part.seeds
        summary.steps += part.steps
        summary.exhausted += part.exhausted
        summary.schedules |= part.schedules
        summary.failures += part.failures
        for name, (count_, first) in part.broken.items():
            known, earliest = summary.broken.get(name, (0, first))
            summary.broken[name] = (known + count_, min(earliest, first))
    summary.failures.sort(key=lambda result: result.seed)
    summary.seconds = time.monotonic() - started
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seeds", type=int, default=2000, help="how many seeds")
    parser.add_argument("--soak", type=float, help="run seeds for this many seconds instead")
    parser.add_argument("--ignore", default="", help="invariants that do not end a seed")
    parser.add_argument("--seed", type=int, help="run one seed and print its schedule")
    parser.add_argument("--workers", type=int, default=1, help="processes to run seeds in")
    parser.add_argument(
        "--hot",
        action="store_true",
        help="the seeds' hot scenarios (the planted-bug hunt's)",
    )
    parser.add_argument(
        "--race",
        action="store_true",
        help="the seeds' race scenarios (a watcher, a slow continuation)",
    )
    parser.add_argument(
        "--fanout",
        action="store_true",
        help="the seeds' fan-out scenarios (items waiting for their own signals)",
    )
    args = parser.parse_args(argv)
    ignore = frozenset(filter(None, args.ignore.split(",")))
    if forced_store() == "postgres":
        from tests.sim import pg

        pg.ensure_database()
    if args.seed is not None:
        result = run_seed(
            args.seed,
            keep_moves=True,
            ignore=ignore,
            hot=args.hot,
            race=args.race,
            fanout=args.fanout,
        )
        print("\n".join(result.moves))
        print(result.describe())
        return 1 if result.violations else 0
    variant = frozenset(name for name in VARIANTS if getattr(args, name))
    if args.soak is not None:
        seeds: Iterable[int] = itertools.count(args.start)
        summary = run_many(seeds, ignore=ignore, until=time.monotonic() + args.soak,
                           variant=variant)  # fmt: skip
    else:
        summary = run_parallel(args.start, args.seeds, workers=args.workers, ignore=ignore,
                               variant=variant)  # fmt: skip
    for failure in summary.failures:
        print(failure.describe())
    print(summary.describe())
    return 1 if summary.broken else 0
