"""The safety invariants the simulation checks, in one place (liveness: tests.sim.liveness).

Two kinds of check:

* **ledger checks**, made the moment something external happens — a body enters
  or acts, an effect or a compensation runs, a workflow is dispatched, a trigger's
  ``on_timeout`` hook is called, a signal's delivery returns. The builds of
  :mod:`tests.sim.builds` call them from their bodies;
* **record checks** (:mod:`tests.sim.observe`, through :meth:`Invariants.observe`),
  made after every step of the scheduler on what the store holds.

"Faulted" below means an actor that was crashed, stalled or cut off from the
store at some point: work it started may legitimately be done again (at least
once), work a healthy actor finished may not.

The invariants, each with what breaks it, are tabled in ``docs/simulation.md``
(the safety ones here, the liveness ones in :mod:`tests.sim.liveness`).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.sim.procs import Actor, Crash, current_actor
from tests.sim.view import view_of
from zuke.state._protocol import lease_key
from zuke.state.records import TERMINAL_STATUSES, RunRecord

INVARIANTS = (
    "signal-stored",
    "body-once",
    "effect-once",
    "dispatch-once",
    "compensation-iff",
    "lock-exclusive",
    "claims-respected",
    "fences-rise",
    "terminal-once",
    "succeeded-final",
    "finished-not-resumed",
    "hook-once",
    "deadline-credit",
    "signal-known",
    "secret-never-stored",
    "no-engine-error",
    "held-exclusive",
    "finished-holds-nothing",
    "exit-truthful",
    "append-once",
    # liveness, checked at the end of a seed (tests.sim.liveness)
    "signal-consumed",
    "gate-once",
    "item-scope",
    "lease-live",
    "stated-reason",
)


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str
    step: int

    def __str__(self) -> str:
        return f"[{self.invariant}] step {self.step}: {self.detail}"


@dataclass(eq=False)
class Exec:
    """One run of a body, from its entry to its exit."""

    run: str
    target: str
    actor: Actor
    order: int
    key: str | None = None
    fence: int = 0
    acted: bool = False
    exited: bool = False
    #: when the record first showed the target succeeded after this run of it
    recorded: int | None = None


@dataclass
class Invariants:
    #: the store every actor shares (the inner one: no holds, no faults)
    store: Any
    #: the signals the build's gates wait for
    signals: frozenset[str] = frozenset()
    #: a value no record may hold
    secret: str = "\0"
    #: invariants whose violations are kept apart (``ignored``) and do not end the seed
    ignore: frozenset[str] = frozenset()
    violations: list[Violation] = field(default_factory=list)
    ignored: list[Violation] = field(default_factory=list)
    step: int = 0

    def __post_init__(self) -> None:
        self.view = view_of(self.store)
        self._mutex = threading.Lock()
        self._order = itertools.count()
        self.bodies: dict[tuple[str, str], list[Exec]] = {}
        self.holding: dict[str, list[Exec]] = {}
        self.entry_fence: dict[str, int] = {}
        self.intents: dict[tuple[str, str, str], set[tuple[str | None, int]]] = {}
        self.dispatches: dict[tuple[str, str], list[str]] = {}
        self.compensations: dict[tuple[str, str], list[Exec]] = {}
        self.hooks: dict[tuple[str, str], list[Actor]] = {}
        self.attempts = itertools.count(1)
        self._seen: dict[str, str] = {}  # run id -> version observed
        self._status: dict[str, str] = {}
        #: every event object that landed in an append, by id (kept: ids are not reused)
        self._landed: dict[int, Any] = {}
        #: run id -> the terminal status it was first seen with
        self.ended: dict[str, str] = {}
        self._succeeded: dict[str, set[str]] = {}
        self._fences: dict[str, int] = {}
        self.rate_limited: set[tuple[str, str]] = set()
        #: acts refused for a stale fence (a paused holder that woke up after a takeover)
        self.fenced = 0
        #: the seed's actors by name (set by the scenario): who made a recorded move
        self.actors: dict[str, Actor] = {}
        #: which actor a claim's token was granted to
        self.token_owner: dict[str, str] = {}
        #: tokens of claims taken by an acquire whose answer was lost (tests.sim.faults)
        self.orphans: set[str] = set()
        self._first_deadline: dict[str, int | None] = {}
        self._parked: dict[str, int] = {}  # run id -> ms spent suspended so far
        self._suspended_at: dict[str, int] = {}
        #: (run id, key) of every lock a run was seen keeping (``heldLocks``)
        self.kept: set[tuple[str, str]] = set()
        #: per key, the run whose deploy entered with it last
        self.last_entry: dict[str, str] = {}

    # -- helpers ---------------------------------------------------------------------------

    def fail(self, invariant: str, detail: str) -> None:
        assert invariant in INVARIANTS, invariant
        found = Violation(invariant, detail, self.step)
        with self._mutex:
            (self.ignored if invariant in self.ignore else self.violations).append(found)

    def record(self, run_id: str) -> RunRecord | None:
        return self.view.record(run_id)

    @staticmethod
    def actor() -> Actor:
        actor = current_actor.get()
        assert actor is not None, "a ledger call outside an actor"
        if actor.dead:
            raise Crash  # its process is gone: nothing of it acts
        return actor

    # -- bodies and locks ------------------------------------------------------------------

    def enter(self, run_id: str, target: str, lock: Any = None) -> Exec:
        actor = self.actor()
        run = Exec(run_id, target, actor, next(self._order))
        record = self.record(run_id)
        ended = record.status if record is not None and record.status in TERMINAL_STATUSES else (
            self.ended.get(run_id))  # fmt: skip
        if ended is not None:  # (a run that left its end is terminal-once's, and still ended)
            self.fail("finished-not-resumed", f"{actor.name} ran {target} of run {run_id}, "
                      f"which had ended {ended}")  # fmt: skip
        row = record.targets.get(target) if record is not None else None
        if row is not None and row.status == "succeeded":
            self.fail("body-once", f"{actor.name} ran {target} again after it was recorded "
                      "succeeded")  # fmt: skip
        earlier = self.bodies.setdefault((run_id, target), [])
        healthy = [e.actor.name for e in earlier if not _excused(e.actor, e.recorded)]
        if healthy:
            self.fail("body-once", f"{actor.name} ran {target} again after {healthy[0]} ran it, "
                      "with no fault to excuse it")  # fmt: skip
        earlier.append(run)
        if lock is not None:
            run.key, run.fence = lock.key, lock.fence
            top = self.entry_fence.get(lock.key, 0)
            # A holder stalled between its acquire and its body wakes with a stale fence:
            # the one more step it may take before it notices; its act is refused (fenced).
            stale = actor.faulted and lock.fence < top
            if lock.fence <= top and not stale:
                self.fail("fences-rise", f"{actor.name} entered {target} holding {lock.key} "
                          f"with fence {lock.fence}, not above {top}")  # fmt: skip
            self.entry_fence[lock.key] = max(top, lock.fence)
            now = self.store.clock.now_ms()
            for other in self.holding.get(lock.key, []):
                if not other.actor.frozen(now) and not stale:
                    self.fail("lock-exclusive", f"{actor.name} entered {target} with {lock.key} "
                              f"(fence {lock.fence}) while {other.actor.name} was still inside "
                              f"{other.target} with it (fence {other.fence})")  # fmt: skip
            self.holding.setdefault(lock.key, []).append(run)
            self.last_entry[lock.key] = run_id
        return run

    def held_enter(self, run_id: str, key: str) -> None:
        """``promote`` of a run that kept ``key`` since its deploy starts: the key is still
        the run's, and no other run deployed with it meanwhile."""
        actor = self.actor()
        if actor.faulted:
            return  # a stalled holder that wakes is fenced at its next act
        claim = self.view.claim(key)
        now = self.store.clock.now_ms()
        holder = claim.holder.run_id if claim is not None and claim.holder else None
        if claim is None or not claim.is_live(now) or holder != run_id:
            self.fail("held-exclusive", f"{actor.name} ran promote of run {run_id}, whose {key} "
                      f"is not its own (held by {holder or 'nobody'})")  # fmt: skip
        last = self.last_entry.get(key)
        if last is not None and last != run_id:
            self.fail("held-exclusive", f"{actor.name} ran promote of run {run_id} after run "
                      f"{last} deployed with {key}")  # fmt: skip

    def act(self, run: Exec) -> bool:
        """The body's external action (a deploy), made against a resource that refuses a
        fence lower than one it has seen: False when it was refused."""
        if run.key is not None and run.fence < self.entry_fence.get(run.key, 0):
            self.fenced += 1
            return False
        run.acted = True
        return True

    def exit(self, run: Exec) -> None:
        run.exited = True
        if run.key is not None:
            self.holding[run.key] = [e for e in self.holding[run.key] if e is not run]

    # -- claims -----------------------------------------------------------------------------

    def granted(self, key: str, token: str, actor: Actor) -> None:
        self.token_owner[token] = actor.name
        seen = getattr(self.view, "token_seen", None)
        if seen is not None:
            seen(token)  # a store that keeps tokens hashed (tests.sim.pg)

    def orphaned(self, key: str) -> None:
        """The claim on ``key`` was taken by an acquire whose answer was lost: its taker
        never got the token, so nobody relies on it (freeing it takes nothing from anyone)."""
        claim = self.view.claim(key)
        if claim is not None and claim.token is not None:
            self.orphans.add(claim.token)

    def freeing(self, key: str, before: Any, how: str, actor: Actor) -> None:
        """``actor`` released or broke the claim on ``key`` (``before``: the claim as it was
        just before): fine for its holder, or once the claim is past its TTL; never a live
        claim of another. Judged by what the store did — a release with a stale token must
        change nothing — not by the token asked with."""
        state = before
        now = self.store.clock.now_ms()
        if state is None or state.token is None or not state.is_live(now):
            return
        after = self.view.claim(key)
        if after is not None and after.token == state.token:
            return  # nothing freed (a stale token changes nothing)
        if state.token in self.orphans:
            return  # taken by a lost acquire: nobody holds it
        owner = self.token_owner.get(state.token, "?")
        if owner != actor.name and not self._holds_run(key, state, actor, now):
            left = (state.expires_at or now) - now
            self.fail("claims-respected", f"{actor.name} {how} {key}, held by {owner} for "
                      f"{left // 1000} s more (fence {state.fence})")  # fmt: skip

    def _holds_run(self, key: str, state: Any, actor: Actor, now: int) -> bool:
        """A lock the run keeps (``held_until``) is the run's: whoever holds its lease may
        give it back."""
        run_id = state.holder.run_id if state.holder is not None else None
        if run_id is None or (run_id, key) not in self.kept:
            return False
        lease = self.view.claim(lease_key(run_id))
        return (
            lease is not None
            and lease.token is not None
            and lease.is_live(now)
            and self.token_owner.get(lease.token) == actor.name
        )

    # -- effects, dispatches, compensations, hooks ------------------------------------------

    def effect(self, run_id: str, target: str, name: str) -> None:
        actor = self.actor()
        record = self.record(run_id)
        row = record.targets.get(target) if record is not None else None
        recorded = row.effects.get(name) if row is not None else None
        where = f"{actor.name} ran effect {target}.{name} of run {run_id}"
        if recorded is None:
            self.fail("effect-once", f"{where} with no intent recorded")
            return
        if recorded.status == "done":
            self.fail("effect-once", f"{where} after it was recorded done")
        intent = (recorded.intent_at, recorded.attempts)
        seen = self.intents.setdefault((run_id, target, name), set())
        if intent in seen:
            self.fail("effect-once", f"{where} a second time for intent #{recorded.attempts} "
                      "(no new intent recorded)")  # fmt: skip
        seen.add(intent)

    def new_attempt(self) -> str:
        return f"{self.actor().name}-{next(self.attempts)}"

    def dispatch(self, run_id: str, gate: str, attempt: str, *, rate_limit_first: bool) -> bool:
        """A workflow dispatch; False: rate limited (GitHub did nothing)."""
        actor = self.actor()
        record = self.record(run_id)
        row = record.targets.get(gate) if record is not None else None
        marker = row.meta.get("marker") if row is not None else None
        where = f"{actor.name} dispatched the workflow of {gate} (attempt {attempt})"
        if marker != attempt:
            self.fail("dispatch-once", f"{where} while the record's intent is {marker!r}")
        if rate_limit_first and (run_id, gate) not in self.rate_limited:
            self.rate_limited.add((run_id, gate))
            return False
        landed = self.dispatches.setdefault((run_id, gate), [])
        if landed:
            self.fail("dispatch-once", f"{where}: a second run after {landed[0]}")
        landed.append(attempt)
        return True

    def compensation(self, run_id: str, target: str) -> None:
        actor = self.actor()
        record = self.record(run_id)
        row = record.targets.get(target) if record is not None else None
        where = f"{actor.name} compensated {target} of run {run_id}"
        recorded = row.status if row is not None else "absent"
        if record is not None and not record.degraded and recorded != "succeeded":
            status = row.status if row is not None else "absent"
            self.fail("compensation-iff", f"{where}, which is recorded {status}")
        earlier = self.compensations.setdefault((run_id, target), [])
        healthy = [c.actor.name for c in earlier if not _excused(c.actor, c.recorded)]
        if healthy:
            self.fail("compensation-iff", f"{where} again after {healthy[0]} did")
        earlier.append(Exec(run_id, target, actor, next(self._order)))

    def compensated(self, run_id: str, target: str) -> None:
        """The compensation's body returned: a fault of its actor after this excuses no
        second one."""
        actor = self.actor()
        for run in self.compensations.get((run_id, target), []):
            if run.actor is actor and run.recorded is None:
                run.recorded = next(self._order)

    def faulting(self, actor: Actor) -> None:
        """``actor`` is crashed, stalled or cut off now (its first fault counts)."""
        if actor.fault_order is None:
            actor.fault_order = next(self._order)

    def hook(self, run_id: str, gate: str) -> None:
        actor = self.actor()
        earlier = self.hooks.setdefault((run_id, gate), [])
        healthy = [a.name for a in earlier if not a.faulted]
        if healthy:
            self.fail("hook-once", f"{actor.name} called {gate}'s on_timeout hook after "
                      f"{healthy[0]} did")  # fmt: skip
        earlier.append(actor)

    def delivered(self, run_id: str, signal: str, outcome: str, *, refused: bool) -> None:
        """A signal delivery returned (``refused``: for a reason the design allows)."""
        if refused or signal not in self.signals:
            return  # an unknown signal must be refused: signal-known says if it was stored
        record = self.record(run_id)
        if record is not None and signal not in record.signals:
            actor = self.actor()
            self.fail("signal-stored", f"{actor.name} delivered {signal!r} to run {run_id} "
                      f"({outcome}); the record ({record.status}) does not hold it")  # fmt: skip

    def appended(self, run_id: str, delta: Any, actor: Actor) -> None:
        """An append of ``delta`` landed: each delta (and each event) an actor made lands
        once — a write whose answer was lost, sent again, is answered by its witness, not
        applied again. Told by identity: a retry re-sends the writer's own objects."""
        objects: tuple[Any, ...] = (delta, *delta.events)
        for made in objects:
            earlier = self._landed.get(id(made))
            if earlier is made:
                what = "write" if made is delta else f"event {getattr(made, 'tool', '?')}"
                self.fail("append-once", f"{actor.name}'s {what} on run {run_id} landed a "
                          "second time")  # fmt: skip
            self._landed[id(made)] = made

    # -- the record, after every step ---------------------------------------------------------

    def observe(self) -> None:
        """Check what the store holds now against what it held before
        (:func:`tests.sim.observe.observe`)."""
        from tests.sim.observe import observe

        observe(self)

    def settle(self, compensated_targets: dict[str, str]) -> None:
        """The end-of-seed safety checks (:func:`tests.sim.endings.settle`)."""
        from tests.sim.endings import settle

        settle(self, compensated_targets)


def _excused(actor: Actor, finished: int | None) -> bool:
    """Whether a fault of ``actor`` excuses doing its work again: only a fault before the
    work finished (``finished``: when it did, in the ledger's order; ``None``: never) — an
    actor crashed after its work was recorded left nothing to redo."""
    if not actor.faulted:
        return False
    return finished is None or actor.fault_order is None or actor.fault_order < finished
