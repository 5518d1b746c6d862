"""The compensation walk over a run's record: one walk, whoever cancels.

Every way a run is cancelled ends here — the running process after its
bodies stopped (Ctrl-C, SIGTERM, ``zuke cancel`` of a live owner), a
canceller that took a dead owner's lease, the sweep finishing a walk a
crash interrupted, a timed-out gate, a reaped run past its deadline. The
caller holds the run's lease (a :class:`~zuke._engine.claims.Claim`, so it
is renewed however long the walk takes); the walk then:

1. proves it still owns the run: a renewal of the lease right now (the
   store must say yes; ``lease.lost`` alone cannot tell a walker paused past
   its TTL), and the record naming its lease token — a walker that took a
   dead holder's lease writes its token there, on a renewal under half a TTL
   old. A walker that cannot prove it writes nothing and runs nothing;
2. takes the cancel lock ``zuke-cancel-<run id>`` (30 s TTL, heartbeat):
   exactly one process walks a run. One held by another process is broken
   and taken over only after proving ownership again: every walker holds the
   run's lease, so its holder lost the run (a walker killed mid-walk);
3. moves the record to ``cancelling`` with ``intendedTerminal`` (a record
   already ``cancelling`` keeps its own), ending rows still running
   (``failed``, ``interrupted``);
3b. tells each gate still waiting (its trigger's ``on_cancel``), once, on a
   proven lease, recording what it said (:mod:`zuke._engine.gate_cancel`);
4. runs each compensation not yet recorded, **at most once**: it proves
   ownership again, records the intent (a ``compensating`` event), runs it,
   and records its end (a ``compensate`` event). One whose intent an
   earlier walk recorded without an end was interrupted (a crash,
   ``kill -9``) and may be partly done: it is recorded failed
   ("interrupted: …; not run again") and never re-run;
5. settles the record ``intendedTerminal``, skips the rows never reached and
   clears its claims.

Every write is a compare-and-swap that checks the record still lists this
process's lease token: a walk whose lease was taken over stops before its
next step and writes nothing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import field, replace
from typing import TYPE_CHECKING

from zuke._clock import Clock
from zuke._engine import gate_cancel
from zuke._engine.claims import Claim, acquire
from zuke._engine.compensation import (
    COMPENSATE_EVENT,
    COMPENSATE_INTENT_EVENT,
    DEGRADED_NOTE,
    INTERRUPTED,
    Step,
    done_steps,
    ended_rows,
    interrupted_steps,
    run_step,
    unreached_rows,
    walk_state,
    walk_steps,
)
from zuke._engine.context import RunState
from zuke._engine.gate_cancel import GateHooks
from zuke._engine.plan import Plan
from zuke._engine.walker import Walker
from zuke._redact import Redactor
from zuke.state._protocol import LockAcquired, LockHolder, StateStore, lease_key
from zuke.state.records import TERMINAL_STATUSES, RunDelta, RunEvent, RunRecord, RunStatus

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

CANCEL_LOCK_TTL_MS = 30_000
TAKEN_OVER = "the run was taken over by another process mid-rollback"
NOT_PROVEN = "it could not prove it still holds the run's lease (another process holds it now)"

#: id(walk) -> (run id, the compensation in flight or ""): what a second Ctrl-C reports
_WALKING: dict[int, tuple[str, str]] = {}


def cancel_lock_key(run_id: str) -> str:
    return f"zuke-cancel-{run_id}"


def rolling_back(run_id: str) -> str | None:
    """``None`` when no walk of ``run_id`` runs in this process; else the compensation in
    flight ("deploy → rollback"), or "" between two."""
    return next((label for rid, label in list(_WALKING.values()) if rid == run_id), None)


@dataclass
class WalkResult:
    """What a walk did. ``status`` is the record's status afterwards."""

    status: RunStatus
    #: "deploy → rollback" per compensation this walk ran
    compensated: list[str] = field(default_factory=list)
    #: (target, compensation, error) per compensation that failed (interrupted ones too)
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    #: "deploy → rollback" per compensation an earlier walk started and never finished
    interrupted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the claims the record listed when it was settled (key -> token), lease excluded
    claims: dict[str, str] = field(default_factory=dict)
    #: which of ``claims`` the run kept past their target (``held_until``): the run's, so
    #: whoever holds its lease gives them back, live or not
    held: frozenset[str] = frozenset()
    #: why the walk stopped before settling the run (None: it settled it, or found it settled)
    stopped: str | None = None
    #: "gate 'e2e': cancelled workflow run …" per waiting gate told of the cancel (its answer)
    gates: list[str] = field(default_factory=list)


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
    gates: GateHooks | None = None,
) -> WalkResult:
    """Compensate and settle ``run_id`` (its lease is ``lease``); see the module docstring.

    ``plan`` is the run's plan (``None``: no compensations, ``notes`` say why);
    ``first`` are events written with the move to ``cancelling``; ``gates`` asks each gate
    still waiting (its ``on_cancel``) before the compensations (``None``: no build to ask).
    """
    w = Walker(store, run_id, lease, actor, clock, redactor)
    _WALKING[id(w)] = (run_id, "")
    try:
        return await _walk(w, plan, intended, reason, first, list(notes), notify, gates)
    finally:
        _WALKING.pop(id(w), None)


async def _walk(
    w: Walker,
    plan: Plan | None,
    intended: RunStatus,
    reason: str,
    first: tuple[RunEvent, ...],
    notes: list[str],
    notify: Callable[[str], None],
    gates: GateHooks | None,
) -> WalkResult:
    if not await w.take_record():
        return WalkResult(w.status(), stopped=NOT_PROVEN)
    key = cancel_lock_key(w.run_id)
    holder = LockHolder(actor=w.actor, run_id=w.run_id, since=w.now())
    taken = await acquire(w.store, key, holder, CANCEL_LOCK_TTL_MS)
    if not isinstance(taken, LockAcquired):
        if not await w.proven_owner():
            return WalkResult(w.status(), stopped=NOT_PROVEN)
        # Every walker holds the run's lease, and the lease is ours (renewed just now, and
        # the record names our token): whoever holds the cancel lock lost the run — a walker
        # killed mid-walk, whose cancel lock would otherwise outlive it by up to its TTL.
        # Take the walk over (the fence goes up).
        await asyncio.to_thread(w.store.break_lock, key)
        notify(
            f"Run {w.run_id}: taking over the walk of {taken.holder.actor}, whose lease on "
            "the run has lapsed"
        )
        taken = await acquire(w.store, key, holder, CANCEL_LOCK_TTL_MS)
    if not isinstance(taken, LockAcquired):
        return WalkResult(w.status(), stopped=f"being cancelled by {taken.holder.actor}")
    claim = Claim(w.store, key, taken.token, taken.fence, CANCEL_LOCK_TTL_MS,
                  on_lost=lambda c: None, warn=notify).start()  # fmt: skip
    try:
        return await _walk_held(w, claim, plan, intended, reason, first, notes, notify, gates)
    finally:
        await claim.release()


async def _walk_held(
    w: Walker,
    claim: Claim,
    plan: Plan | None,
    intended: RunStatus,
    reason: str,
    first: tuple[RunEvent, ...],
    notes: list[str],
    notify: Callable[[str], None],
    gates: GateHooks | None,
) -> WalkResult:
    lease = lease_key(w.run_id)
    final: dict[str, RunStatus] = {}
    before: dict[str, RunRecord] = {}

    def to_cancelling(fresh: RunRecord) -> RunDelta | None:
        if fresh.status in TERMINAL_STATUSES or not w.ours(fresh):
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
        if found is not None and found.record.status not in TERMINAL_STATUSES:
            return WalkResult(found.record.status, notes=notes, stopped=TAKEN_OVER)
        return WalkResult(found.record.status if found else "cancelled", notes=notes)
    result = WalkResult("cancelling", notes=notes)
    if record.degraded:
        result.notes.append(DEGRADED_NOTE)
        notify(f"Run {w.run_id}: {DEGRADED_NOTE}")
    cut = await gate_cancel.tell(w, claim, record, gates, result, notify)
    if cut is not None:
        result.stopped = TAKEN_OVER if cut == "taken" else NOT_PROVEN
        return result
    rows = replace(record, targets=before["r"].targets) if "r" in before else record
    steps: list[Step] = []
    if plan is not None:
        steps, more = await walk_steps(rows, plan)
        result.notes.extend(more)
        for note in more:
            notify(f"Run {w.run_id}: {note}")
    done, interrupted = done_steps(record), interrupted_steps(record)
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="zuke-compensate")
    state = walk_state(record, actor=w.actor, redactor=w.redactor)
    try:
        for step in steps:
            if step.target in done:
                continue  # recorded done by an earlier walk: never again
            assert plan is not None
            stopped = await _step(w, claim, step, step.target in interrupted, plan, state, pool,
                                  result, notify)  # fmt: skip
            if stopped is not None:
                result.stopped = stopped
                return result
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return await _settle(w, result, final.get("s", intended))


async def _step(
    w: Walker,
    claim: Claim,
    step: Step,
    interrupted: bool,
    plan: Plan,
    state: RunState,
    pool: ThreadPoolExecutor,
    result: WalkResult,
    notify: Callable[[str], None],
) -> str | None:
    """One compensation, at most once: prove, record the intent, run, record the end.
    Why the walk stops, or ``None``."""
    label = f"{step.target} → {step.compensation}"
    args = {"target": step.target, "compensation": step.compensation}

    def append(event: RunEvent, *, proof: bool = False) -> Callable[[RunRecord], RunDelta | None]:
        def change(fresh: RunRecord) -> RunDelta | None:
            if fresh.status != "cancelling" or not w.ours(fresh) or (proof and not w.fresh()):
                return None
            return RunDelta(updated_at=event.at, events=(event,))

        return change

    if interrupted:  # an earlier walker started it and never recorded its end
        event = w.event(COMPENSATE_EVENT, f"{label}: {INTERRUPTED}", outcome="error", **args)
        if await w.write(append(event)) is None:
            return TAKEN_OVER
        result.interrupted.append(label)
        result.failures.append((step.target, step.compensation, INTERRUPTED))
        notify(f"compensation {label} was {INTERRUPTED}; the walk goes on")
        return None
    if w.lease.lost.is_set() or claim.lost.is_set():
        return TAKEN_OVER
    if not await w.prove():
        return NOT_PROVEN
    intent = w.event(COMPENSATE_INTENT_EVENT, f"{label}: started", **args)
    if await w.write(append(intent, proof=True)) is None:
        return TAKEN_OVER  # the record names another lease holder, or the proof went stale
    if w.lease.lost.is_set() or w.lapsed():
        return TAKEN_OVER  # paused while the intent landed: it stands (the next walk says so)
    _WALKING[id(w)] = (w.run_id, label)
    try:
        outcome = await run_step(step, plan.compensations, state, pool, notify)
    finally:
        _WALKING[id(w)] = (w.run_id, "")
    if w.lease.lost.is_set() or w.lapsed():
        # The lease lapsed while it ran (or kept it from starting): what it did is unknown
        # here, and nothing more may be written; its intent stands, without an end.
        return TAKEN_OVER
    detail = label if outcome.ok else f"{label}: {outcome.error}"
    event = w.event(COMPENSATE_EVENT, detail, outcome="ok" if outcome.ok else "error", **args)
    if await w.write(append(event)) is None:
        return TAKEN_OVER
    result.compensated.append(label)
    if not outcome.ok:
        result.failures.append((step.target, step.compensation, outcome.error or ""))
        notify(f"compensation {label} failed: {outcome.error}; the walk goes on")
    return None


async def _settle(w: Walker, result: WalkResult, status: RunStatus) -> WalkResult:
    count, cut = len(result.compensated), len(result.interrupted)
    summary = "no compensations" if not count else f"ran {count} compensation(s)"
    if len(result.failures) > cut:
        summary += f", {len(result.failures) - cut} failed"
    if cut:
        summary += f"; {cut} interrupted earlier, not run again"
    event = w.event("cancel", f"{summary}; the run is {status}",
                    outcome="error" if result.failures else "ok")  # fmt: skip

    def settle(fresh: RunRecord) -> RunDelta | None:
        if fresh.status != "cancelling" or not w.ours(fresh):
            return None
        result.claims = {k: v for k, v in fresh.locks.items() if k != lease_key(w.run_id)}
        result.held = frozenset(fresh.held)
        return RunDelta(
            updated_at=event.at,
            status=status,
            events=(event,),
            locks=dict.fromkeys(fresh.locks),
            held=dict.fromkeys(fresh.held),
            targets=unreached_rows(fresh, event.at),
        )

    record = await w.write(settle)
    if record is None:
        result.stopped = TAKEN_OVER
        result.claims = {}
        return result
    result.status = record.status
    return result
