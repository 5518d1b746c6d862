"""The one owner of a run's transitions from outside its live process.

Resume, the sweep's gate checks, timeout dispositions, cancel of a dead
owner's run, reaping, a walk's takeover and MCP calls all change a run that
no live process drives. Each does it the same way, through a :class:`Hold`:

1. **take the run's lease** ``zuke-run-<id>`` (the store's TTL,
   :func:`~zuke._engine.claims.lease_ttl_ms`) and start its heartbeat at
   once — a held lease means somebody else moves the run;
2. **read the record** after the lease is ours, and decide on that read;
3. **write with a compare-and-swap on the record's version**
   (:func:`~zuke.state.update.update_run`): a write that conflicts re-reads
   and decides again on the fresh record, never on rows read before. Only
   appends land without the lease (a signal, an audit event, a cancel
   request), so a re-decision sees them;
4. **prove the lease before every write and around user code**: a renewal
   that the store refuses or cannot confirm (:meth:`Hold.prove`) stops the
   transition before it writes or calls anything more.

The rules every caller shares live here too: which build a run belongs to
(:func:`ownership_problem`), whether the build still has the run's graph
(:func:`graph_drift`), and the settings a transition parses before its commit
point (:func:`check_settings`).

Who may move a run, and under what (``docs/architecture.md`` draws it)::

    running    --(owner, its lease)-->            suspended | succeeded | failed | cancelling
    suspended  --(resumer or sweep, a Hold)-->    running | failed | cancelled (timeout)
    running    --(reaper, a Hold: lease lapsed)--> suspended | cancelling (past deadline)
    cancelling --(walker: lease + cancel lock)--> cancelled | failed
    any        --(anyone, no lease: an append)--> the same status, a signal or event added
    running    --(canceller, no lease)-->         cancelling (the owner sees it and walks)
    any        --(`zuke locks break`, no lease)--> the same status, a ``locks-break`` event
                                                  added and the key dropped from ``locks``

``zuke locks break`` (:mod:`zuke.runs.locks`) is the one writer besides appends that
takes no lease: it is an operator's override of a lock, guarded by the holder's lease
and ``held_until`` unless forced, and it writes one compare-and-swap delta. The broken
holder is stopped by the lock's fence, and its resume finds the key gone and fails.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._engine.cancel_watch import poll_interval_s
from zuke._engine.claims import Claim, acquire_lease, lease_ttl_ms, stop_at_ms
from zuke._engine.record import ci_run_url
from zuke._engine.resumed import Adoption, graph_drift
from zuke._engine.run import LoadedBuild, RunOptions, load
from zuke._errors import (
    AlreadyResumedError,
    ForeignRunError,
    LeaseLostError,
    RunNotFoundError,
    ZukeError,
)
from zuke.runs.outcome import ResumeAction, ResumeOutcome
from zuke.runs.ownership import check_ownership, ownership_problem
from zuke.state._protocol import LockAcquired, LockHeld, LockHolder, StateStore, StoredRun
from zuke.state._protocol import lease_key as lease_key
from zuke.state.records import RunDelta, RunRecord
from zuke.state.update import MAX_ATTEMPTS, GaveUp, Updated, UpdateResult, update_run

if TYPE_CHECKING:
    from zuke._build import Build

#: the events a process writes as it takes a run in hand (a resume, a timeout's or a failed
#: gate's disposition, a cancel): their actor is the run's mover from then on
MOVING_EVENTS = frozenset({"resume", "timeout", "wait-failed", "cancel"})


def moved_by(record: RunRecord) -> str:
    """Who moved the run last (for "it is running (resumed by …)"): the actor of its newest
    :data:`MOVING_EVENTS` entry, else its starter. The record's ``actor`` is the starter
    for ever, so it never answers this."""
    for event in reversed(record.events):
        if event.tool in MOVING_EVENTS:
            return event.actor
    return record.actor


def check_settings(env: Mapping[str, str], store: StateStore | None = None) -> None:
    """Parse every setting a transition needs before its commit point: a bad value
    refuses the command before the record moves, never after (exit 2, run untouched)."""
    lease_ttl_ms(env, store)
    poll_interval_s(env)


def load_for(build_cls: type[Build], record: RunRecord, run: RunOptions) -> LoadedBuild:
    """The build with the run's recorded parameters, overlaid with the caller's."""
    params: dict[str, Sequence[str]] = {k: [v] for k, v in record.params.items()}
    params.update(run.params)
    return load(build_cls, params, run.env)


class Hold:
    """The run's lease, held by this process for one transition (see the module docstring).

    The heartbeat starts when the lease is taken, so user code run under the
    hold (a trigger, an ``on_timeout`` hook, a rollback's build loading) never
    outlasts an unrenewed lease.
    """

    def __init__(self, store: StateStore, taken: LockAcquired, claim: Claim, found: StoredRun,
                 clock: Clock, *, actor: str) -> None:  # fmt: skip
        self.store = store
        #: who holds it: this process's actor (recorded in the events it writes)
        self.actor = actor
        self.taken = taken
        self.claim = claim
        self.found = found
        self.clock = clock
        self._released = False
        self._proven_ms = 0  # its own renewals; the acquisition is the claim's since_ms

    @property
    def record(self) -> RunRecord:
        return self.found.record

    @property
    def run_id(self) -> str:
        return self.found.record.id

    @property
    def token(self) -> str:
        return self.taken.token

    @property
    def ttl_ms(self) -> int:
        return self.claim.ttl_ms

    def lost(self) -> bool:
        return self.claim.lost.is_set()

    @property
    def since_ms(self) -> int:
        """When the lease was last proven: the start of the latest renewal that succeeded
        (this hold's own or its heartbeat's), or of the acquisition."""
        return max(self._proven_ms, self.claim.since_ms or 0)

    async def prove(self) -> None:
        """Raise :class:`LeaseLostError` unless the lease is provably ours: taken or renewed
        under half a TTL ago (the store hands it to nobody before its TTL, and the heartbeat
        renews it every half TTL less its margin), or renewed now."""
        if not self.lost():
            started = self.claim.clock.now_ms()
            if started - self.since_ms < self.ttl_ms // 2:
                return
            try:
                renewed = await asyncio.to_thread(
                    self.store.renew_lock, lease_key(self.run_id), self.token, self.ttl_ms
                )
            except Exception as exc:  # cannot prove it: stop, as a refusal would
                raise LeaseLostError(
                    f"run {self.run_id}: could not renew its lease ({exc}); stopped before "
                    "changing it",
                    run_id=self.run_id,
                ) from None
            if renewed:
                self._proven_ms = max(self._proven_ms, started)
                return
        raise LeaseLostError(
            f"run {self.run_id}: its lease was taken over by another process; stopped before "
            "changing it",
            run_id=self.run_id,
        )

    async def write(self, change: Callable[[RunRecord], RunDelta | None]) -> UpdateResult:
        """Compare-and-swap ``change`` (decided on the fresh record), the lease proven
        before every attempt: a conflict's retry re-proves it too, and an attempt whose
        proof is older than the lease's stop point is not made (a holder paused between
        its proof and its write must not land after a takeover)."""
        outcome: UpdateResult | None = None
        # The first attempt is decided on the record this hold read or wrote last (read under
        # the lease: a compare-and-swap on its version, so a run that moved since conflicts);
        # a conflict's retry reads the record again.
        known: StoredRun | None = self.found
        for _ in range(MAX_ATTEMPTS):
            await self.prove()
            stop_at = stop_at_ms(ttl_ms=self.ttl_ms, since_ms=self.since_ms)

            def guarded(fresh: RunRecord, stop_at: int = stop_at) -> RunDelta | None:
                if self.claim.clock.now_ms() >= stop_at:
                    raise LeaseLostError(
                        f"run {self.run_id}: its lease was last proven too long ago to write "
                        "(this process was paused); stopped before changing it",
                        run_id=self.run_id,
                    )
                return change(fresh)

            outcome = await asyncio.to_thread(
                update_run, self.store, self.run_id, guarded, attempts=1, known=known
            )
            known = None
            if isinstance(outcome, Updated):
                self.found = StoredRun(outcome.record, outcome.version)
            if not isinstance(outcome, GaveUp):
                return outcome
        assert outcome is not None
        return outcome

    async def hand_over(self) -> Adoption:
        """Stop this hold's heartbeat and hand the run to the engine, whose own heartbeat
        takes over the same lease, its stop point counted from when it was last proven."""
        await self.claim.stop()
        self._released = True
        return Adoption(self.store, self.found, self.taken, since_ms=self.since_ms)

    async def release(self) -> None:
        """Give the lease back (a no-op once handed over or released)."""
        if self._released:
            return
        self._released = True
        await self.claim.stop()
        await self.give_back()

    async def give_back(self) -> None:
        """Release the lease's token even after a hand-over (the engine may have released
        it already: then a no-op); a failure leaves it to lapse at its TTL."""
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.store.release_lock, lease_key(self.run_id), self.token)


async def take(
    store: StateStore,
    run_id: str,
    *,
    actor: str,
    clock: Clock,
    env: Mapping[str, str],
    held: str,
    warn: Callable[[str], None] = lambda message: None,
) -> Hold:
    """Take ``run_id``'s lease and read its record (see :class:`Hold`).

    ``held`` is the refusal when someone else holds the lease, with ``{actor}``
    standing for the holder; it is raised as :class:`~zuke.AlreadyResumedError`.
    """
    ttl = lease_ttl_ms(env, store)
    holder = LockHolder(actor, run_id, iso(clock.now_ms()), ci_run_url(env))
    asked = SYSTEM_CLOCK.now_ms()  # the store's expiry is at least this plus the TTL
    taken = await acquire_lease(store, run_id, holder, ttl_ms=ttl)
    if isinstance(taken, LockHeld):
        raise AlreadyResumedError(
            held.format(actor=taken.holder.actor), run_id=run_id, by=taken.holder.actor
        )
    return await hold_taken(store, run_id, taken, ttl_ms=ttl, clock=clock, warn=warn,
                            since_ms=asked, actor=actor)  # fmt: skip


async def hold_taken(
    store: StateStore,
    run_id: str,
    taken: LockAcquired,
    *,
    ttl_ms: int,
    clock: Clock,
    warn: Callable[[str], None] = lambda message: None,
    since_ms: int | None = None,
    actor: str,
) -> Hold:
    """A :class:`Hold` on a lease just taken: its heartbeat starts now, then the record
    is read (a record read before the lease was ours decides nothing). ``since_ms``: when
    the acquisition was asked for, on the system clock (default: now)."""
    # Heartbeats run in real time, on the system clock (as the engine's do): ``clock``
    # (injectable) stamps the record, never the lease's stop point.
    claim = Claim(store, lease_key(run_id), taken.token, taken.fence, ttl_ms,
                  on_lost=lambda claim: None, warn=warn, since_ms=since_ms)  # fmt: skip
    claim.start()
    try:
        found = await asyncio.to_thread(store.get_run, run_id)
    except BaseException:
        await _give_back(store, run_id, claim, taken)
        raise
    if found is None:
        await _give_back(store, run_id, claim, taken)
        raise RunNotFoundError(f'no run "{run_id}" in the store', run_id=run_id)
    return Hold(store, taken, claim, found, clock, actor=actor)


class LazyHold:
    """The run's lease, taken at the first change rather than up front (a sweep's check).

    Asking a gate changes nothing, and a cron sweep of a quiet store must cost
    reads only. So the checks run on ``basis`` (a record read without the lease),
    and the lease is taken the moment something must change: a trigger's
    ``ctx.persist()`` before its external call, a gate that passed, failed or
    timed out, a check worth stamping. Taking it reads the record again and
    refuses (:class:`~zuke.AlreadyResumedError`) unless the run is still parked
    with every gate row as the checks saw it — so two sweeps asking one gate at
    once make its external call once: the second finds the lease held, or the
    gate's state moved.
    """

    def __init__(self, store: StateStore, basis: RunRecord, *, actor: str, clock: Clock,
                 env: Mapping[str, str], warn: Callable[[str], None]) -> None:  # fmt: skip
        self.store = store
        self.basis = basis
        #: who will hold it: this process's actor (a sweep's)
        self.actor = actor
        self._take = {"actor": actor, "clock": clock, "env": env, "warn": warn}
        self.hold: Hold | None = None

    async def get(self) -> Hold:
        """The hold, taken (and the record checked against ``basis``) on first use."""
        if self.hold is not None:
            return self.hold
        run_id = self.basis.id
        held = f"run {run_id} is held by {{actor}}"
        hold = await take(self.store, run_id, held=held, **self._take)  # type: ignore[arg-type]
        fresh = hold.record
        gates = [n for n, row in self.basis.targets.items() if row.status == "waiting"]
        if fresh.status != self.basis.status or any(
            fresh.targets.get(n) != self.basis.targets[n] for n in gates
        ):
            await hold.release()
            raise AlreadyResumedError(
                f"run {run_id} moved while its gates were checked (it is {fresh.status} now); "
                "it is left to whoever moved it",
                run_id=run_id,
                by=moved_by(fresh),
            )
        self.hold = hold
        return hold

    async def release(self) -> bool:
        """Give the lease back if it was taken; whether it was."""
        if self.hold is None:
            return False
        await self.hold.release()
        return True


async def live_claims(
    store: StateStore, run_id: str, claims: Mapping[str, str], *, now_ms: int
) -> dict[str, int]:
    """Which of the claims a gone holder's record lists are still live: key -> expiry.

    A claim within its TTL is released by its holder only. A holder whose lease
    lapsed is presumed gone (a healthy one stops before, by the fail-closed rule),
    but one paused past its lease may still wake inside a lock's longer TTL, so its
    claims are never freed by another process: they lapse at their TTL, and the
    next acquirer takes them. A store without ``list_locks`` reports none live.
    """
    lister = getattr(store, "list_locks", None)
    if not callable(lister) or not claims:
        return {}
    try:
        entries = await asyncio.to_thread(lister, run_id=run_id)
    except (NotImplementedError, ZukeError):
        return {}
    return {
        e.key: e.expires_at
        for e in entries
        if e.key in claims and e.key != lease_key(run_id) and e.expires_at > now_ms
    }


async def _give_back(store: StateStore, run_id: str, claim: Claim, taken: LockAcquired) -> None:
    await claim.stop()
    with contextlib.suppress(Exception):
        await asyncio.to_thread(store.release_lock, lease_key(run_id), taken.token)


__all__ = [
    "ForeignRunError",
    "Hold",
    "LazyHold",
    "LeaseLostError",
    "ResumeAction",
    "ResumeOutcome",
    "check_ownership",
    "check_settings",
    "graph_drift",
    "hold_taken",
    "live_claims",
    "load_for",
    "moved_by",
    "ownership_problem",
    "take",
]
