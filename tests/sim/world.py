"""One seed's world: the store every actor shares, the actors, and the moves the scheduler
may make at each quiescent point.

A move is one of:

* ``grant`` — let one held store call through (the only way actors touch the store);
* ``advance`` — move the clock to the next timer (a loop's ``call_later``, a heartbeat,
  a body's sleep, an actor's start, the end of a stall) and wake what is due;
* ``spawn`` — start an actor whose time has come (one that acts on a run waits until
  the run exists);
* ``crash`` / ``stall`` / ``cut`` — a fault, at one of the actor's store calls: it dies
  there (kill -9: nothing of it runs again), stops for longer than a lease's or a lock's
  TTL, or finds the store unreachable for that long (its calls raise
  :class:`~zuke.StoreUnavailableError`; it still runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from types import FrameType
from typing import Any

from tests.sim.actors import ActorSpec, body
from tests.sim.faults import LostAnswers
from tests.sim.invariants import Invariants
from tests.sim.liveness import settled
from tests.sim.procs import Actor, SimThread, current_actor
from tests.sim.runtime import Sim, thread_frames
from zuke._build import Build
from zuke._clock import ManualClock
from zuke.state._protocol import LockAcquired, LockHolder, RunQuery, Written
from zuke.state._unsure import UnsureWriteError, UnsureWrites
from zuke.state.records import TERMINAL_STATUSES, RunDelta, RunRecord

#: fault weights, beside 1.0 for a grant
FAULT_WEIGHT = 0.01
#: how much less likely time moves while calls are held (a slow call, not a lost one)
ADVANCE_WEIGHT = 0.3
#: the longest a healthy store keeps a call waiting: time jumps further only when no
#: call is held (a longer wait is a fault: a stall or a cut-off, chosen as such)
CALL_MS = 1_000


#: the weight of a directed stall (hot scenarios: a holder paused at its Hold.write)
DIRECTED_WEIGHT = 0.3
#: how long a slow continuation waits for its lease (hot scenarios): shorter than every
#: TTL, so nothing the actor holds lapses — slow, not faulted
SLOW_MS = 45_000
#: its weight beside 1.0 for a grant (hot scenarios: the window is the point)
SLOW_WEIGHT = 1.0


def _in_continuation(actor: Actor) -> bool:
    """Whether a task on one of ``actor``'s event loops is inside ``continue_run`` (a
    continuation: the owner's, a deliverer's). Its store calls run on worker threads,
    whose stacks do not show the coroutine; the loops, parked at quiescence, do."""
    for st in actor.threads:
        loop = st.park.loop if st.park is not None and st.park.kind == "loop" else None
        for task in asyncio.all_tasks(loop) if loop is not None else ():
            coro: Any = task.get_coro()
            while coro is not None:
                code = getattr(coro, "cr_code", None)
                if code is not None and code.co_name == "continue_run":
                    return True
                coro = getattr(coro, "cr_await", None)
    return False


def _in_hold_write(frame: FrameType | None) -> bool:
    """Whether a thread's stack is ``update_run`` called by a ``Hold.write``."""
    while frame is not None:
        if frame.f_code.co_name == "update_run":
            change = frame.f_locals.get("change")
            return str(getattr(change, "__qualname__", "")).endswith("write.<locals>.guarded")
        frame = frame.f_back
    return False


class SimStore:
    """The store as actors see it: every call waits for the scheduler's grant."""

    def __init__(self, sim: Sim, inner: Any, inv: Invariants) -> None:
        self.sim = sim
        self.inner = inner
        self.inv = inv
        #: run writes whose answer was lost, with their witness (the version each made)
        self.unsure: UnsureWrites[str] = UnsureWrites()

    def __repr__(self) -> str:
        return "SimStore"

    def get_run(self, run_id: str) -> Any:
        return self.sim.call(f"get_run {run_id}", lambda: self.inner.get_run(run_id))

    def create_run(self, record: RunRecord) -> Any:
        noted = getattr(self.inv.view, "noted", None)
        if noted is not None:
            noted(record.id)  # the view reads the runs actors asked for
        return self._run_write(f"create_run {record.id}", record.id, "", record,
                               lambda: self.inner.create_run(record))  # fmt: skip

    def put_run(self, record: RunRecord, *, expected_version: str) -> Any:
        return self._run_write(
            f"put_run {record.id}", record.id, expected_version, record,
            lambda: self.inner.put_run(record, expected_version=expected_version),
        )  # fmt: skip

    def append_run(self, run_id: str, delta: RunDelta, *, expected_version: str) -> Any:
        return self._run_write(
            f"append_run {run_id}", run_id, expected_version, delta,
            lambda: self.inner.append_run(run_id, delta, expected_version=expected_version),
        )  # fmt: skip

    def _run_write(self, label: str, run_id: str, expected: str, payload: object,
                   write: Callable[[], Any]) -> Any:  # fmt: skip
        """A run write as a store that retries makes it (issue 25 §1, the Postgres store's
        ``_unsure``): a write whose answer was lost (:mod:`tests.sim.faults`) is noted with
        its witness — the version it made — and the same write sent again (same run,
        expected version and payload: the run writer's retry) is answered by that witness,
        ``Written`` whatever landed after it, not applied twice. Uses zuke's own
        :class:`~zuke.state._unsure.UnsureWrites`, as the Postgres store does."""
        made: list[Any] = []

        def once() -> Any:
            known = self.unsure.key(run_id, expected, payload)
            if known is not None:
                return Written(version=known)  # the witness: it landed, at this version
            made.append(write())
            if isinstance(made[-1], Written) and isinstance(payload, RunDelta):
                self.inv.appended(run_id, payload, self._caller())
            return made[-1]

        try:
            result = self.sim.call(label, once)
        except UnsureWriteError:
            if made and isinstance(made[-1], Written):
                self.unsure.note(run_id, expected, payload, made[-1].version)
            raise
        self.unsure.forget(run_id, expected, payload)
        return result

    def delete_run(self, run_id: str) -> None:
        self.sim.call(f"delete_run {run_id}", lambda: self.inner.delete_run(run_id))

    def list_runs(self, query: RunQuery | None = None) -> Any:
        query = query or RunQuery()
        return self.sim.call(f"list_runs {query.status}", lambda: self.inner.list_runs(query))

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> Any:
        def acquire() -> Any:
            taken = self.inner.acquire_lock(key, holder, ttl_ms)
            if isinstance(taken, LockAcquired):
                self.inv.granted(key, taken.token, self._caller())
            return taken

        return self.sim.call(f"acquire_lock {key}", acquire)

    def _caller(self) -> Actor:
        actor = current_actor.get()
        assert actor is not None
        return actor

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> Any:
        return self.sim.call(f"renew_lock {key}", lambda: self.inner.renew_lock(key, token, ttl_ms))

    def release_lock(self, key: str, token: str) -> None:
        def release() -> None:
            before = self.inv.view.claim(key)
            self.inner.release_lock(key, token)
            self.inv.freeing(key, before, "released", self._caller())

        self.sim.call(f"release_lock {key}", release)

    def list_locks(self, *, run_id: str | None = None) -> Any:
        return self.sim.call("list_locks", lambda: self.inner.list_locks(run_id=run_id))

    def break_lock(self, key: str) -> Any:
        def smash() -> Any:
            before = self.inv.view.claim(key)
            broken = self.inner.break_lock(key)
            self.inv.freeing(key, before, "broke", self._caller())
            return broken

        return self.sim.call(f"break_lock {key}", smash)


def _timer_label(st: SimThread) -> str:
    assert st.park is not None
    return f"{st.actor.name}|{st.park.kind}|{st.origin}"


@dataclass(frozen=True)
class Move:
    label: str
    weight: float
    act: Callable[[], None]


@dataclass
class World:
    seed: int
    sim: Sim
    clock: ManualClock
    inner: Any
    store: SimStore
    inv: Invariants
    build: type[Build]
    specs: list[ActorSpec]
    env: dict[str, str]
    #: sim ms a stall or a cut-off lasts, by how it is chosen
    fault_ms: tuple[int, ...]
    faults_left: int = 0
    #: lost answers (tests.sim.faults), their own budget
    losses: LostAnswers | None = None
    fault_weight: float = FAULT_WEIGHT
    #: directed stalls left (hot scenarios: one, besides the budget of faults)
    directed_left: int = 0
    #: slow continuations left (hot scenarios: one; not a fault)
    slow_left: int = 0
    actors: dict[str, Actor] = field(default_factory=dict)
    #: which owner created which run (the record's first actor)
    owners: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.spec_of = {s.name: s for s in self.specs}
        self.start = self.clock.now_ms()

    def run_of(self, owner: str) -> str | None:
        return self.owners.get(owner)

    def all_ended(self) -> bool:
        """Whether every run in the store ended (a sweep has nothing left to do)."""
        records = [self.inv.record(run_id) for run_id in self.inv.view.runs()]
        return all(r is not None and r.status in TERMINAL_STATUSES for r in records)

    def all_settled(self) -> bool:
        """Whether a sweep has nothing left to do for any run (tests.sim.liveness)."""
        records = [self.inv.record(run_id) for run_id in self.inv.view.runs()]
        return all(r is not None and settled(r) for r in records)

    def faulted(self) -> bool:
        """Whether the seed had a fault: an actor crashed, stalled or cut off, an answer lost."""
        lost = self.losses is not None and bool(self.losses.lost)
        return lost or any(a.faulted for a in self.actors.values())

    def begin_drain(self) -> None:
        """Faults off; one more process sweeps until every run is settled."""
        self.faults_left = self.directed_left = self.slow_left = 0
        if self.losses is not None:
            self.losses.left = 0
        spec = ActorSpec("drain", "drainer", self.clock.now_ms() - self.start)
        self.specs.append(spec)
        self.spec_of[spec.name] = spec
        self._spawn(spec)

    def note_runs(self) -> None:
        for run_id in self.inv.view.runs():
            if run_id not in self.owners.values():
                record = self.inv.record(run_id)
                if record is not None:
                    self.owners.setdefault(record.actor, run_id)

    # -- moves ------------------------------------------------------------------------------

    def moves(self) -> list[Move]:
        now = self.clock.now_ms()
        moves: list[Move] = []
        parked = self.sim.parked()
        calls = sorted(
            (st for st in parked if st.park is not None and st.park.kind == "call"),
            key=lambda st: st.park.label if st.park is not None else "",
        )
        live = [st for st in calls if not st.actor.frozen(now)]
        for st in live:
            assert st.park is not None
            moves.append(Move(f"grant {st.park.label}", 1.0, partial(self.sim.grant, st)))
        spawns = [s for s in self.specs if s.name not in self.actors and self._ready(s, now)]
        for spec in spawns:
            moves.append(Move(f"spawn {spec.name}", 1.0, partial(self._spawn, spec)))
        timers = [st for st in parked if st.park is not None and st.park.due is not None
                  and not st.actor.frozen(now)]  # fmt: skip
        due = sorted((st for st in timers if st.park is not None and st.park.due is not None
                      and st.park.due <= now), key=_timer_label)  # fmt: skip
        for st in due:
            moves.append(Move(f"wake {_timer_label(st)}", 1.0, partial(self.sim.wake, st)))
        later = [st.park.due for st in timers if st.park is not None and st.park.due is not None]
        later += [int(a.frozen_until) for a in self.actors.values()
                  if not a.dead and not a.gone and a.frozen_until > now]  # fmt: skip
        later += [self.start + s.start_ms for s in self.specs
                  if s.name not in self.actors and self.start + s.start_ms > now]  # fmt: skip
        if later and not due and (not live or min(later) - now <= CALL_MS):
            when = min(later)
            weight = ADVANCE_WEIGHT if live or spawns else 1.0
            moves.append(
                Move(f"advance +{when - now}ms", weight, partial(self.sim.advance_to, when))
            )
        if self.faults_left > 0:
            moves += self._faults(live, now)
        if self.directed_left > 0:
            moves += self._directed(live, now)
        if self.slow_left > 0:
            moves += self._slow(live, now)
        if self.losses is not None:
            moves += [Move(m.label, m.weight, m.act) for m in self.losses.moves(live)]
        return moves

    def _ready(self, spec: ActorSpec, now: int) -> bool:
        if self.start + spec.start_ms > now:
            return False
        return spec.kind == "owner" or self.run_of(spec.run_of) is not None

    def _spawn(self, spec: ActorSpec) -> None:
        actor = Actor(spec.name, seed=self.seed)
        self.actors[spec.name] = actor
        self.sim.spawn(actor, body(self, spec))

    def _faults(self, live: list[SimThread], now: int) -> list[Move]:
        """A crash at one of an actor's held store calls; a stall or a cut-off anywhere."""
        moves: list[Move] = []
        calling = {st.actor.name for st in live}
        for actor in self.actors.values():
            if actor.gone or actor.faulted or not self.spec_of[actor.name].faultable:
                continue
            if actor.name in calling:
                crash = partial(self._crash, actor)
                moves.append(Move(f"crash {actor.name}", self.fault_weight, crash))
            for ms in self.fault_ms:
                weight = self.fault_weight / len(self.fault_ms)
                stall = partial(self._stall, actor, now + ms)
                moves.append(Move(f"stall {actor.name} {ms}ms", weight, stall))
                moves.append(
                    Move(f"cut {actor.name} {ms}ms", weight, partial(self._cut, actor, now + ms))
                )
        return moves

    def _directed(self, live: list[SimThread], now: int) -> list[Move]:
        """Hot scenarios only: a stall, likely, of an actor whose held call is a lease
        holder's compare-and-swap (``Hold.write``) — the window between a proof and its
        write, where a paused holder must not land after a takeover — or a sweep's taking
        of a run's lease (the window between what its checks read and what it writes)."""
        moves: list[Move] = []
        frames = thread_frames()
        for st in live:
            actor = st.actor
            if actor.faulted or not self.spec_of[actor.name].faultable or st.ident is None:
                continue
            assert st.park is not None
            taking = actor.name.startswith("sweeper") and "|acquire_lock zuke-run-" in st.park.label
            if taking or _in_hold_write(frames.get(st.ident)):
                stall = partial(self._directed_stall, actor, now + max(self.fault_ms))
                where = "its lease" if taking else "Hold.write"
                moves.append(Move(f"stall {actor.name} at {where}", DIRECTED_WEIGHT, stall))
        return moves

    def _slow(self, live: list[SimThread], now: int) -> list[Move]:
        """Hot scenarios only: a continuation slow to take its lease (its store answers
        late, for :data:`SLOW_MS`) — the window between its look (the run is due) and its
        lease, in which another process may take the run to its end (``bdd1d0e``). Not a
        fault: the actor holds nothing that lapses meanwhile, and must still tell the truth."""
        moves: list[Move] = []
        for st in live:
            assert st.park is not None
            taking = "|acquire_lock zuke-run-" in st.park.label
            if taking and _in_continuation(st.actor):
                slow = partial(self._slow_down, st.actor, now + SLOW_MS)
                moves.append(Move(f"slow {st.actor.name} at its continuation", SLOW_WEIGHT,
                                  slow))  # fmt: skip
        return moves

    def _slow_down(self, actor: Actor, until: int) -> None:
        self.slow_left -= 1
        actor.frozen_until = max(actor.frozen_until, until)

    def _directed_stall(self, actor: Actor, until: int) -> None:
        self.directed_left -= 1
        self.faults_left += 1  # not counted against the seed's other faults
        self._stall(actor, until)

    def _crash(self, actor: Actor) -> None:
        self.inv.faulting(actor)
        actor.dead = actor.faulted = True
        self.faults_left -= 1

    def _stall(self, actor: Actor, until: int) -> None:
        self.inv.faulting(actor)
        actor.frozen_until, actor.faulted = until, True
        self.faults_left -= 1

    def _cut(self, actor: Actor, until: int) -> None:
        self.inv.faulting(actor)
        actor.cut_until, actor.faulted = until, True
        self.faults_left -= 1
