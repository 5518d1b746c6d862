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
A lease or lock that cannot be renewed in time fails closed
(:mod:`zuke._engine.claims`): what it guards stops before the store can give
it away — a synchronous body by ending the process — and a lapsed lease
leaves the record as it is, for a sweep to reap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from zuke._clock import Clock
from zuke._engine import children
from zuke._engine.cancel_watch import CancelWatch, poll_interval_s
from zuke._engine.claims import Claim, guarding, lease_key, lease_ttl_ms, stop_at_ms
from zuke._engine.context import Context, RunState
from zuke._engine.executor import BODIES
from zuke._engine.fan_out import SpecIndex
from zuke._engine.gates import EffectDriver, GateKeeper
from zuke._engine.held import RunHeldLocks
from zuke._engine.hooks import EffectRunner, GateCheck, Held
from zuke._engine.plan import Plan, TargetSpec
from zuke._engine.result import RunVerdict
from zuke._engine.target_locks import TargetLocks
from zuke._engine.writer import RunStateWriter
from zuke.state._protocol import LockAcquired, StateStore, StoredRun
from zuke.state.records import RunStatus, WaitingFor

if TYPE_CHECKING:
    from dataclasses import dataclass

    from zuke._engine.scheduler import Scheduler
    from zuke._engine.walk import WalkResult
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


@dataclass(frozen=True)
class Hooks:
    """What the scheduler calls for gates and effects."""

    gate: GateCheck
    effects: EffectRunner


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
        #: why a gate's ``on_failure("cancel-run")`` cancelled the run here, if one did
        self.disposition: str | None = None
        #: what the compensation walk did, once a cancelled run has run it
        self.walked: WalkResult | None = None
        #: processes that existed before the run: a claim that lapses never ends them
        self.existing = frozenset(children.descendants())
        #: the locks the run keeps past their target (``held_until``)
        self.held = RunHeldLocks(
            store, writer, warn=warn, on_lost=self._stop,
            guards=lambda: guarding(state.run_id, None, self.end_process),
            finished=lambda name: writer.row(name).status in ("succeeded", "failed"),
        )  # fmt: skip
        self.locks = TargetLocks(
            store, writer, state, env=env, clock=clock, warn=warn, held=self.held,
            end_process=self.end_process,
        )  # fmt: skip

    @classmethod
    def adopt(
        cls,
        *,
        store: StateStore,
        found: StoredRun,
        lease: LockAcquired,
        state: RunState,
        env: Mapping[str, str],
        clock: Clock,
        warn: Callable[[str], None],
        since_ms: int | None = None,
    ) -> DurableRun:
        """Go on with a run another process started (a resume).

        The resumer has taken the run's lease and moved the record to
        ``running``; from here this run owns both, as a fresh one would.
        ``since_ms`` is when the lease was last proven (its acquisition's or
        last successful renewal's start, :attr:`Claim.since_ms`); unknown: now.
        """
        ttl = lease_ttl_ms(env, store)
        writer = RunStateWriter(
            store, found.record, version=found.version, run_state=state, clock=clock,
            redactor=state.redactor, warn=warn,
        )  # fmt: skip
        writer.note_lock(lease_key(state.run_id), lease.token)  # the record lists the new lease
        run = cls.with_lease(store, writer, lease, ttl, state=state, env=env, clock=clock,
                              warn=warn, since_ms=since_ms)  # fmt: skip
        run.held.adopt(found.record)  # renewed with their tokens before any target runs
        run.start(poll_interval_s(env))
        return run

    @classmethod
    def with_lease(
        cls,
        store: StateStore,
        writer: RunStateWriter,
        taken: LockAcquired,
        ttl: int,
        *,
        state: RunState,
        env: Mapping[str, str],
        clock: Clock,
        warn: Callable[[str], None],
        since_ms: int | None = None,
    ) -> DurableRun:
        key = lease_key(state.run_id)
        run_id = state.run_id
        note = f"; run {run_id} is left as recorded, for a sweep (zuke resume --check) to reap"
        guards = guarding(run_id, None, lambda line: run.end_process(line), note)
        lease = Claim(store, key, taken.token, taken.fence, ttl,
                      on_lost=lambda claim: run._lease_lost(), warn=warn, since_ms=since_ms,
                      guards=guards, label=f"the lease of run {run_id}")  # fmt: skip
        run = cls(
            store=store, writer=writer, lease=lease, state=state, env=env, clock=clock, warn=warn
        )
        return run

    def end_process(self, line: str) -> None:
        """A claim of this run lapsed while a body it guards runs: end the process."""
        children.end_process(line, self.existing)

    def start(self, poll_s: float) -> None:
        """Start renewing the lease and watching for a cancel from another process."""
        self.writer.lease = (self.lease.key, self.lease.token)
        self.lease.start()
        self.watch = CancelWatch(
            self.store, self.state.run_id, interval_s=poll_s, warn=self.warn,
            on_request=self._cancel_requested, on_settled=self._settled_elsewhere,
        ).start()  # fmt: skip
        self.writer.on_cancel_requested = self.watch.seen
        self.writer.on_settled_elsewhere = self._settled_elsewhere
        self.writer.holds_lease = lambda: not self.lease.lost.is_set()
        self.writer.lease_fresh = self._lease_fresh

    def _lease_fresh(self) -> bool:
        """Whether the lease is within its own stop point: past it — a process paused (its
        heartbeat has not run yet to say so) — an answer the store gives now proves nothing
        about the run, even ``Written`` for a write sent before the pause (a lost answer
        decided by its witness, issue 25 §1): another process may hold the run."""
        lease = self.lease
        since = lease.since_ms
        now = lease.clock.now_ms()  # the lease's own clock, that of its renewals
        return since is None or now < stop_at_ms(ttl_ms=lease.ttl_ms, since_ms=since)

    def hooks(self, pool: ThreadPoolExecutor) -> Hooks:
        keeper = GateKeeper(state=self.state, writer=self.writer, clock=self.clock,
                            params=self.state.params, warn=self.warn,
                            cancel=self._gate_cancelled)  # fmt: skip
        runner = EffectDriver(writer=self.writer, clock=self.clock, pool=pool)
        return Hooks(gate=keeper.check, effects=runner.run)

    def waiting(self) -> dict[str, WaitingFor]:
        """The gates the run is parked at, with what each waits for."""
        return {
            name: row.waiting_for
            for name, row in self.writer.record.targets.items()
            if row.status == "waiting" and row.waiting_for is not None
        }

    def _parked_gates(self) -> dict[str, WaitingFor]:
        """The gates parked now, from the writer's rows (its record may lag a write)."""
        rows = {name: self.writer.row(name) for name in self.writer.record.targets}
        return {
            name: row.waiting_for
            for name, row in rows.items()
            if row.status == "waiting" and row.waiting_for is not None
        }

    def _gate_cancelled(self, reason: str) -> None:
        if self.disposition is None and self.cancelled_by is None:
            self.disposition = reason
        if self.scheduler is not None:
            self.scheduler.cancel(reason=reason)

    def attach(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        # What stops the run from another thread also reaches a body on the loop's thread.
        self.lease.tell = scheduler.interrupt_from_thread
        self.held.tell = scheduler.interrupt_from_thread
        if self.watch is not None:
            self.watch.tell = scheduler.interrupt_from_thread
        if self.cancelled_by is not None:  # asked before the scheduler existed
            scheduler.cancel(reason=f"cancelled by {self.cancelled_by}")

    def _stop(self, reason: str) -> None:
        if self.stopped_because is None:
            self.stopped_because = reason
        if self.scheduler is not None:
            self.scheduler.abort(reason)

    def _lease_lost(self) -> None:
        self.writer.disown()
        if self.lease.lapsed is not None:
            when = (
                "Another process may have taken the run over already"
                if self.lease.late
                else "It stopped before the store could give the run to another process"
            )
            self._stop(
                f"Run {self.state.run_id} stopped: its lease could not be renewed "
                f"({self.lease.lapsed}). {when}. Nothing was rolled back; the record is left "
                "as it is, for a sweep (zuke resume --check) to reap or for the new holder."
            )
            return
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
        if status in ("running", "suspended", "cancelling"):
            self.writer.disown()
            if not self._lease_fresh():  # an answer that came past the lease's stop point
                self._stop(
                    f"Run {self.state.run_id} stopped: its lease lapsed while this process "
                    "was paused (no renewal proved it within its TTL), so another process may "
                    "hold the run now. Nothing was rolled back."
                )
                return
            self._stop(
                f"Run {self.state.run_id} stopped: its lease was taken over by another process "
                "(its record names another holder). Nothing was rolled back; the new holder "
                "owns the run."
            )
            return
        self._stop(f"Run {self.state.run_id} was {status} by another process; stopping.")

    async def guard(self, spec: TargetSpec, ctx: Context) -> Held | None:
        """Take the target's lock, if it declares one (:mod:`zuke._engine.target_locks`)."""
        return await self.locks.guard(spec, ctx)

    @property
    def record_error(self) -> str | None:
        """What could not be recorded, once :meth:`close` has run (``None``: all landed)."""
        return self.writer.record_error

    async def close_cancelled(self, plan: Plan, reason: str) -> RunVerdict:
        """End a cancelled run with its compensation walk, still under its lease.

        Everything the run recorded lands first; from then on the walk writes the
        record (:mod:`zuke._engine.walk`). A walk that cannot finish (a store that
        is down) leaves the run ``cancelling`` for the sweep to finish.
        """
        try:
            return await self._close_cancelled(plan, reason)
        finally:
            BODIES.reopen(self.state.run_id, None)  # a lapsed lease shut the run's bodies

    async def _close_cancelled(self, plan: Plan, reason: str) -> RunVerdict:
        # Imported here: only a cancelled run walks its compensations (the walk, the
        # compensations and the gates' on_cancel are a tenth of a run's imports).
        from zuke._engine.gate_cancel import GateHooks
        from zuke._engine.walk import walk

        if self.watch is not None:
            await self.watch.stop()
        if self.lease.lost.is_set() or self.stopped_because is not None:
            await self.close("cancelled")
            return "cancelled"
        await self.writer.persist()  # the walk settles the record: the kept locks leave it
        self.writer.disown()  # the walk writes the record from here
        # The owner tells its waiting gates (their on_cancel), whoever asked for the cancel: it
        # has the build and the lease; a canceller of a live owner's run only marks it.
        state = self.state
        gates = GateHooks(find=SpecIndex(plan.specs).get, params=state.params,
                          redactor=state.redactor, resumed_by=state.resumed_by)  # fmt: skip
        try:
            result = await walk(
                self.store, self.state.run_id, lease=self.lease, plan=plan,
                intended="cancelled", actor=self.state.resumed_by, clock=self.clock,
                redactor=self.state.redactor, reason=reason, notify=self.warn, gates=gates,
            )  # fmt: skip
        except Exception as exc:
            self.writer.record_error = (
                f"the compensation walk of run {self.state.run_id} could not finish ({exc}); "
                f"the run is left cancelling: `zuke resume --check {self.state.run_id}` "
                "finishes it"
            )
            await self.held.stop()  # the sweep that finishes the walk releases them
            await self.lease.release()
            return "cancelled"
        self.walked = result
        if result.stopped is not None:
            self._stop(f"Run {self.state.run_id} stopped: {result.stopped}")
            await self.held.stop()
            await self.lease.stop()
            return "failed"
        await self.held.release()  # after the compensations: the run no longer needs them
        await self.lease.release()
        done = len(result.compensated)
        line = f"Run {self.state.run_id} {result.status} — {done} compensation(s) ran"
        self.warn(line + (f", {len(result.failures)} failed." if result.failures else "."))
        return "cancelled" if result.status == "cancelled" else "failed"

    async def close(self, verdict: RunVerdict) -> None:
        """Write the end of the run, then give the lease back (unless it was lost).

        The writer retries the end while the lease is held; only then is the
        lease given back, so no sweep takes the run for dead meanwhile.
        """
        if self.watch is not None:
            await self.watch.stop()
        BODIES.reopen(self.state.run_id, None)  # a lapsed lease shut the run's bodies
        if self.lease.lost.is_set():
            await self.held.stop()  # the run's new holder adopts them, or they lapse
            await self.lease.stop()
            return
        if verdict == "suspended":  # nobody heartbeats a suspended run: they outlast its gates
            await self.held.suspend(self._parked_gates(), self.clock.now_ms())
        else:
            await self.held.release()
        self.writer.note_lock(self.lease.key, None)
        if self.stopped_because is not None:  # the record says why, not only the console
            self.writer.append_event("stop", outcome="error", detail=self.stopped_because)
        try:
            await self.writer.finish(verdict)
        finally:
            await self.lease.release()
