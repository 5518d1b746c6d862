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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from zuke._build import Build, parameters
from zuke._clock import iso, parse_iso
from zuke._engine.plan import Plan, TargetSpec
from zuke._engine.resumed import execute_resumed, plan_of
from zuke._engine.run import LoadedBuild, RunOptions
from zuke._errors import (
    AlreadyResumedError,
    DegradedRecordError,
    GraphChangedError,
    RunNotFoundError,
    RunNotSuspendedError,
    SignalRefusedError,
    ZukeError,
)
from zuke._provenance import build_origin, resolve_actor
from zuke.runs.lifecycle import (
    Hold,
    ResumeAction,
    ResumeOutcome,
    check_ownership,
    check_settings,
    graph_drift,
    lease_key,
    load_for,
    take,
)
from zuke.runs.signals import (
    MAX_SIGNAL_BYTES,
    SignalDelivery,
    check_signal,
    due_signals,
    refuse_unknown,
    store_signal,
    waited_signals,
)
from zuke.runs.timeouts import expired_gate, settle_timeout, timeout_refusal, unfinished_rollback
from zuke.state._ids import check_id
from zuke.state._protocol import StateStore
from zuke.state.records import RunDelta, RunEvent, RunRecord
from zuke.state.update import GaveUp, Unchanged

#: At most this many continuations in a row for signals that arrived while the run ran.
MAX_CONTINUATIONS = 10


@dataclass(frozen=True)
class ResumeOptions:
    """How to resume (what the command line sets)."""

    signal: SignalDelivery | None = None
    force_graph: bool = False
    resume_degraded: bool = False
    actor: str | None = None
    #: parameter overrides (non-secret values may change; secrets come from the environment)
    params: Mapping[str, Sequence[str]] = field(default_factory=dict)


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
        _check_suspended(record)
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
    action, after = await store_signal(
        store, record, signal, redactor=loaded.redactor, actor=actor, clock=run.clock
    )
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


def _check_suspended(record: RunRecord) -> None:
    if record.status == "suspended":
        return
    if record.status in ("running", "cancelling"):
        raise AlreadyResumedError(
            f"resume: run {record.id} is {record.status} (resumed or started by {record.actor} "
            f"at {record.updated_at}); nothing to do",
            run_id=record.id,
            by=record.actor,
        )
    raise RunNotSuspendedError(
        f'resume: run {record.id} is "{record.status}", not suspended',
        run_id=record.id,
        status=record.status,
    )


def _refuse_ended(record: RunRecord, signal: SignalDelivery) -> None:
    refusal = timeout_refusal(record, None, signal.name)
    if refusal:
        raise SignalRefusedError(refusal, run_id=record.id)
    _check_suspended(record)


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
    except AlreadyResumedError:
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
    found = await asyncio.to_thread(store.get_run, run_id)
    if found is None or found.record.status == "running":
        if found is not None:
            raise AlreadyResumedError(
                f"run {run_id} is running ({found.record.actor}), which takes the stored "
                "signal at its gate (or, if its process is gone, the next sweep does)",
                run_id=run_id,
                by=found.record.actor,
            )
        return None
    if not await _due(store, run_id):
        return None  # the signal is stored for a gate not reached (or already passed)
    return await continue_run(build_cls, store, run_id, resume, run, actor=actor)


async def _due(store: StateStore, run_id: str) -> bool:
    """Whether the run is parked with a gate whose signal is stored."""
    found = await asyncio.to_thread(store.get_run, run_id)
    return (
        found is not None and found.record.status == "suspended" and bool(due_signals(found.record))
    )


async def continue_due(
    build_cls: type[Build], store: StateStore, run_id: str, run: RunOptions, *, actor: str
) -> ResumeOutcome | None:
    """Continue a run that just suspended while a signal one of its gates waits for is
    stored (it arrived while the run ran); ``None`` when nothing is due or another process
    already continues it. The process that suspended the run calls this right after."""
    if not await _due(store, run_id):
        return None
    try:
        return await continue_run(build_cls, store, run_id, ResumeOptions(), run, actor=actor)
    except AlreadyResumedError:
        return None


async def continue_run(
    build_cls: type[Build],
    store: StateStore,
    run_id: str,
    resume: ResumeOptions,
    run: RunOptions,
    *,
    actor: str,
) -> ResumeOutcome:
    """Take the run's lease, decide on the record read under it, and continue the run —
    again while a signal that arrived while it ran is due (at most MAX_CONTINUATIONS)."""
    outcome = await _continue_once(build_cls, store, run_id, resume, run, actor=actor)
    for _ in range(MAX_CONTINUATIONS):
        if outcome.action != "resumed" or outcome.status != "suspended":
            break
        if not await _due(store, run_id):
            break
        try:
            again = await _continue_once(build_cls, store, run_id, resume, run, actor=actor)
        except AlreadyResumedError:
            break  # someone else continues it
        outcome = replace(again, notes=[*outcome.notes, *again.notes])
    return outcome


async def _continue_once(
    build_cls: type[Build],
    store: StateStore,
    run_id: str,
    resume: ResumeOptions,
    run: RunOptions,
    *,
    actor: str,
) -> ResumeOutcome:
    held = (
        f"resume: run {run_id} is being resumed by {{actor}} (it holds the run's lease); "
        "nothing to do"
    )
    hold = await take(store, run_id, actor=actor, clock=run.clock, env=run.env, held=held,
                      warn=run.on_warning)  # fmt: skip
    try:
        _check_suspended(hold.record)
        loaded = load_for(build_cls, hold.record, run)
        plan = await plan_of(loaded, hold.record)
        check_resumable(hold.record, plan, resume)
        expired = expired_gate(hold.record, run.clock.now_ms())
        if expired is not None:
            return await settle_timeout(loaded, hold, expired, run, actor=actor, notes=[])
        return await resume_now(loaded, plan, hold, resume, run, actor=actor)
    finally:
        await hold.release()  # a no-op once the engine took the lease over


def check_resumable(record: RunRecord, plan: Plan, resume: ResumeOptions) -> None:
    """The graph still matches and the record is whole, or the resumer said otherwise."""
    drift = graph_drift(record, plan)
    if drift and not resume.force_graph:
        raise GraphChangedError(
            f"resume: the build's graph no longer matches run {record.id}: {'; '.join(drift)}. "
            "Resume with --force-graph to continue with the build as it is now",
            run_id=record.id,
        )
    if record.degraded and not resume.resume_degraded:
        raise DegradedRecordError(
            f"resume: run {record.id}'s record is degraded (some writes were lost), so resuming "
            f"could run work twice. Check it with: zuke runs show {record.id}; then resume with "
            "--resume-degraded to go on anyway",
            run_id=record.id,
        )


async def resume_now(
    loaded: LoadedBuild,
    plan: Plan,
    hold: Hold,
    resume: ResumeOptions,
    run: RunOptions,
    *,
    actor: str,
    delta_extra: RunDelta | None = None,
) -> ResumeOutcome:
    """Compare-and-swap the held run to ``running`` and drive the rest of it."""
    record = hold.record
    rollback = await unfinished_rollback(loaded, record)  # then the rest is the rollback
    change = _to_running(
        actor,
        run.clock.now_ms(),
        delta_extra,
        lease_token=hold.token,
        overrides=_recorded_overrides(loaded, resume),
    )
    updated = await hold.write(change)
    if isinstance(updated, (Unchanged, GaveUp)):
        raise AlreadyResumedError(
            f"resume: run {record.id} was resumed by {updated.record.actor} at "
            f"{updated.record.updated_at}; nothing to do",
            run_id=record.id,
            by=updated.record.actor,
        )
    adoption = await hold.hand_over()
    try:
        # An unfinished rollback is driven, then the whole run's compensations walk.
        result = await execute_resumed(loaded, rollback or plan, adoption, run, actor=actor,
                                       settle_as="cancelled" if rollback else None,
                                       walk_plan=plan if rollback else None)  # fmt: skip
    except BaseException:
        # Nobody drives the run: give the lease back (a no-op if the engine already did).
        await _release_quietly(hold)
        raise
    return ResumeOutcome(record.id, "resumed", result.status, result=result)


def _to_running(
    actor: str,
    now_ms: int,
    extra: RunDelta | None,
    *,
    lease_token: str,
    overrides: Mapping[str, str],
) -> Callable[[RunRecord], RunDelta | None]:
    def change(fresh: RunRecord) -> RunDelta | None:
        if fresh.status != "suspended":
            return None  # decided again on the fresh record: it moved
        stamp = iso(now_ms)
        event = RunEvent(at=stamp, tool="resume", actor=actor)
        delta = RunDelta(
            updated_at=stamp,
            status="running",
            actor=actor,
            events=(event,),
            deadline_at=pushed_deadline(fresh, now_ms),
            # The record names its holder's lease: a paused former owner that wakes up
            # sees it is no longer theirs and writes nothing.
            locks={lease_key(fresh.id): lease_token},
            params=overrides,  # what this resume changed is what the run goes on with
        )
        if extra is not None:
            rows = {
                name: row
                for name, row in extra.targets.items()
                if name in fresh.targets and fresh.targets[name].status == "waiting"
            }
            delta = replace(delta, targets=rows, events=(*extra.events, event))
        return delta

    return change


def _recorded_overrides(loaded: LoadedBuild, resume: ResumeOptions) -> dict[str, str]:
    """The resumer's non-secret parameter overrides, as text to record on the run."""
    secret = {p.name for p in parameters(type(loaded.build)) if p.is_secret}
    raw = loaded.resolution.raw
    return {
        name: loaded.redactor.text(raw[name])
        for name in resume.params
        if name in raw and name not in secret
    }


def pushed_deadline(record: RunRecord, now_ms: int) -> str | None:
    """``deadlineAt`` moved forward by the time the run was parked.

    Parked time runs from ``parkedAt`` (set when the run suspended); an audit
    write that moved ``updatedAt`` never shortens it. Records written before
    ``parkedAt`` existed fall back to ``updatedAt``.
    """
    deadline = parse_iso(record.deadline_at) if record.deadline_at else None
    parked_since = parse_iso(record.parked_at or record.updated_at)
    if deadline is None or parked_since is None or now_ms <= parked_since:
        return None  # unchanged
    return iso(deadline + (now_ms - parked_since))


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


async def _release_quietly(hold: Hold) -> None:
    try:
        await asyncio.to_thread(hold.store.release_lock, lease_key(hold.run_id), hold.token)
    except Exception:
        return


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
