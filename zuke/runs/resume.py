"""``zuke resume RUN_ID``: deliver a signal, then continue a suspended run exactly once.

Delivering and resuming are two steps (:mod:`zuke.runs.signals`):

1. the run exists and belongs to this build (name and origin); every setting
   the resume needs parses (a bad one refuses before anything moves);
2. **deliver**: a signal no gate of the run waits for is refused (exit 2);
   one that comes after its own gate's deadline is refused, and the timeout
   is settled instead; otherwise the signal is *appended* to the record —
   whatever the run's status and whoever holds it — or found already there
   (the same delivery twice: one answer, both successes);
3. **continue** under the run's lease (:class:`~zuke.runs.lifecycle.Hold`):
   the record is read again once the lease is ours; it must be
   ``suspended`` (a run someone else holds or runs takes the stored signal
   itself: ``delivered``, exit 0); the build must still have its graph
   (``--force-graph``) and the record must be whole (``--resume-degraded``);
   a gate past its deadline takes its timeout disposition — unless the
   signal it waits for arrived *before* the deadline; then a
   compare-and-swap on the record's version moves it ``suspended →
   running``, naming the resumer's lease and pushing ``deadlineAt`` forward
   by the time the run was parked (``parkedAt``, never ``updatedAt``).

Then the engine drives what has not succeeded (:mod:`zuke._engine.resumed`).
A run that suspends again while a signal one of its gates waits for is
stored (it arrived while the run ran) is continued again at once: a signal is
never left waiting for the next sweep when this process can consume it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from zuke._build import Build
from zuke._engine.plan import TargetSpec
from zuke._engine.resumed import plan_of
from zuke._engine.run import LoadedBuild, RunOptions
from zuke._errors import (
    AlreadyResumedError,
    RunNotFoundError,
    RunNotSuspendedError,
    SignalRefusedError,
    ZukeError,
)
from zuke._provenance import build_origin, resolve_actor
from zuke.runs.continuation import (
    ResumeOptions,
    check_resumable,
    check_suspended,
    continue_due,
    continue_run,
    due,
    pushed_deadline,
    resume_now,
)
from zuke.runs.deadlines import expired_gate, timeout_refusal
from zuke.runs.lifecycle import (
    check_ownership,
    check_settings,
    load_for,
    moved_by,
)
from zuke.runs.outcome import ResumeAction, ResumeOutcome
from zuke.runs.signals import (
    MAX_SIGNAL_BYTES,
    SignalDelivery,
    check_signal,
    refuse_unknown,
    store_signal,
    waited_signals,
)
from zuke.state._ids import check_id
from zuke.state._protocol import StateStore
from zuke.state.records import RunRecord


async def resume_run_async(
    build_cls: type[Build],
    store: StateStore,
    run_id: str,
    resume: ResumeOptions,
    run: RunOptions,
) -> ResumeOutcome:
    """Deliver ``resume.signal`` (if any), then continue ``run_id`` (see the module docstring)."""
    check_id(run_id)
    check_settings(run.env, store)
    if resume.signal is not None:
        check_signal(resume.signal)
    found = await asyncio.to_thread(store.get_run, run_id)
    if found is None:
        raise RunNotFoundError(f'resume: no run "{run_id}" in the store', run_id=run_id)
    record = found.record
    check_ownership(record, origin=build_origin(run.env), build_name=build_cls.__name__)
    actor = resolve_actor(resume.actor, run.env)
    signal = resume.signal
    if signal is None:
        check_suspended(record)
        return await continue_run(build_cls, store, run_id, resume, run, actor=actor)
    loaded = load_for(build_cls, record, run)
    stored = record.signals.get(signal.name)
    if stored is None or stored.id != signal.key(loaded.redactor):  # a repeat: same answer
        refuse_unknown(record, signal.name, await waited_signals(loaded, record))
        expired = expired_gate(record, run.clock.now_ms())
        if expired is not None and _gate_signal(record, expired) == signal.name:
            return await _too_late(build_cls, store, record, expired, signal, resume, run, actor)
        if record.status not in ("suspended", "running"):
            _refuse_ended(record, signal)
        if record.status == "suspended":  # refused before anything is stored, not after
            check_resumable(record, await plan_of(loaded, record), resume)
    action, after = await store_signal(store, record, signal, redactor=loaded.redactor,
                                       actor=actor, clock=run.clock, known=found)  # fmt: skip
    first = after.signals[signal.name]
    delivered = {
        "stored": f"signal {signal.name!r} delivered to run {run_id}",
        "already": f"signal {signal.name!r} (id {first.id}) was already delivered to run "
        f"{run_id} at {first.received_at}",
        "superseded": f"signal {signal.name!r} was already delivered to run {run_id} at "
        f"{first.received_at} by another delivery (id {first.id}), which stands; this "
        "delivery's data was not stored",
    }[action]
    notes = [*await _signal_notes(loaded, after, signal)]
    try:
        outcome = await _continue_if_free(build_cls, store, run_id, resume, run, actor=actor)
    except AlreadyResumedError as held:
        status: ResumeAction = "delivered" if action == "stored" else "already-delivered"
        why = f"{delivered}; {held}".replace("; resume: ", "; ")
        return ResumeOutcome(run_id, status, after.status, notes=[*notes, why])
    except RunNotSuspendedError:
        # Between the look (due) and the lease another process — a watcher, a sweep —
        # took the run to its end: the signal is stored (and consumed); nothing to do.
        outcome = None
    if outcome is None:  # nothing left to continue: the signal was consumed, or is not due
        fresh = await asyncio.to_thread(store.get_run, run_id)
        now_status = fresh.record.status if fresh is not None else after.status
        kind: ResumeAction = "delivered" if action == "stored" else "already-delivered"
        notes.append(f"{delivered}; nothing to do")
        return ResumeOutcome(run_id, kind, now_status, notes=notes)
    return replace(outcome, notes=[*notes, *outcome.notes])


def _gate_signal(record: RunRecord, gate: str) -> str | None:
    waiting = record.targets[gate].waiting_for
    trigger = waiting.trigger if waiting is not None else ""
    return trigger.removeprefix("signal:") if trigger.startswith("signal:") else None


def _refuse_ended(record: RunRecord, signal: SignalDelivery) -> None:
    refusal = timeout_refusal(record, None, signal.name)
    if refusal:
        raise SignalRefusedError(refusal, run_id=record.id)
    check_suspended(record)


async def _too_late(
    build_cls: type[Build],
    store: StateStore,
    record: RunRecord,
    gate: str,
    signal: SignalDelivery,
    resume: ResumeOptions,
    run: RunOptions,
    actor: str,
) -> ResumeOutcome:
    """The signal came after its gate's deadline: not stored; the timeout is settled."""
    refusal = timeout_refusal(record, gate, signal.name)
    assert refusal is not None
    try:
        outcome = await continue_run(build_cls, store, record.id, resume, run, actor=actor)
    except (AlreadyResumedError, RunNotSuspendedError):  # another settled it (a sweep) first
        raise SignalRefusedError(f"resume: run {record.id}: {refusal}", run_id=record.id) from None
    return replace(outcome, notes=[refusal, *outcome.notes])


async def _continue_if_free(
    build_cls: type[Build],
    store: StateStore,
    run_id: str,
    resume: ResumeOptions,
    run: RunOptions,
    *,
    actor: str,
) -> ResumeOutcome | None:
    """Continue the run if it is parked with a signal due and nobody holds it; ``None``
    when there is nothing to continue here.

    No waiting: every holder of a run re-reads it after letting go and continues it if
    a signal became due meanwhile (the owner that suspends it, a resumer whose run
    suspends again, a sweep that found it still waiting), so a signal stored while the
    run was held is consumed by that holder. Held now: :class:`AlreadyResumedError`.
    """
    found = await asyncio.to_thread(store.get_run, run_id)  # one read: running? due?
    if found is None or found.record.status == "running":
        if found is not None:
            by = moved_by(found.record)
            raise AlreadyResumedError(
                f"run {run_id} is running ({by}), which takes the stored "
                "signal at its gate (or, if its process is gone, the next sweep does)",
                run_id=run_id,
                by=by,
            )
        return None
    if not due(found.record):
        return None  # the signal is stored for a gate not reached (or already passed)
    return await continue_run(build_cls, store, run_id, resume, run, actor=actor)


async def _signal_notes(
    loaded: LoadedBuild, record: RunRecord, signal: SignalDelivery
) -> list[str]:
    """A note when no gate is waiting for the signal yet (it is kept for a later gate)."""
    waited = []
    for name, row in record.targets.items():
        spec = await _gate_spec(loaded, name) if row.status == "waiting" else None
        if row.status == "waiting" and spec is not None and spec.wait is not None:
            wanted = spec.wait.trigger.signal_name()
            if wanted == signal.name or wanted is None:
                return []  # a gate waits for it (or may read any signal)
            waited.append(f"{name} (signal {wanted!r})")
    if record.status != "suspended":
        return []
    listed = ", ".join(waited) or "no gate"
    return [
        f"run {record.id} is not waiting for the signal {signal.name!r} yet; it was stored for "
        f"the gate that will (waiting now: {listed})"
    ]


async def _gate_spec(loaded: LoadedBuild, name: str) -> TargetSpec | None:
    """A waiting row's spec (a gate inside a fan-out's item included), if the build has it."""
    try:
        return await loaded.index.get(name)
    except ZukeError:
        return None  # the fan-out cannot be materialised now: say nothing about its gates


def resume_run(
    build_cls: type[Build],
    run_id: str,
    *,
    signal: str | None = None,
    data: Any = None,
    signal_id: str | None = None,
    force_graph: bool = False,
    resume_degraded: bool = False,
    actor: str | None = None,
    params: Mapping[str, str | Sequence[str]] | None = None,
    env: Mapping[str, str] | None = None,
    store: StateStore | None = None,
) -> ResumeOutcome:
    """Deliver a signal and resume a run in this process (what ``zuke resume RUN_ID`` calls)."""
    import os

    from zuke.runs.store import open_store

    environ = dict(os.environ) if env is None else env
    supplied = {k: [v] if isinstance(v, str) else list(v) for k, v in (params or {}).items()}
    options = ResumeOptions(
        signal=None if signal is None else SignalDelivery(signal, data, signal_id),
        force_graph=force_graph,
        resume_degraded=resume_degraded,
        actor=actor,
        params=supplied,
    )
    chosen = store or open_store(environ, build=build_cls)
    return asyncio.run(
        resume_run_async(
            build_cls, chosen, run_id, options, RunOptions(env=environ, params=supplied)
        )
    )


__all__ = [
    "MAX_SIGNAL_BYTES",
    "ResumeOptions",
    "ResumeOutcome",
    "SignalDelivery",
    "check_resumable",
    "check_signal",
    "continue_due",
    "continue_run",
    "load_for",
    "pushed_deadline",
    "resume_now",
    "resume_run",
    "resume_run_async",
]
