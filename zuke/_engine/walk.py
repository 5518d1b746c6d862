"""The compensation walk over a run's record: one walk, whoever cancels.

Every way a run is cancelled ends here — the running process after its
bodies stopped (Ctrl-C, SIGTERM, ``zuke cancel`` of a live owner), a
canceller that took a dead owner's lease, the sweep finishing a walk a
crash interrupted, a timed-out gate, a reaped run past its deadline. The
caller holds the run's lease (a :class:`~zuke._engine.claims.Claim`, so it
is renewed however long the walk takes); the walk then:

1. takes the cancel lock ``zuke-cancel-<run id>`` (30 s TTL, heartbeat):
   exactly one process walks a run. A cancel lock held by another process
   is broken and taken over: every walker holds the run's lease, which is
   now the caller's, so its holder lost the run (a walker killed mid-walk);
2. moves the record to ``cancelling`` with ``intendedTerminal`` (a record
   already ``cancelling`` keeps its own), ending rows still running
   (``failed``, ``interrupted``);
3. runs each compensation not yet recorded done, appending one
   ``compensate`` event per compensation *after* it ran — so a crash in the
   middle resumes with the next one and never repeats one recorded done;
4. settles the record ``intendedTerminal``, skips the rows never reached and
   clears its claims.

Every write is a compare-and-swap that checks the record still lists this
process's lease token: a walk whose lease was taken over stops before its
next step and writes nothing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from zuke._clock import Clock, iso
from zuke._engine.claims import Claim, acquire
from zuke._engine.compensation import (
    COMPENSATE_EVENT,
    DEGRADED_NOTE,
    Step,
    done_steps,
    run_step,
    walk_state,
    walk_steps,
)
from zuke._engine.plan import Plan
from zuke._redact import Redactor
from zuke.state._protocol import LockAcquired, LockHolder, StateStore, lease_key
from zuke.state.records import (
    TERMINAL_STATUSES,
    RunDelta,
    RunEvent,
    RunRecord,
    RunStatus,
    TargetRecord,
)
from zuke.state.update import GaveUp, Unchanged, update_run

CANCEL_LOCK_TTL_MS = 30_000


def cancel_lock_key(run_id: str) -> str:
    return f"zuke-cancel-{run_id}"


@dataclass
class WalkResult:
    """What a walk did. ``status`` is the record's status afterwards."""

    status: RunStatus
    #: "deploy → rollback" per compensation this walk ran
    compensated: list[str] = field(default_factory=list)
    #: (target, compensation, error) per compensation that failed
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the claims the record listed when it was settled (key -> token), lease excluded
    claims: dict[str, str] = field(default_factory=dict)
    #: why the walk stopped before settling the run (None: it settled it, or found it settled)
    stopped: str | None = None


def ended_rows(record: RunRecord, reason: str, now: str) -> dict[str, TargetRecord]:
    """Rows of a stopped run: running ones failed (and ``interrupted``)."""
    return {
        name: replace(row, status="failed", error=reason, ended_at=now, interrupted=True)
        for name, row in record.targets.items()
        if row.status == "running"
    }


def unreached_rows(record: RunRecord, now: str) -> dict[str, TargetRecord]:
    """Rows a cancelled run never reached, skipped — only when the run is settled, so that
    a walk resumed after a crash still sees them pending (a degraded record's walk
    compensates those)."""
    return {
        name: replace(row, status="skipped", ended_at=now, waiting_for=None)
        for name, row in record.targets.items()
        if row.status in ("pending", "waiting")
    }


class _Walk:
    def __init__(
        self, store: StateStore, run_id: str, lease: Claim, actor: str, clock: Clock,
        redactor: Redactor,
    ) -> None:  # fmt: skip
        self.redactor = redactor
        self.store = store
        self.run_id = run_id
        self.lease = lease
        self.actor = actor
        self.clock = clock

    def now(self) -> str:
        return iso(self.clock.now_ms())

    def ours(self, record: RunRecord) -> bool:
        return record.locks.get(lease_key(self.run_id)) == self.lease.token

    async def write(self, change: Callable[[RunRecord], RunDelta | None]) -> RunRecord | None:
        """One compare-and-swap; the record written, or None if it did not apply."""
        outcome = await asyncio.to_thread(update_run, self.store, self.run_id, change)
        if isinstance(outcome, (Unchanged, GaveUp)):
            return None
        return outcome.record

    def event(self, tool: str, detail: str, *, outcome: str = "ok", **args: str) -> RunEvent:
        return RunEvent(at=self.now(), tool=tool, actor=self.actor, detail=detail,
                        outcome=outcome, args=args)  # type: ignore[arg-type]  # fmt: skip


async def walk(
    store: StateStore,
    run_id: str,
    *,
    lease: Claim,
    plan: Plan | None,
    intended: RunStatus,
    actor: str,
    clock: Clock,
    redactor: Redactor,
    reason: str,
    first: tuple[RunEvent, ...] = (),
    notes: tuple[str, ...] = (),
    notify: Callable[[str], None] = lambda message: None,
) -> WalkResult:
    """Compensate and settle ``run_id`` (its lease is ``lease``); see the module docstring.

    ``plan`` is the run's plan (``None``: no compensations, ``notes`` say why);
    ``first`` are events written with the move to ``cancelling``.
    """
    w = _Walk(store, run_id, lease, actor, clock, redactor)
    key = cancel_lock_key(run_id)
    holder = LockHolder(actor=actor, run_id=run_id, since=w.now())
    taken = await acquire(store, key, holder, CANCEL_LOCK_TTL_MS)
    if not isinstance(taken, LockAcquired) and not lease.lost.is_set():
        # Every walker holds the run's lease, and the lease is ours: whoever holds the
        # cancel lock lost its lease — a walker killed mid-walk, whose cancel lock would
        # otherwise outlive it by up to its TTL. Take the walk over (the fence goes up).
        await asyncio.to_thread(store.break_lock, key)
        notify(
            f"Run {run_id}: taking over the walk of {taken.holder.actor}, whose lease on the "
            "run has lapsed"
        )
        taken = await acquire(store, key, holder, CANCEL_LOCK_TTL_MS)
    if not isinstance(taken, LockAcquired):
        found = store.get_run(run_id)
        status = found.record.status if found else "cancelling"
        return WalkResult(status, stopped=f"being cancelled by {taken.holder.actor}")
    claim = Claim(store, key, taken.token, taken.fence, CANCEL_LOCK_TTL_MS,
                  on_lost=lambda c: None, warn=notify).start()  # fmt: skip
    try:
        return await _walk_held(w, claim, plan, intended, reason, first, list(notes), notify)
    finally:
        await claim.release()


async def _walk_held(
    w: _Walk,
    claim: Claim,
    plan: Plan | None,
    intended: RunStatus,
    reason: str,
    first: tuple[RunEvent, ...],
    notes: list[str],
    notify: Callable[[str], None],
) -> WalkResult:
    lease = lease_key(w.run_id)
    final: dict[str, RunStatus] = {}
    before: dict[str, RunRecord] = {}

    def to_cancelling(fresh: RunRecord) -> RunDelta | None:
        if fresh.status in TERMINAL_STATUSES:
            return None
        keep = fresh.status == "cancelling" and fresh.intended_terminal is not None
        final["s"] = fresh.intended_terminal if keep and fresh.intended_terminal else intended
        before["r"] = fresh  # who is compensated is decided on the rows as they were
        now = w.now()
        return RunDelta(
            updated_at=now,
            status="cancelling",
            intended_terminal=final["s"],
            targets=ended_rows(fresh, reason, now),
            events=first,
            locks={lease: w.lease.token},  # the caller holds the lease: the record says so
        )

    if w.lease.lost.is_set():
        return WalkResult("cancelling", stopped="the run's lease was taken over")
    record = await w.write(to_cancelling)
    if record is None:
        found = w.store.get_run(w.run_id)
        return WalkResult(found.record.status if found else "cancelled", notes=notes)
    result = WalkResult("cancelling", notes=notes)
    if record.degraded:
        result.notes.append(DEGRADED_NOTE)
        notify(f"Run {w.run_id}: {DEGRADED_NOTE}")
    rows = replace(record, targets=before["r"].targets) if "r" in before else record
    steps: list[Step] = []
    if plan is not None:
        steps, more = await walk_steps(rows, plan)
        result.notes.extend(more)
        for note in more:
            notify(f"Run {w.run_id}: {note}")
    done = done_steps(record)
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="zuke-compensate")
    state = walk_state(record, actor=w.actor, redactor=w.redactor)
    try:
        for step in steps:
            if step.target in done:
                continue  # recorded done by an earlier walk: never again
            if w.lease.lost.is_set() or claim.lost.is_set():
                result.stopped = "the run was taken over by another process mid-rollback"
                return result
            assert plan is not None
            outcome = await run_step(step, plan.compensations, state, pool, notify)
            label = f"{step.target} → {step.compensation}"
            detail = label if outcome.ok else f"{label}: {outcome.error}"
            event = w.event(COMPENSATE_EVENT, detail, outcome="ok" if outcome.ok else "error",
                            target=step.target, compensation=step.compensation)  # fmt: skip

            def record_step(fresh: RunRecord, event: RunEvent = event) -> RunDelta | None:
                if fresh.status != "cancelling" or not w.ours(fresh):
                    return None
                return RunDelta(updated_at=event.at, events=(event,))

            if await w.write(record_step) is None:
                result.stopped = "the run was taken over by another process mid-rollback"
                return result
            result.compensated.append(label)
            if not outcome.ok:
                result.failures.append((step.target, step.compensation, outcome.error or ""))
                notify(f"compensation {label} failed: {outcome.error}; the walk goes on")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return await _settle(w, result, final.get("s", intended))


async def _settle(w: _Walk, result: WalkResult, status: RunStatus) -> WalkResult:
    count = len(result.compensated)
    summary = "no compensations" if not count else f"ran {count} compensation(s)"
    if result.failures:
        summary += f", {len(result.failures)} failed"
    event = w.event("cancel", f"{summary}; the run is {status}",
                    outcome="error" if result.failures else "ok")  # fmt: skip

    def settle(fresh: RunRecord) -> RunDelta | None:
        if fresh.status != "cancelling" or not w.ours(fresh):
            return None
        result.claims = {k: v for k, v in fresh.locks.items() if k != lease_key(w.run_id)}
        return RunDelta(
            updated_at=event.at,
            status=status,
            events=(event,),
            locks=dict.fromkeys(fresh.locks),
            targets=unreached_rows(fresh, event.at),
        )

    record = await w.write(settle)
    if record is None:
        result.stopped = "the run was taken over by another process mid-rollback"
        result.claims = {}
        return result
    result.status = record.status
    return result
