"""The run's state writer: turns transitions into durable record writes.

One writer per run, on the event loop. Writes are serialised (one in flight)
and coalesced: whatever changed while a write was in flight goes out in the
next one, as a single :class:`~zuke.state.records.RunDelta`. On a journaling
store that is one small append per write, so the bytes persisted grow
linearly with the run (see ``docs/state.md``).

Durability rules, and how they hold:

* a record saying a target is ``running`` exists before its body runs —
  the ``running`` transition awaits its write;
* a target's ``succeeded`` is durable before any dependent starts — a
  dependent's ``running`` write carries every earlier settlement with it, and
  a short debounce persists settlements that no write follows;
* ``ctx.state.set`` is persisted with the next write, at the latest with the
  target's own settlement.

A conflicting write is re-applied to the fresh record (up to five times). A
mutation lost for good marks the record ``degraded``, which the next write
that lands carries. A store that is briefly unavailable is reported and the
change kept for the next write; it never crashes the build.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._engine.context import RunState
from zuke._engine.observer import Observer, Transition
from zuke._errors import StateError
from zuke._redact import Redactor
from zuke.state._protocol import Conflict, JournalingStateStore, StateStore, Written
from zuke.state.records import (
    RunDelta,
    RunEvent,
    RunRecord,
    RunStatus,
    TargetRecord,
    apply_delta,
    merge_deltas,
)

MAX_ATTEMPTS = 5
SETTLE_DEBOUNCE_S = 0.05


class RunStateWriter(Observer):
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
    ) -> None:
        self.store = store
        self.record = record
        self.version = version
        self.clock = clock
        self.redactor = redactor or Redactor()
        self.warn = warn
        self.run_state = run_state
        self.writes = 0
        self._rows: dict[str, TargetRecord] = dict(record.targets)
        self._pending: RunDelta | None = None
        self._dirty_meta: set[str] = set()
        self._lost = False
        #: set when a re-read shows another process ended the run (``zuke cancel``)
        self.settled_elsewhere: RunStatus | None = None
        #: called on the loop with the status another process gave the run
        self.on_settled_elsewhere: Callable[[RunStatus], None] = lambda status: None
        self._disowned = False
        self._write_lock = asyncio.Lock()
        self._debounce: asyncio.TimerHandle | None = None
        self._background: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        if run_state is not None:
            run_state.on_meta_change = self._meta_changed_from_any_thread

    @property
    def run_id(self) -> str:
        return self.record.id

    # -- building deltas ------------------------------------------------------

    def _now(self) -> str:
        return iso(self.clock.now_ms())

    def _queue(self, delta: RunDelta) -> None:
        self._pending = delta if self._pending is None else merge_deltas(self._pending, delta)

    def _row(self, name: str) -> TargetRecord:
        return self._rows.get(name) or TargetRecord()

    def _set_row(self, name: str, row: TargetRecord) -> None:
        self._rows[name] = row
        self._queue(RunDelta(updated_at=self._now(), targets={name: row}))

    def _meta_changed_from_any_thread(self, target: str) -> None:
        self._loop.call_soon_threadsafe(self._meta_changed, target)

    def _meta_changed(self, target: str) -> None:
        self._dirty_meta.add(target)
        self._schedule_flush()

    def _take_meta(self) -> None:
        if self.run_state is None or not self._dirty_meta:
            return
        for name in sorted(self._dirty_meta):
            self._set_row(name, replace(self._row(name), meta=self.run_state.meta(name)))
        self._dirty_meta.clear()

    # -- observer -------------------------------------------------------------

    async def transition(self, t: Transition) -> None:
        row = self._row(t.target)
        when = iso(t.at_ms)
        if t.status == "running":
            row = replace(row, status="running", started_at=when, ended_at=None, error=None)
        else:
            row = replace(
                row,
                status=t.status,
                ended_at=when if t.status != "waiting" else row.ended_at,
                error=self.redactor.text(t.error) if t.error else None,
                waiting_for=None if t.status != "waiting" else row.waiting_for,
            )
        if self.run_state is not None:
            row = replace(row, meta=self.run_state.meta(t.target))
            self._dirty_meta.discard(t.target)
        self._set_row(t.target, row)
        if t.status == "running":
            await self.flush()
        else:
            self._schedule_flush()

    def append_event(self, tool: str, *, outcome: str = "ok", detail: str | None = None,
                     args: dict[str, str] | None = None) -> None:  # fmt: skip
        """Queue an audit-trail entry (redacted)."""
        event = RunEvent(
            at=self._now(),
            tool=tool,
            actor=self.record.actor,
            outcome=outcome,  # type: ignore[arg-type]
            args={k: self.redactor.text(v) for k, v in (args or {}).items()},
            detail=self.redactor.text(detail) if detail else None,
        )
        self._queue(RunDelta(updated_at=event.at, events=(event,)))

    def note_lock(self, key: str, token: str | None) -> None:
        """Record that the run holds (``token``) or gave back (``None``) the claim on ``key``."""
        self._queue(RunDelta(updated_at=self._now(), locks={key: token}))

    def disown(self) -> None:
        """Write nothing more: the run belongs to someone else now (its lease was lost)."""
        self._disowned = True
        self._pending = None
        if self._debounce is not None:
            self._debounce.cancel()
            self._debounce = None

    async def create(self) -> None:
        """Write the initial record; a run id that already exists is an error."""
        outcome = await asyncio.to_thread(self.store.create_run, self.record)
        if isinstance(outcome, Conflict):
            raise StateError(f"run id {self.run_id} already exists in the store; the id was reused")
        self.version = outcome.version
        self.writes += 1

    async def finish(self, status: RunStatus) -> None:
        """Record the run's end (or suspension) and wait until it is written."""
        if self._debounce is not None:
            self._debounce.cancel()
            self._debounce = None
        self._queue(RunDelta(updated_at=self._now(), status=status))
        await self.flush()

    # -- writing ----------------------------------------------------------------

    def _schedule_flush(self) -> None:
        if self._debounce is None:
            self._debounce = self._loop.call_later(SETTLE_DEBOUNCE_S, self._debounced_flush)

    def _debounced_flush(self) -> None:
        self._debounce = None
        self._background = asyncio.ensure_future(self.flush())

    async def flush(self) -> None:
        """Write everything queued so far; return once it landed (or was reported lost)."""
        async with self._write_lock:
            if self._disowned:
                return
            self._take_meta()
            delta = self._pending
            if delta is None:
                return
            self._pending = None
            if self._lost:
                delta = merge_deltas(delta, RunDelta(updated_at=delta.updated_at, degraded=True))
            try:
                landed = await asyncio.to_thread(self._write_with_retries, delta)
            except StateError as exc:
                # Keep the change for the next write; the build goes on.
                self._pending = (
                    delta if self._pending is None else merge_deltas(delta, self._pending)
                )
                self.warn(f"state: could not record run {self.run_id}: {exc}")
                return
            if self.settled_elsewhere is not None:
                self.disown()
                self.on_settled_elsewhere(self.settled_elsewhere)
            elif landed:
                self._lost = False
            else:
                self._lost = True
                self.warn(
                    f"state: a change to run {self.run_id} was lost after {MAX_ATTEMPTS} "
                    "conflicting writes; the record is marked degraded"
                )

    def _write_with_retries(self, delta: RunDelta) -> bool:
        """Runs on a worker thread. True if ``delta`` landed, False if lost to conflicts."""
        for _ in range(MAX_ATTEMPTS):
            outcome = self._write_once(delta)
            if isinstance(outcome, Written):
                self.record = apply_delta(self.record, delta)
                self.version = outcome.version
                self.writes += 1
                return True
            fresh = self.store.get_run(self.run_id)
            if fresh is None:
                raise StateError(f"run {self.run_id} is no longer in the store")
            self.record, self.version = fresh.record, fresh.version
            if fresh.record.status not in ("running", "suspended"):
                # Another process ended the run (zuke cancel): never write over that.
                self.settled_elsewhere = fresh.record.status
                return False
        return False

    def _write_once(self, delta: RunDelta) -> Written | Conflict:
        assert self.version is not None, "create() the record before writing to it"
        if isinstance(self.store, JournalingStateStore):
            return self.store.append_run(self.run_id, delta, expected_version=self.version)
        return self.store.put_run(apply_delta(self.record, delta), expected_version=self.version)
