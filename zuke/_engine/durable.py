"""The durable side of one run: its record, its lease and its targets' locks.

Ordering is the point of this module:

1. the run's lease ``zuke-run-<id>`` is taken *before* the record says
   ``running`` — so a running record always has a live holder, and a sweep
   can tell a slow run (lease renewed) from a dead one (lease lapsed);
2. a target's lock is taken after its ``running`` write and before its body;
   a holder found there fails the target with the conflict guidance, a store
   that cannot answer fails it with the store's error;
3. at the end the terminal status is written, then the lease is given back.

Losing the lease (a refused renewal) stops the run and disowns the writer:
someone else owns the run now, so this process writes nothing more and
rolls nothing back. Losing a target's lock stops that target and the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from zuke._clock import Clock, iso
from zuke._duration import parse_duration
from zuke._engine.cancel_watch import CancelWatch, poll_interval_s
from zuke._engine.claims import LEASE_TTL_MS, Claim, acquire, acquire_lease, lease_key
from zuke._engine.context import Context, LockInfo, RunState
from zuke._engine.plan import Plan, TargetSpec
from zuke._engine.record import ci_run_url, deadline_at, new_record
from zuke._engine.result import RunVerdict
from zuke._engine.scheduler import Held, Scheduler
from zuke._engine.writer import RunStateWriter
from zuke._errors import LockConflictError, StateError
from zuke._lock_settings import LockSettings
from zuke.state._protocol import LockHeld, LockHolder, StateStore
from zuke.state.records import RunStatus
from zuke.state.resolve import resolve_store


def lease_ttl_ms(env: Mapping[str, str]) -> int:
    """The run lease's TTL: 60 s, or ``ZUKE_RUN_LEASE_TTL`` (for tests and slow stores)."""
    raw = env.get("ZUKE_RUN_LEASE_TTL", "")
    return parse_duration(raw, what="ZUKE_RUN_LEASE_TTL") if raw else LEASE_TTL_MS


def needs_state(plan: Plan) -> bool:
    """Whether a feature of the plan needs a store even without ``--state``."""
    return any(spec.lock is not None for spec in plan.specs.values())


class TargetLock:
    """A target's lock while its body runs (:class:`~zuke._engine.scheduler.Held`)."""

    def __init__(self, claim: Claim, writer: RunStateWriter) -> None:
        self.claim = claim
        self.writer = writer
        self.lost = claim.lost

    def loss_message(self) -> str:
        return (
            f'lock "{self.claim.key}" was lost while this target ran: the store refused its '
            "renewal (another process released or took it over); the run stops so that two "
            "holders never overlap"
        )

    async def release(self) -> None:
        await self.claim.release()
        if not self.claim.lost.is_set():
            self.writer.note_lock(self.claim.key, None)


class DurableRun:
    """Record, lease and locks of one run."""

    def __init__(
        self,
        *,
        store: StateStore,
        writer: RunStateWriter,
        lease: Claim,
        state: RunState,
        env: Mapping[str, str],
        clock: Clock,
        warn: Callable[[str], None],
    ) -> None:
        self.store = store
        self.writer = writer
        self.lease = lease
        self.state = state
        self.env = env
        self.clock = clock
        self.warn = warn
        self.scheduler: Scheduler | None = None
        self.stopped_because: str | None = None
        self.watch: CancelWatch | None = None
        #: who cancelled the run from another process (``zuke cancel``), if anyone did
        self.cancelled_by: str | None = None

    @classmethod
    async def open(
        cls,
        *,
        build_name: str,
        override: StateStore | None,
        deadline: str | int | None,
        plan: Plan,
        roots: list[str],
        params: Mapping[str, str],
        state: RunState,
        env: Mapping[str, str],
        clock: Clock,
        required: bool,
        cwd: Path | None,
        warn: Callable[[str], None],
    ) -> DurableRun | None:
        """Take the lease, then write the first record; ``None`` for a stateless run."""
        store = resolve_store(
            override=override, env=env, required=required or needs_state(plan), cwd=cwd
        )
        if store is None:
            return None
        now = clock.now_ms()
        record = new_record(
            run_id=state.run_id,
            build=build_name,
            plan=plan,
            roots=roots,
            params=params,
            actor=state.actor,
            now_ms=now,
            env=env,
            deadline=deadline_at(deadline, now),
        )
        ttl = lease_ttl_ms(env)
        poll_s = poll_interval_s(env)  # a bad value fails here, before the lease is taken
        holder = LockHolder(state.actor, state.run_id, iso(now), ci_run_url(env))
        taken = await acquire_lease(store, state.run_id, holder, ttl_ms=ttl)
        if isinstance(taken, LockHeld):
            raise StateError(f"run id {state.run_id} is already leased; the id was reused")
        record = replace(record, locks={lease_key(state.run_id): taken.token})
        writer = RunStateWriter(
            store, record, version=None, run_state=state, clock=clock,
            redactor=state.redactor, warn=warn,
        )  # fmt: skip
        lease = Claim(
            store,
            lease_key(state.run_id),
            taken.token,
            taken.fence,
            ttl,
            on_lost=lambda claim: run._lease_lost(),
            warn=warn,
        )
        run = cls(
            store=store, writer=writer, lease=lease, state=state, env=env, clock=clock, warn=warn
        )
        try:
            await writer.create()
        except BaseException:
            await run.lease.release()
            raise
        run.lease.start()
        run.watch = CancelWatch(
            store, state.run_id, interval_s=poll_s, warn=warn,
            on_request=run._cancel_requested, on_settled=run._settled_elsewhere,
        ).start()  # fmt: skip
        writer.on_cancel_requested = run.watch.seen
        writer.on_settled_elsewhere = run._settled_elsewhere
        writer.holds_lease = lambda: not run.lease.lost.is_set()
        return run

    def attach(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        if self.cancelled_by is not None:  # asked before the scheduler existed
            scheduler.cancel(reason=f"cancelled by {self.cancelled_by}")

    def _stop(self, reason: str) -> None:
        if self.stopped_because is None:
            self.stopped_because = reason
        if self.scheduler is not None:
            self.scheduler.abort(reason)

    def _lease_lost(self) -> None:
        self.writer.disown()
        self._stop(
            f"Run {self.state.run_id} stopped: its lease was taken over by another process "
            "(a renewal was refused). Nothing was rolled back; the new holder owns the run."
        )

    def _cancel_requested(self, actor: str) -> None:
        if self.cancelled_by is not None:
            return
        self.cancelled_by = actor
        self.warn(
            f"Run {self.state.run_id} was cancelled by {actor} (zuke cancel): stopping; "
            "running targets are told to stop and their locks released once they return"
        )
        if self.scheduler is not None:
            self.scheduler.cancel(reason=f"cancelled by {actor}")

    def _settled_elsewhere(self, status: RunStatus) -> None:
        self._stop(f"Run {self.state.run_id} was {status} by another process; stopping.")

    async def guard(self, spec: TargetSpec, ctx: Context) -> Held | None:
        """Take the target's lock, if it declares one."""
        if spec.lock is None:
            return None
        settings = LockSettings(spec.name, secrets=self.state.redactor)
        spec.lock(settings)
        lock = settings.freeze()
        holder = LockHolder(
            actor=self.state.actor,
            run_id=self.state.run_id,
            since=iso(self.clock.now_ms()),
            run_url=ci_run_url(self.env),
        )
        taken = await acquire(self.store, lock.key, holder, lock.ttl_ms)
        if isinstance(taken, LockHeld):
            raise LockConflictError(taken.holder, lock.guidance(taken.holder))
        claim = Claim(self.store, lock.key, taken.token, taken.fence, lock.ttl_ms,
                      on_lost=lambda claim: None, warn=self.warn).start()  # fmt: skip
        held = TargetLock(claim, self.writer)
        # The record lists the claim before the body runs, so `zuke cancel` can release it.
        self.writer.note_lock(lock.key, taken.token)
        try:
            await self.writer.flush()
        except BaseException:
            await held.release()
            raise
        ctx.lock = LockInfo(key=lock.key, fence=taken.fence)
        return held

    @property
    def record_error(self) -> str | None:
        """What could not be recorded, once :meth:`close` has run (``None``: all landed)."""
        return self.writer.record_error

    async def close(self, verdict: RunVerdict) -> None:
        """Write the end of the run, then give the lease back (unless it was lost).

        The writer retries the end while the lease is held; only then is the
        lease given back, so no sweep takes the run for dead meanwhile.
        """
        if self.watch is not None:
            await self.watch.stop()
        if self.lease.lost.is_set():
            await self.lease.stop()
            return
        self.writer.note_lock(self.lease.key, None)
        try:
            await self.writer.finish(verdict)
        finally:
            await self.lease.release()
