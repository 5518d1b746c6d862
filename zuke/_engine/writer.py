"""The run's state writer: turns transitions into durable record writes.

One writer per run, on the event loop. It is an engine part, not an ordinary
observer: :class:`~zuke._engine.observer.Observers` never drops it, and
nothing it meets ends the run or leaves the record silently behind.

Writes are serialised (one in flight) and coalesced: whatever changed while a
write was in flight goes out in the next one, as a single
:class:`~zuke.state.records.RunDelta`. On a journaling store that is one
small append per write, so the bytes persisted grow linearly with the run
(see ``docs/state.md``). Every write goes through
:func:`zuke.state.update.update_run`, the one compare-and-swap loop.

Durability rules, and how they hold:

* a record saying a target is ``running`` exists before its body runs —
  the ``running`` transition awaits its write;
* a target's ``succeeded`` is durable before any dependent starts — a
  dependent's ``running`` write carries every earlier settlement with it, and
  a short debounce persists settlements that no write follows;
* ``ctx.state.set`` is persisted with the next write, at the latest with the
  target's own settlement.

Failures, and what becomes of them:

* a conflicting write is re-applied to the fresh record (``update_run``'s
  budget); a change lost to conflicts marks the record ``degraded``, which
  the next write that lands carries, and the run's end then re-sends every
  target's row so that the record at least ends complete;
* a write the store fails (any exception: ``OSError``, an HTTP 500 or 413, a
  full disk) is retried with backoff while the run holds its lease; if it
  still fails the change is kept for the next write and the build goes on;
* the run's end must land: if it cannot, a small write marks the record
  ``degraded`` (and never ``succeeded``) where any write can still land, and
  :attr:`RunStateWriter.record_error` says what could not be recorded — the
  CLI prints it and exits non-zero;
* a run that is no longer this process's (its lease taken over, or settled by
  another process) is never written again, and never reported as written:
  :meth:`RunStateWriter.persist_intent`, the durability point before an
  external call (an effect, a dispatch), raises :class:`RunTakenOverError`
  then, so the call is not made — the new owner makes it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._engine.context import RunState
from zuke._engine.observer import RecordWriter, Transition
from zuke._engine.record_writes import BACKOFF_S, OURS, honest_status
from zuke._engine.record_writes import RunTakenOverError as RunTakenOverError
from zuke._engine.sent_writes import SentWrites
from zuke._engine.store_traits import checkpointed, lazy_after, local, sends_appends
from zuke._errors import StateError, ZukeError
from zuke._redact import Redactor
from zuke.state._frozen import replace
from zuke.state._protocol import Conflict, StateStore
from zuke.state.records import (
    EffectRecord,
    HeldLock,
    RunDelta,
    RunEvent,
    RunRecord,
    RunStatus,
    TargetRecord,
)


class RunStateWriter(SentWrites, RecordWriter):
    """Persists one run's transitions to a store."""

    def __init__(
        self,
        store: StateStore,
        record: RunRecord,
        *,
        version: str | None,
        run_state: RunState | None = None,
        clock: Clock = SYSTEM_CLOCK,
        redactor: Redactor | None = None,
        warn: Callable[[str], None] = lambda message: None,
        backoff_s: Sequence[float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self._fold_lock = threading.Lock()
        self.record = record
        self.version = version
        self.clock = clock
        self.redactor = redactor or Redactor()
        self.warn = warn
        self.run_state = run_state
        #: who this process's events name: its own actor (a resumer's, not the starter's)
        self.actor = run_state.resumed_by if run_state is not None else record.actor
        self.backoff_s = tuple(BACKOFF_S if backoff_s is None else backoff_s)
        self.sleep = sleep
        self.writes = 0
        #: whether the run still holds its lease (retrying a write makes sense only then)
        self.holds_lease: Callable[[], bool] = lambda: True
        self.lease_fresh: Callable[[], bool] = lambda: True
        #: one line saying what could not be recorded, once the run's end is known
        self.record_error: str | None = None
        #: set when a re-read shows another process ended the run (``zuke cancel``)
        self.settled_elsewhere: RunStatus | None = None
        #: called on the loop with the status another process gave the run
        self.on_settled_elsewhere: Callable[[RunStatus], None] = lambda status: None
        #: (key, token) of the run's lease: a record naming another token is not ours
        self.lease: tuple[str, str] | None = None
        #: called on the loop with the fresh record when a write finds it ``cancelling``
        self.on_cancel_requested: Callable[[RunRecord], object] = lambda record: None
        self._rows: dict[str, TargetRecord] = dict(record.targets)
        self._pending: RunDelta | None = None
        self._dirty: dict[str, None] = {}
        self._dirty_at = ""
        self._dirty_meta: set[str] = set()
        self._lost = False  # a change was lost: the next write marks the record degraded
        self._loss: str | None = None  # why the record is incomplete, if it is
        self._failing: str | None = None  # the reason of the current streak of failed writes
        self._broken: str | None = None  # a hook raised: which change is missing is unknown
        self._disowned = False
        #: the run's end (or suspension) was written: this writer's last write. A notice that
        #: reaches the loop later (a body's ``ctx.state.set`` from a worker thread, already in
        #: the row its transition wrote) writes nothing — written after the end, it would find
        #: the run settled and take its own end for another process's.
        self._ended = False
        self._write_lock = asyncio.Lock()
        self._debounce: asyncio.TimerHandle | None = None
        self._background: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        #: the store writes at durability points only (see :func:`checkpointed`)
        self.checkpointed = checkpointed(store)
        #: whether a write may be made on the loop's thread now: the scheduler says so
        #: while the run has no other work (its only target is awaited directly), for a
        #: :func:`~zuke._engine.store_traits.local` store; otherwise writes go to a worker
        #: thread, so that a slow store never stalls the loop beside running work
        self.inline: Callable[[], bool] = lambda: False
        self._local = local(store)
        #: the run's creation and its end are written on the loop's thread (a local store,
        #: the loop the run's alone: :func:`zuke._engine.claims.on_loop`)
        self.at_ends_here = False
        self._lazy_after = lazy_after(store)
        self._sends = self._lazy_after and sends_appends(store)
        self.sends = self._sends  # Observers awaits acknowledged() (sent_writes)
        self._sent = None
        if run_state is not None:
            run_state.on_meta_change = self._meta_changed_from_any_thread

    # -- building deltas ------------------------------------------------------

    def _row(self, name: str) -> TargetRecord:
        return self._rows.get(name) or TargetRecord()

    def view(self) -> RunRecord:
        """The record as this writer knows it now: the last one written, with the rows it has
        not written yet (what a reporter is shown)."""
        return replace(self.record, targets={**self.record.targets, **self._rows})

    def row(self, name: str) -> TargetRecord:
        """The target's row as this writer last knows it (the adopted record's on resume)."""
        return self._row(name)

    def set_effect(self, target: str, effect: str, record: EffectRecord) -> None:
        """Queue a change to one effect of ``target`` (written with the next flush)."""
        row = self._row(target)
        self._set_row(target, replace(row, effects={**row.effects, effect: record}))

    async def persist(self) -> str | None:
        """Write everything queued now; what could not be recorded, or ``None`` once it landed
        under this run's lease (a run taken over or settled elsewhere never counts as landed)."""
        problem = await self._flush(persist=False)
        if problem is None and not self.owns_run():
            return self._not_ours()
        return problem

    async def persist_intent(self) -> None:
        """The durability point before an external call: return only once everything queued
        (the call's intent) landed under the run's lease, which this process still holds.

        Raises :class:`RunTakenOverError` when the run is someone else's now (the call must
        not be made: the new owner makes it), :class:`StateError` when the store failed.
        """
        if not self.owns_run():
            raise RunTakenOverError(self._not_ours())
        problem = await self._flush(persist=False, complete=True)
        if not self.owns_run():  # the write found another holder, or the lease was lost
            raise RunTakenOverError(self._not_ours())
        if problem is not None:
            raise StateError(problem)

    def owns_run(self) -> bool:
        """Whether this process may still write the run (and act on what it wrote)."""
        return not self._disowned and self.holds_lease()

    def _not_ours(self) -> str:
        settled = self.settled_elsewhere
        if settled is not None and settled not in OURS:
            why = f"another process settled it {settled}"
        else:
            why = "it was taken over by another process (its lease is no longer this one's)"
        return f"{self.where}: {why}; nothing more is recorded here, and no call is made"

    def _meta_changed_from_any_thread(self, target: str) -> None:
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:  # an async body or a trigger: the next flush must see it (ctx.persist())
            self._meta_changed(target)
        else:
            self._loop.call_soon_threadsafe(self._meta_changed, target)

    def _meta_changed(self, target: str) -> None:
        self._dirty_meta.add(target)
        self._schedule_flush()

    def _take_meta(self) -> None:
        if self.run_state is None or not self._dirty_meta:
            return
        for name in sorted(self._dirty_meta):
            row = self._row(name)
            url = self.run_state.environment_url(name) or row.environment_url
            self._set_row(name, replace(row, meta=self.run_state.meta(name), environment_url=url))
        self._dirty_meta.clear()

    # -- observer -------------------------------------------------------------

    async def transition(self, t: Transition) -> None:
        if self._changed(t):
            await self.flush()

    async def begin(self, t: Transition) -> None:
        """:meth:`transition`, but the write a ``running`` transition needs may still be out
        when this returns (sent, where the store can: :meth:`_send`): the caller awaits
        :meth:`acknowledged` before the transition counts as recorded."""
        if not self._sends:  # every write the ordinary way: transition's
            await self.transition(t)
        elif self._changed(t) and not await self._send():
            await self.flush()

    def _changed(self, t: Transition) -> bool:
        """Take ``t`` into the target's row; whether it must be written now (a ``running``
        one, its body waiting) — otherwise it goes with the next write, or the debounce's."""
        row = self._row(t.target)
        when = iso(t.at_ms)
        # One replace per transition (the metadata with it): a run makes thousands.
        meta = row.meta if self.run_state is None else self.run_state.meta(t.target)
        if self.run_state is not None:
            url = self.run_state.environment_url(t.target)
            if url is not None and url != row.environment_url:
                row = replace(row, environment_url=url)
        if t.status == "running":
            row = replace(
                row, status="running", started_at=when, ended_at=None, error=None,
                interrupted=False, meta=meta,
                environment=t.environment or row.environment,
                environment_url=t.environment_url or row.environment_url,
            )  # fmt: skip
        else:
            row = replace(
                row,
                status=t.status,
                ended_at=when if t.status != "waiting" else row.ended_at,
                error=self.redactor.text(t.error) if t.error else None,
                # a gate skipped while it waited (its run cancelled) keeps it, for on_cancel
                waiting_for=t.waiting_for if t.status in ("waiting", "skipped") else None,
                interrupted=t.interrupted,
                meta=meta,
            )
        if self.run_state is not None:
            self._dirty_meta.discard(t.target)
        self._set_row(t.target, row)
        if t.status == "running" and not self.checkpointed:
            return True
        self._schedule_flush()
        return False

    def failed(self, exc: BaseException) -> None:
        """A hook of this writer raised (a bug): the change it carried is lost, not the writer."""
        reason = self._reason(exc)
        self._lost = True
        self._loss = f"a change could not be recorded ({reason})"
        self._broken = self._loss
        self.warn(f"state: {self.where}: {self._loss}; the record is marked degraded")

    def append_event(self, tool: str, *, outcome: str = "ok", detail: str | None = None,
                     args: dict[str, str] | None = None) -> None:  # fmt: skip
        """Queue an audit-trail entry (redacted)."""
        event = RunEvent(
            at=self._now(),
            tool=tool,
            actor=self.actor,
            outcome=outcome,  # type: ignore[arg-type]
            args={k: self.redactor.text(v) for k, v in (args or {}).items()},
            detail=self.redactor.text(detail) if detail else None,
        )
        self._queue(RunDelta(updated_at=event.at, events=(event,)))

    def note_lock(self, key: str, token: str | None) -> None:
        """Record that the run holds (``token``) or gave back (``None``) the claim on ``key``."""
        self._queue(RunDelta(updated_at=self._now(), locks={key: token}))

    def note_held(self, key: str, held: HeldLock | None) -> None:
        """Record that the run keeps the lock on ``key`` past its target (``held_until``)."""
        self._queue(RunDelta(updated_at=self._now(), held={key: held}))

    async def create(self) -> None:
        """Write the initial record; a run id that already exists is an error."""
        try:
            if self.at_ends_here:
                outcome = self.store.create_run(self.record)
            else:
                outcome = await asyncio.to_thread(self.store.create_run, self.record)
        except ZukeError:
            raise
        except Exception as exc:  # a third-party store's own error: say where, in the tree
            raise StateError(f"could not create {self.where}: {self._reason(exc)}") from exc
        if isinstance(outcome, Conflict):
            raise StateError(f"run id {self.run_id} already exists in the store; the id was reused")
        self.version = outcome.version
        self.writes += 1

    async def finish(self, status: RunStatus) -> None:
        """Record the run's end (or suspension) and wait until it is written.

        If it cannot be written, :attr:`record_error` says so (after trying to
        mark the record degraded); nothing is raised.
        """
        if self._debounce is not None:
            self._debounce.cancel()
            self._debounce = None
        now = self._now()
        if self._loss is not None:
            # A change was lost on the way: the end re-sends every row, so that the
            # record at least ends complete (it stays marked degraded).
            self._queue(RunDelta(updated_at=now, targets=dict(self._rows)))
        # A record missing a change nobody can name cannot prove success either.
        ending = honest_status(status) if self._broken is not None else status
        self._queue(RunDelta(updated_at=now, status=ending))
        if self.at_ends_here:  # the run's targets are done: nothing else needs the loop
            self.inline = _always
        failure = await self._flush(persist=True)
        self._ended = True
        if failure is not None:
            self.record_error = await self._give_up(status, failure)
        elif self._broken is not None and not self._disowned:
            self.record_error = (
                f"could not record {self.where}: {self._broken}; the record is left "
                f"{self.record.status} and marked degraded — trust this run's summary, not "
                f"the record (zuke runs show {self.run_id})"
            )


def _always() -> bool:
    return True
