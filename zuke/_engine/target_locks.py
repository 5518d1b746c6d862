"""A target's lock around its body: taken after its ``running`` write, given back after.

A holder found there fails the target with the conflict guidance (and, for a lock a
run keeps, where that run waits); a store that cannot answer fails it with the store's
error. A lock with ``held_until`` is handed to the run (:mod:`zuke._engine.held`) when
the body ends, and the guard of ``until`` gives it back once that target has finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._engine.claims import Claim, acquire, guarding
from zuke._engine.context import Context, LockInfo, RunState
from zuke._engine.executor import BODIES
from zuke._engine.held import RunHeldLocks, UntilDone, holder_of
from zuke._engine.hooks import Held
from zuke._engine.plan import TargetSpec
from zuke._engine.record import ci_run_url
from zuke._engine.writer import RunStateWriter
from zuke._errors import LockConflictError
from zuke._lock_settings import LockSettings
from zuke.state._protocol import LockHeld, LockHolder, StateStore
from zuke.state.records import HeldLock


class TargetLock:
    """A target's lock while its body runs (:class:`~zuke._engine.hooks.Held`)."""

    def __init__(
        self,
        claim: Claim,
        writer: RunStateWriter,
        reopen: Callable[[], None],
        *,
        run_held: bool = False,
    ) -> None:
        self.claim = claim
        self.writer = writer
        self.lost = claim.lost
        self._reopen = reopen
        #: ``held_until``: the body's end hands the lock to the run instead of releasing it
        self.run_held = run_held

    def loss_message(self) -> str:
        if self.claim.lapsed is not None:
            when = (
                "another process may hold it already"
                if self.claim.late
                else "the target was stopped before the store could give it to another process"
            )
            return (
                f'lock "{self.claim.key}" was lost while this target ran: it could not be '
                f"renewed ({self.claim.lapsed}); {when}"
            )
        return (
            f'lock "{self.claim.key}" was lost while this target ran: the store refused its '
            "renewal (another process released or took it over); the run stops so that two "
            "holders never overlap"
        )

    async def release(self) -> None:
        if self.run_held:
            self._reopen()
            return
        await self.claim.release()
        self._reopen()
        if not self.claim.lost.is_set():
            self.writer.note_lock(self.claim.key, None)


class KeptLock:
    """A target that locks a key its run already keeps (``held_until``): nothing to take
    or give back — the run's hold covers it."""

    def __init__(self, lost: asyncio.Event) -> None:
        self.lost = lost

    def loss_message(self) -> str:
        return ""

    async def release(self) -> None:
        return None


class TargetLocks:
    """The guard :class:`~zuke._engine.durable.DurableRun` gives the scheduler."""

    def __init__(
        self,
        store: StateStore,
        writer: RunStateWriter,
        state: RunState,
        *,
        env: Mapping[str, str],
        clock: Clock,
        warn: Callable[[str], None],
        held: RunHeldLocks,
        end_process: Callable[[str], None],
    ) -> None:
        self.store = store
        self.writer = writer
        self.state = state
        self.env = env
        self.clock = clock
        self.warn = warn
        self.held = held
        self.end_process = end_process

    async def guard(self, spec: TargetSpec, ctx: Context) -> Held | None:
        """Take the target's lock, if it declares one; for the target a run-held lock is
        kept until, also what gives that lock back once the target has finished."""
        await self.held.prove()  # a resumed run's kept locks, before any target runs
        own = await self._lock(spec, ctx)
        if not self.held.ending_at(spec.name):
            return own
        return UntilDone(self.held, spec.name, own, finished=lambda: self._finished(spec.name))

    def _finished(self, name: str) -> bool:
        """Whether ``name`` ran to its end (rather than parked at a gate, to run on later).
        One skipped never ran: the run keeps the lock until it ends (a timeout's rollback
        runs under it)."""
        return self.writer.row(name).status in ("succeeded", "failed")

    async def _lock(self, spec: TargetSpec, ctx: Context) -> Held | None:
        if spec.lock is None:
            return None
        settings = LockSettings(spec.name, secrets=self.state.redactor)
        spec.lock(settings)
        lock = settings.freeze()
        kept = self.held.fence(lock.key)
        if kept is not None:  # the run keeps this key already (held_until): it is ours
            ctx.lock = LockInfo(key=lock.key, fence=kept)
            return KeptLock(asyncio.Event())
        holder = LockHolder(
            actor=self.state.resumed_by,  # who holds it: this process, not the starter
            run_id=self.state.run_id,
            since=iso(self.clock.now_ms()),
            run_url=ci_run_url(self.env),
        )
        since = SYSTEM_CLOCK.now_ms()  # the store's expiry is at least this plus the TTL
        taken = await acquire(self.store, lock.key, holder, lock.ttl_ms)
        if isinstance(taken, LockHeld):
            note = await asyncio.to_thread(holder_of, self.store, taken.holder, lock.key)
            raise LockConflictError(taken.holder, lock.guidance(taken.holder) + note)
        run_id, scope = self.state.run_id, spec.name
        if lock.until is not None:  # the run keeps it: its loss stops the whole run
            claim = self.held.claim(lock.key, taken.token, taken.fence, lock.ttl_ms, since)
            claim.start()
            row = HeldLock(target=spec.name, until=lock.until, ttl_ms=lock.ttl_ms,
                           fence=taken.fence)  # fmt: skip
            self.held.keep(row, claim)
        else:
            guards = guarding(run_id, scope, self.end_process)
            claim = Claim(self.store, lock.key, taken.token, taken.fence, lock.ttl_ms,
                          on_lost=lambda claim: None, warn=self.warn, since_ms=since,
                          guards=guards).start()  # fmt: skip
        held = TargetLock(claim, self.writer, reopen=lambda: BODIES.reopen(run_id, scope),
                          run_held=lock.until is not None)  # fmt: skip
        # The record lists the claim before the body runs, so `zuke cancel` can release it.
        self.writer.note_lock(lock.key, taken.token)
        try:
            await self.writer.flush()
        except BaseException:
            await held.release()
            raise
        ctx.lock = LockInfo(key=lock.key, fence=taken.fence)
        return held
