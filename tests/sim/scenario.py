"""A seed's scenario and its run: which build, which actors and faults, then the schedule.

``run_seed(seed)`` is the whole simulation of one seed: the scenario comes from
``random.Random(f"scenario:{seed}")``, every scheduling choice from
``random.Random(seed)`` (or from Hypothesis, through a :class:`Chooser`), so the
seed alone reproduces the run. The schedule — every move, in order — is hashed:
two seeds with one hash took the same interleaving.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from tests.sim import liveness
from tests.sim.actors import ActorSpec
from tests.sim.builds import SECRET, Shape, item_signal, sim_build
from tests.sim.faults import LOSS_WEIGHT, LostAnswers
from tests.sim.invariants import Invariants, Violation
from tests.sim.patches import installed
from tests.sim.runtime import Sim
from tests.sim.world import FAULT_WEIGHT, SimStore, World
from zuke._clock import ManualClock
from zuke._errors import ZukeError
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore

__all__ = ["DrawChooser", "SeedResult", "SeededChooser", "make_scenario", "run_seed"]

MAX_STEPS = 6_000
MAX_SIM_MS = 3 * 3_600_000
LEASE_TTL_MS = 60_000
FAMILIES = ("signals", "workflow", "locks", "cancel", "timeouts")
#: the stores a seed may run over (``postgres`` only when chosen: ``ZUKE_SIM_STORE``)
STORES = ("memory", "filesystem", "postgres")
#: a hot scenario's watcher sweeps this often, this many times: it takes up a due run
#: while a slow continuation waits for the lease (tests.sim.world's ``slow``)
WATCH_EVERY_MS = 10_000
WATCH_SWEEPS = 12
#: the items of a fan-out scenario's ``batch``
ITEMS = ("x", "y")
#: the share of seeds run over the filesystem store (the rest: memory)
FILESYSTEM_SHARE = 0.25


class Chooser(Protocol):
    def pick(self, weights: list[float]) -> int:
        """The index of the move to make."""
        ...


class SeededChooser:
    """Weighted choices from ``random.Random(seed)``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def pick(self, weights: list[float]) -> int:
        return self.rng.choices(range(len(weights)), weights)[0]


class DrawChooser:
    """Choices drawn by Hypothesis (``draw``: an index below the count given): a failing
    interleaving shrinks towards the first move offered at each step."""

    def __init__(self, draw: Callable[[int], int]) -> None:
        self.draw = draw

    def pick(self, weights: list[float]) -> int:
        return self.draw(len(weights))


@dataclass(frozen=True)
class Scenario:
    family: str
    shape: Shape
    actors: tuple[ActorSpec, ...]
    faults: int
    fault_ms: tuple[int, ...]
    #: "memory" or "filesystem": the store the actors share
    store: str = "memory"
    #: how many write answers the fault layer may lose (tests.sim.faults)
    losses: int = 0
    #: the weight of each fault move beside 1.0 for a grant
    fault_weight: float = FAULT_WEIGHT
    #: slow continuations the scheduler may make (``race``: tests.sim.world's ``_slow``)
    slow: int = 0


@dataclass
class SeedResult:
    seed: int
    scenario: Scenario
    steps: int
    sim_ms: int
    schedule: str  #: the schedule's hash
    violations: list[Violation] = field(default_factory=list)
    exhausted: bool = False
    moves: list[str] = field(default_factory=list)
    #: (actor, operation) of every write whose answer the fault layer lost
    lost: list[tuple[str, str]] = field(default_factory=list)
    #: events a second writer appended between a lost answer and its retry
    appended: int = 0

    def describe(self) -> str:
        lines = [
            f"seed {self.seed} ({self.scenario.family}, {self.scenario.store} store): "
            f"{self.steps} steps, "
            f"{self.sim_ms / 1000:.1f} s simulated, schedule {self.schedule}",
            f"  shape: {self.scenario.shape}",
            "  actors: " + ", ".join(f"{a.name}@{a.start_ms}ms" for a in self.scenario.actors),
        ]
        lines += [f"  {v}" for v in self.violations]
        lines.append(f"  reproduce: ZUKE_SIM_SEED={self.seed} pytest tests/sim -k one_seed")
        return "\n".join(lines)


def make_scenario(
    seed: int, *, hot: bool = False, race: bool = False, fanout: bool = False
) -> Scenario:
    """The build, actors and fault budget of ``seed`` (its family is ``seed % 5``).

    ``hot``: the same seed with more faults, made five times as likely (the planted-bug
    hunt, :mod:`tests.sim.mutations`: a bug that needs two faults in one run shows sooner).
    ``fanout``: the seed's build is a fan-out over :data:`ITEMS`, each item's gate waiting
    for its own signal, delivered per item (the ``item-scope`` invariant).
    ``race``: the same seed with a watcher sweeping every :data:`WATCH_EVERY_MS` and one
    continuation made slow to take its lease (``slow``, not a fault): another process
    may take the run up — or to its end — between the continuation's look and its lease.
    """
    rng = random.Random(f"scenario:{seed}")
    family = FAMILIES[seed % len(FAMILIES)]

    def at(low_s: float, high_s: float) -> int:
        return int(rng.uniform(low_s, high_s) * 1000)

    def sweepers(low: int, high: int, start_s: float, end_s: float) -> list[ActorSpec]:
        return [
            ActorSpec(
                f"sweeper{i + 1}",
                "sweeper",
                at(start_s, end_s),
                faultable=True,
                repeat=rng.randint(1, 4),
                every_ms=at(20, 90),
            )
            for i in range(rng.randint(low, high))
        ]

    def resumer(signal: str, low_s: float, high_s: float, name: str = "", data: Any = None,
                kind: str = "resumer") -> ActorSpec:  # fmt: skip
        return ActorSpec(name or f"resumer-{signal}", kind, at(low_s, high_s), signal=signal,
                         data=data, faultable=rng.random() < 0.3)  # fmt: skip

    actors: list[ActorSpec] = [ActorSpec("owner", "owner", 0, faultable=True)]
    lock_ms = 120_000
    order_s = rng.choice((0.0, 0.0, 5.0, 30.0))
    if family == "signals":
        shape = Shape(signals=("a", "b"), effect=rng.random() < 0.5, order_s=order_s)
        secret = SECRET if rng.random() < 0.2 else "ok"
        actors += [resumer("a", 0, 20, data={"by": "ops", "note": secret}),
                   resumer("b", 0, 20, data={"by": "qa"})]  # fmt: skip
        if rng.random() < 0.5:
            actors.append(resumer("a", 0, 20, "resumer-a2", {"by": "ops", "note": secret}))
        if rng.random() < 0.3:
            actors.append(resumer("b", 0, 20, "mcp-b", "x", kind="mcp-resume"))
        if rng.random() < 0.2:
            actors.append(resumer("aa", 0, 20, "resumer-typo"))
        actors += sweepers(0, 2, 0, 90)
    elif family == "workflow":
        shape = Shape(signals=("a",) if rng.random() < 0.3 else (), workflow=True,
                      effect=rng.random() < 0.5, order_s=order_s)  # fmt: skip
        if shape.signals:
            actors.append(resumer("a", 0, 40))
        actors += sweepers(2, 5, 5, 60)
    elif family == "locks":
        lock_ms = rng.choice((30_000, 120_000))
        shape = Shape(signals=("a",), lock_ttl=f"{lock_ms}ms", deploy_s=40,
                      effect=rng.random() < 0.5, held=rng.random() < 0.5)  # fmt: skip
        actors += [ActorSpec("owner2", "owner", at(0, 120), faultable=rng.random() < 0.5),
                   resumer("a", 30, 150)]  # fmt: skip
        actors += sweepers(1, 2, 40, 200)
    elif family == "cancel":
        shape = Shape(signals=("a",), compensate=True, effect=rng.random() < 0.5)
        actors += [ActorSpec(f"canceller{i + 1}", "canceller", at(0, 40), faultable=True)
                   for i in range(rng.randint(1, 2))]  # fmt: skip
        if rng.random() < 0.4:
            actors.append(ActorSpec("mcp-cancel", "mcp-cancel", at(0, 40)))
        if rng.random() < 0.5:
            actors.append(resumer("a", 0, 30))
        actors += sweepers(0, 2, 0, 120)
    else:
        signals = ("a", "b") if rng.random() < 0.5 else ("a",)
        shape = Shape(
            signals=signals, workflow=rng.random() < 0.5, rate_limit_first=False,
            gate_timeout="2m", on_timeout=rng.choice(("fail", "cancel-run", "rollback")),
            compensate=rng.random() < 0.5, hook_s=rng.choice((1.0, 61.0)), order_s=order_s,
            deadline="30m", workflow_ms=rng.choice((20_000, 300_000)),
        )  # fmt: skip
        actors += [resumer(signal, 0, 200) for signal in signals]
        actors += sweepers(2, 3, 60, 300)
        if rng.random() < 0.5:
            actors.append(ActorSpec("mcp-show", "mcp-show", at(20, 200)))
    if fanout:  # a fan-out whose items each wait for their own signal
        family = "fanout"
        shape = Shape(signals=("a",), items=ITEMS, effect=rng.random() < 0.5, order_s=order_s)
        actors = [actors[0], resumer("a", 0, 30)]
        actors += [resumer(item_signal(item), 0, 40) for item in ITEMS]
        if rng.random() < 0.5:  # the same item's signal twice, through MCP
            actors.append(resumer(item_signal(ITEMS[0]), 0, 40, "mcp-x", "x", kind="mcp-resume"))
        actors += sweepers(0, 2, 0, 90)
    faults = rng.choice((0, 1, 1, 2))
    fault_ms = (LEASE_TTL_MS + 10_000, lock_ms + 10_000)
    store = forced_store() or ("filesystem" if rng.random() < FILESYSTEM_SHARE else "memory")
    losses = rng.choice((0, 1, 1, 2))
    actors = [replace(a, via=rng.choice(("cli", "execute"))) if a.kind == "owner" else a
              for a in actors]  # fmt: skip
    weight = FAULT_WEIGHT
    if hot:  # more faults, likelier; sweeps that start together (a cron on every host)
        faults, losses, weight = faults + 2, losses + 1, FAULT_WEIGHT * 5
        if family == "workflow" and not shape.signals:  # a gate after ci: the run re-parks
            shape = replace(shape, signals=("a",))
            actors.append(resumer("a", 0, 40))
        first = min((a.start_ms for a in actors if a.kind == "sweeper"), default=0)
        actors = [replace(a, start_ms=first) if a.kind == "sweeper" else a for a in actors]
    if race:  # a watcher (`zuke resume --check --watch`) beside a slow continuation
        actors.append(ActorSpec("watcher", "sweeper", 0, repeat=WATCH_SWEEPS,
                                every_ms=WATCH_EVERY_MS))  # fmt: skip
    return Scenario(family, shape, tuple(actors), faults, tuple(sorted(set(fault_ms))),
                    store, losses, weight, slow=int(race))  # fmt: skip


def forced_store() -> str | None:
    """``ZUKE_SIM_STORE``: run every seed over this store (``memory``, ``filesystem``,
    ``postgres``: :mod:`tests.sim.pg`)."""
    chosen = os.environ.get("ZUKE_SIM_STORE") or None
    if chosen is not None and chosen not in STORES:
        raise ValueError(f"ZUKE_SIM_STORE={chosen!r}: expected one of {', '.join(STORES)}")
    return chosen


@contextlib.contextmanager
def opened(kind: str | type[Any], clock: ManualClock, seed: int = 0) -> Iterator[Any]:
    """The seed's store: in memory, a filesystem store in a fresh temporary directory
    (on tmpfs when there is one: its fsyncs cost nothing), removed after the seed, or a
    fresh namespace of a Postgres database on the simulated clock (:mod:`tests.sim.pg`)."""
    if not isinstance(kind, str):
        yield kind(clock=clock)
        return
    if kind == "memory":
        yield MemoryStateStore(clock=clock)
        return
    if kind == "postgres":
        from tests.sim import pg  # psycopg2 only when asked for

        with pg.opened(clock, seed) as store:
            yield store
        return
    where = tempfile.mkdtemp(
        prefix="zuke-sim-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    try:
        yield FileSystemStateStore(where, clock=clock)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def run_seed(
    seed: int,
    chooser: Chooser | None = None,
    *,
    keep_moves: bool = False,
    ignore: frozenset[str] = frozenset(),
    store: str | type[Any] | None = None,
    hot: bool = False,
    race: bool = False,
    fanout: bool = False,
) -> SeedResult:
    """Simulate one seed to its end, or to its first violation (of an invariant not in
    ``ignore``: those are counted, and the seed goes on). ``store`` makes the store, or
    names it (``postgres``; default: the scenario's)."""
    scenario = make_scenario(seed, hot=hot, race=race, fanout=fanout)
    if isinstance(store, str):
        scenario = replace(scenario, store=store)
    clock = ManualClock()
    kind = scenario.store if store is None or isinstance(store, str) else store
    with opened(kind, clock, seed) as inner:
        return _run(seed, scenario, inner, clock, chooser or SeededChooser(seed), keep_moves,
                    ignore)  # fmt: skip


def _run(seed: int, scenario: Scenario, inner: Any, clock: ManualClock, chooser: Chooser,
         keep_moves: bool, ignore: frozenset[str]) -> SeedResult:  # fmt: skip
    sim = Sim(clock)
    shape = scenario.shape
    inv = Invariants(inner, signals=frozenset(shape.all_signals()), secret=SECRET,
                     ignore=ignore)  # fmt: skip
    shared = SimStore(sim, inner, inv)
    losses = LostAnswers(sim, inner, scenario.losses, orphan=inv.orphaned,
                         weight=LOSS_WEIGHT * scenario.fault_weight / FAULT_WEIGHT)  # fmt: skip
    world = World(
        seed=seed, sim=sim, clock=clock, inner=inner, store=shared, inv=inv,
        build=sim_build(scenario.shape, shared, inv), specs=list(scenario.actors),
        env={"ZUKE_CANCEL_POLL": "10s", "TOKEN": SECRET}, fault_ms=scenario.fault_ms,
        faults_left=scenario.faults, losses=losses, fault_weight=scenario.fault_weight,
        directed_left=int(scenario.fault_weight > FAULT_WEIGHT),
        slow_left=scenario.slow,
    )  # fmt: skip
    inv.actors = world.actors
    digest = hashlib.sha256()
    moves: list[str] = []
    steps, exhausted, drained = 0, False, False
    with installed(sim):
        try:
            while True:
                sim.wait_quiet()
                while sim.wake_stopped():
                    sim.wait_quiet()
                inv.step = steps
                inv.observe()
                world.note_runs()
                if inv.violations:
                    break
                options = world.moves()
                if not options and not drained:  # every actor finished: the drain
                    runs = sorted(inv.view.runs())
                    liveness.before_drain(inv, runs, faulted=world.faulted())
                    if inv.violations:
                        break
                    world.begin_drain()
                    drained = True
                    continue
                if not options:
                    liveness.after_drain(inv, sorted(inv.view.runs()))
                    break
                if steps >= MAX_STEPS or clock.now_ms() - world.start > MAX_SIM_MS:
                    exhausted = True
                    break
                move = options[chooser.pick([m.weight for m in options])]
                digest.update(move.label.encode() + b"\n")
                if keep_moves:
                    moves.append(f"{clock.now_ms() - world.start:>9} {move.label}")
                move.act()
                steps += 1
            if not inv.violations and not exhausted:
                _final_checks(world, scenario)
        finally:
            sim.close(list(world.actors.values()))
    return SeedResult(seed, scenario, steps, clock.now_ms() - world.start, digest.hexdigest()[:16],
                      list(inv.violations), exhausted, moves, list(losses.lost),
                      losses.appended)  # fmt: skip


def _final_checks(world: World, scenario: Scenario) -> None:
    inv = world.inv
    if scenario.shape.compensate:
        inv.settle({"deploy": "undeploy"})
    exit_truthful(world)
    for actor in world.actors.values():
        errors = [actor.error, *actor.errors] if actor.error is not None else list(actor.errors)
        for exc in errors:
            if not isinstance(exc, ZukeError):
                inv.fail("no-engine-error", f"{actor.name} died of {type(exc).__name__}: {exc}")


def exit_truthful(world: World) -> None:
    """``exit-truthful``: a process that never faulted (no crash, stall, cut-off, nor a lost
    answer of its own) does not end with an error its run's record contradicts — an owner
    whose run is recorded succeeded, a deliverer whose signal the record says it stored.
    (A continuation that meets a run another process already ended has nothing to do:
    ``bdd1d0e``.)"""
    lost = {name for name, _ in world.losses.lost} if world.losses is not None else set()
    for name, actor in sorted(world.actors.items()):
        kind = world.spec_of[name].kind
        ended = actor.result if isinstance(actor.result, BaseException) else actor.error
        if ended is None or actor.faulted or name in lost:
            continue
        run_id = world.run_of(world.spec_of[name].run_of if kind != "owner" else name)
        record = world.inv.record(run_id) if run_id is not None else None
        if record is None:
            continue
        error = f"{type(ended).__name__} ({ended})"
        if kind == "owner" and record.status == "succeeded":
            world.inv.fail("exit-truthful", f"{name} ended with {error}, but its run "
                           f"{run_id} is recorded succeeded")  # fmt: skip
        stored = any(e.tool == "signal" and e.actor == name for e in record.events)
        if kind in ("resumer", "mcp-resume") and stored:
            world.inv.fail("exit-truthful", f"{name} ended with {error}, but run {run_id} "
                           "holds its signal, stored by it")  # fmt: skip
