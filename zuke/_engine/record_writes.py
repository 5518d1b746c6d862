"""The writing half of the run's state writer (:mod:`zuke._engine.writer`, which builds
the deltas): one write in flight, whatever queued meanwhile coalesced into the next, a
write the store failed retried with backoff while the lease is the run's, a change lost
to conflicts marking the record degraded, and a run's end that cannot land said in one
line (``record_error``) instead of raised."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence

from zuke._clock import Clock, iso
from zuke._engine.store_traits import CHECKPOINT_DEBOUNCE_S, describe_store
from zuke._errors import StateError, ZukeError
from zuke._redact import Redactor
from zuke.state._protocol import Conflict, StateStore, StoredRun, Written
from zuke.state._unsure import UnsureWriteError
from zuke.state.records import (
    RunDelta,
    RunEvent,
    RunRecord,
    RunStatus,
    TargetRecord,
    apply_delta,
    apply_deltas,
    merge_deltas,
)
from zuke.state.update import MAX_ATTEMPTS, GaveUp, Unchanged, UpdateResult, update_run

SETTLE_DEBOUNCE_S = 0.05
#: Pauses between attempts of a write the store failed (about 4 s in all).
BACKOFF_S: tuple[float, ...] = (0.1, 0.2, 0.5, 1.0, 2.0)
#: Statuses in which the run is still this process's to write. ``cancelling`` is:
#: another process asked it to stop, and it records the outcome itself.
OURS: frozenset[RunStatus] = frozenset({"running", "suspended", "cancelling"})


class RunTakenOverError(StateError):
    """The run is no longer this process's: nothing was recorded, and the external call that
    was to follow its intent was not made (the run's new owner makes it)."""


class Appended:
    """A write's first attempt landed as an append against the record this writer holds
    (:meth:`RecordWrites._append_first`); the record it makes is applied when asked for."""


APPENDED = Appended()
#: what one write came to: ``update_run``'s outcome, or its first attempt's append
WriteResult = UpdateResult | Appended


def honest_status(status: RunStatus) -> RunStatus:
    """The status to record when the rows may be incomplete: never ``succeeded``."""
    return "failed" if status == "succeeded" else status


class RecordWrites:
    """Delivering one run's queued changes to its store; :class:`~zuke._engine.writer.
    RunStateWriter` sets these attributes up and queues the changes."""

    store: StateStore
    version: str | None
    clock: Clock
    redactor: Redactor
    warn: Callable[[str], None]
    actor: str
    backoff_s: tuple[float, ...]
    sleep: Callable[[float], Awaitable[None]]
    writes: int
    holds_lease: Callable[[], bool]
    #: the lease is within its own stop point (an answer past it proves nothing)
    lease_fresh: Callable[[], bool]
    settled_elsewhere: RunStatus | None
    on_settled_elsewhere: Callable[[RunStatus], None]
    lease: tuple[str, str] | None
    on_cancel_requested: Callable[[RunRecord], object]
    checkpointed: bool
    inline: Callable[[], bool]
    _pending: RunDelta | None
    #: the targets whose row changed since the last write, in order (their rows are in
    #: ``_rows``), and when the last of them changed: made into one delta when the write
    #: goes out, or before anything else is queued (two transitions a target: a delta
    #: made and merged for each was a fifth of the writer's time)
    _dirty: dict[str, None]
    _dirty_at: str
    _lost: bool
    _loss: str | None
    _failing: str | None
    _disowned: bool
    _ended: bool
    _write_lock: asyncio.Lock
    _debounce: asyncio.TimerHandle | None
    _background: asyncio.Future[None] | None
    _loop: asyncio.AbstractEventLoop
    _local: bool
    _rows: dict[str, TargetRecord]
    #: the record as last read or written whole, and the deltas appended since that are not
    #: applied to it yet (:attr:`record` applies them when asked: applying each as it was
    #: written copied every target's row once a write — quadratic in the run's length)
    _base: RunRecord
    _unapplied: list[RunDelta]
    _fold_lock: threading.Lock
    #: the record's status and claims as of the last write (what a write's first attempt
    #: checks, as ``update_run``'s ``change`` would on the record itself)
    _head_status: RunStatus
    _head_locks: dict[str, str]
    #: the store takes a function for ``append_run_known``'s ``after`` (:meth:`_append_first`)
    _lazy_after: bool

    @property
    def record(self) -> RunRecord:
        """The record as this writer last wrote it (or read it)."""
        with self._fold_lock:  # a reader on another thread folds while a write may append
            if self._unapplied:
                self._base = apply_deltas(self._base, self._unapplied)
                self._unapplied = []
            return self._base

    @record.setter
    def record(self, value: RunRecord) -> None:
        with self._fold_lock:
            self._base, self._unapplied = value, []
            self._head_status, self._head_locks = value.status, dict(value.locks)

    @property
    def run_id(self) -> str:
        return self._base.id  # never changes: no need to apply what is pending

    @property
    def where(self) -> str:
        return f"run {self.run_id} in {describe_store(self.store)}"

    def _now(self) -> str:
        return iso(self.clock.now_ms())

    def _queue(self, delta: RunDelta) -> None:
        if self._dirty:
            self._take_rows()  # the rows changed before ``delta``: in order, as they happened
        self._pending = delta if self._pending is None else merge_deltas(self._pending, delta)

    def _set_row(self, name: str, row: TargetRecord) -> None:
        """Queue ``row`` as ``name``'s (written with the next flush)."""
        self._rows[name] = row
        self._dirty[name] = None
        self._dirty_at = self._now()

    def _take_rows(self) -> None:
        """The rows changed since the last write, as one delta after what is queued."""
        rows = {name: self._rows[name] for name in self._dirty}
        self._dirty = {}
        delta = RunDelta(updated_at=self._dirty_at, targets=rows)
        self._pending = delta if self._pending is None else merge_deltas(self._pending, delta)

    def _take_meta(self) -> None:
        """Queue what changed in the targets' metadata (the writer's; here: nothing)."""

    def disown(self) -> None:
        """Write nothing more: the run belongs to someone else now (its lease was lost)."""
        self._disowned = True
        self._pending, self._dirty = None, {}
        if self._debounce is not None:
            self._debounce.cancel()
            self._debounce = None

    # -- writing ----------------------------------------------------------------

    def _schedule_flush(self) -> None:
        if self._debounce is None and not self._ended:
            delay = CHECKPOINT_DEBOUNCE_S if self.checkpointed else SETTLE_DEBOUNCE_S
            self._debounce = self._loop.call_later(delay, self._debounced_flush)

    def _debounced_flush(self) -> None:
        self._debounce = None
        self._background = asyncio.ensure_future(self.flush())

    async def flush(self) -> None:
        """Write everything queued so far; return once it landed (or was kept for later)."""
        await self._flush(persist=False)

    async def _flush(self, *, persist: bool, complete: bool = False) -> str | None:
        """One write of everything queued; the reason it did not land, or ``None``.

        The first failure of a streak is retried with backoff; later writes of
        the same streak try once (a dead store must not stall every
        transition), except the run's end (``persist``), which always retries.
        ``complete``: an earlier write lost to conflicts may have carried part of
        what the caller queued, so every row goes again (only once something was lost).
        """
        async with self._write_lock:
            if self._disowned or self._ended:
                return None
            self._take_meta()
            if complete and self._loss is not None:
                self._queue(RunDelta(updated_at=self._now(), targets=dict(self._rows)))
            delta = self._take_delta()
            if delta is None:
                return None
            delays = self.backoff_s if persist or self._failing is None else ()
            return await self._deliver(delta, delays)

    def _take_delta(self) -> RunDelta | None:
        """Everything queued, as the one delta the next write sends (``None``: nothing)."""
        if self._dirty:
            self._take_rows()
        delta = self._pending
        if delta is None:
            return None
        self._pending = None
        if self._lost:
            delta = merge_deltas(delta, RunDelta(updated_at=delta.updated_at, degraded=True))
        return delta

    async def _deliver(
        self,
        delta: RunDelta,
        delays: Sequence[float],
        first: Callable[[], WriteResult] | None = None,
    ) -> str | None:
        """Write ``delta`` (``first``: its first attempt, already sent) and settle what came of
        it; the reason it did not land, or ``None``. Called holding the write lock."""
        try:
            result = await self._write(delta, delays, first)
        except Exception as exc:
            # Keep the change for the next write; the build goes on.
            self._pending = delta if self._pending is None else merge_deltas(delta, self._pending)
            reason = self._reason(exc)
            if self._failing is None:
                self.warn(
                    f"state: could not record {self.where}: {reason}; "
                    "the change is kept and retried with the next write"
                )
            self._failing = reason
            return reason
        self._failing = None
        if not self.lease_fresh() and not isinstance(result, (Unchanged, GaveUp)):
            # The answer came past the lease's stop point (a process paused while its
            # write was out, answered now by the write's witness): it proves nothing
            # about the run now — another process may hold it — so nothing more is
            # done here on its strength.
            self.disown()
            self.on_settled_elsewhere("running")
            return None
        if isinstance(result, Unchanged):
            # Another process ended the run (zuke cancel): never write over that.
            self.settled_elsewhere = result.record.status
            self.disown()
            self.on_settled_elsewhere(result.record.status)
            return None
        if isinstance(result, GaveUp):
            self._lost = True
            self._loss = f"a change was lost after {MAX_ATTEMPTS} conflicting writes"
            self.warn(f"state: {self.where}: {self._loss}; the record is marked degraded")
            return self._loss
        self._lost = False
        return None

    async def _write(
        self,
        delta: RunDelta,
        delays: Sequence[float],
        first: Callable[[], WriteResult] | None = None,
    ) -> WriteResult:
        """``delta`` through ``update_run`` (off the loop), retried while the lease is ours;
        ``first``, if given, is the first attempt (a write already sent: its answer)."""
        for delay in delays:
            try:
                if first is not None:
                    attempt, first = first, None
                    return attempt()
                return await self._update_off_loop(delta)
            except Exception:
                if self._disowned or not self.holds_lease():
                    raise
            await self.sleep(delay)
        if first is not None:
            return first()
        return await self._update_off_loop(delta)

    async def _update_off_loop(self, delta: RunDelta) -> WriteResult:
        """:meth:`_update` on a worker thread — or right here, when nothing else needs the
        loop meanwhile and the store is local (one thread hop less per write)."""
        if self._local and self.inline():
            return self._update(delta)
        return await asyncio.to_thread(self._update, delta)

    def _update(self, delta: RunDelta) -> WriteResult:
        """One compare-and-swap loop for ``delta`` (on a worker thread, or inline)."""
        assert self.version is not None, "create() the record before writing to it"
        if self._lazy_after and self._head_ours():
            return self._append_first(delta, self.version)
        return self._update_run(delta, StoredRun(self.record, self.version), MAX_ATTEMPTS)

    def _head_ours(self) -> bool:
        """What ``change`` decides on the record this writer holds: whether the run is still
        this process's to write (``update_run``'s first attempt would write the delta)."""
        if self.lease is not None and self._head_locks.get(self.lease[0]) != self.lease[1]:
            return False
        return self._head_status in OURS

    def _append_first(self, delta: RunDelta, version: str) -> WriteResult:
        """``update_run``'s first attempt, against the record this writer holds, without
        applying the delta to it: the append is the same compare-and-swap on ``version``
        (the store checks it under the run's mutex); the record the delta makes is built
        only if the store compacts now, or once someone asks for :attr:`record`. A
        conflict (another process wrote the run) goes to ``update_run``'s re-reads.
        """
        store = self.store
        outcome = store.append_run_known(  # type: ignore[attr-defined]
            self.run_id, delta, expected_version=version,
            after=lambda: apply_delta(self.record, delta),
        )  # fmt: skip
        return self._appended(delta, outcome)

    def _appended(self, delta: RunDelta, outcome: Written | Conflict) -> WriteResult:
        """What the first attempt's append answered, taken in (a conflict goes to
        ``update_run``'s re-reads)."""
        if isinstance(outcome, Conflict):
            return self._update_run(delta, None, MAX_ATTEMPTS - 1)
        with self._fold_lock:
            self._unapplied.append(delta)
            self.version = outcome.version
            if delta.status is not None:
                self._head_status = delta.status
            for key, token in delta.locks.items():
                if token is None:
                    self._head_locks.pop(key, None)
                else:
                    self._head_locks[key] = token
        self.writes += 1
        return APPENDED

    def _update_run(self, delta: RunDelta, known: StoredRun | None, attempts: int) -> WriteResult:
        """``delta`` through :func:`~zuke.state.update.update_run` (``known``: its first
        attempt is against the record this writer holds; ``None``: it re-reads first)."""

        def change(fresh: RunRecord) -> RunDelta | None:
            if self.lease is not None and fresh.locks.get(self.lease[0]) != self.lease[1]:
                return None  # the record names another holder: the run was taken over
            if fresh.status == "cancelling" and self.record.status != "cancelling":
                self._loop.call_soon_threadsafe(self.on_cancel_requested, fresh)
            return delta if fresh.status in OURS else None

        try:
            result = update_run(self.store, self.run_id, change, attempts=attempts, known=known)
        except UnsureWriteError as exc:
            if exc.based_on is not None:  # the retry sends the same write against it
                self.record, self.version = exc.based_on.record, exc.based_on.version
            raise
        self.record, self.version = result.record, result.version
        if not isinstance(result, (Unchanged, GaveUp)):
            self.writes += 1
        return result

    async def _give_up(self, status: RunStatus, reason: str) -> str | None:
        """The end did not land: mark the record degraded if any write can, and say so."""
        if self._disowned:
            return None  # the lease was lost or the run settled elsewhere: the stop says so
        if self._dirty:
            self._take_rows()
        locks = self._pending.locks if self._pending is not None else {}
        honest = honest_status(status)
        now = self._now()
        event = RunEvent(
            at=now,
            tool="record",
            actor=self.actor,
            outcome="error",
            detail=self.redactor.text(f"the run ended {status}, but it could not be recorded: "
                                      f"{reason}"),
        )  # fmt: skip
        fallback = RunDelta(updated_at=now, status=honest, degraded=True, events=(event,),
                            locks=locks)  # fmt: skip
        try:
            result = await self._write(fallback, ())
        except Exception:
            result = None  # nothing can land: say what the record was left as
        if isinstance(result, Unchanged):
            return None  # another process ended the run meanwhile: its status stands
        self._pending, self._dirty = None, {}
        left = self.record.status
        if result is not None and not isinstance(result, GaveUp):
            return (
                f"could not record {self.where}: {reason}; the record is left {left} and "
                "marked degraded — trust this run's summary, not the record "
                f"(zuke runs show {self.run_id})"
            )
        return (
            f"could not record {self.where}: {reason}; the record is left {left} and could "
            "not be marked degraded — fix the store, then check the run with "
            f"`zuke runs show {self.run_id}` before running these targets again"
        )

    def _reason(self, exc: BaseException) -> str:
        text = str(exc) if isinstance(exc, ZukeError) else f"{type(exc).__name__}: {exc}"
        return self.redactor.text(text.removeprefix("state: "))
