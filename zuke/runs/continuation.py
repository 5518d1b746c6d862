"""Continuing a parked run exactly once: the second step of ``zuke resume``, and what a
sweep, a deliverer and the process whose run just suspended call.

Under the run's lease (:class:`~zuke.runs.lifecycle.Hold`) the record is read
again; it must be ``suspended``; the build must still have its graph
(``--force-graph``) and the record must be whole (``--resume-degraded``); a
gate past its deadline takes its timeout disposition; then a compare-and-swap
on the record's version moves it ``suspended → running``, naming the
resumer's lease and pushing ``deadlineAt`` forward by the time the run was
parked (``parkedAt``, never ``updatedAt``), and the engine drives what has not
succeeded (:mod:`zuke._engine.resumed`). A run that suspends again while a
signal one of its gates waits for is stored is continued again at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field, replace
from typing import TYPE_CHECKING

from zuke._build import Build, parameters
from zuke._clock import iso, parse_iso
from zuke._engine.plan import Plan
from zuke._engine.resumed import execute_resumed, plan_of
from zuke._engine.run import LoadedBuild, RunOptions
from zuke._errors import (
    AlreadyResumedError,
    DegradedRecordError,
    GraphChangedError,
    RunNotSuspendedError,
)
from zuke._waits import Satisfied, WaitFailed
from zuke.runs.gate_checks import Taken, check_gates, passed_rows
from zuke.runs.gate_failures import failed_gate, settle_failed_gate
from zuke.runs.lifecycle import (
    Hold,
    graph_drift,
    lease_key,
    load_for,
    moved_by,
    take,
)
from zuke.runs.outcome import ResumeOutcome
from zuke.runs.signals import SignalDelivery, due_signals
from zuke.runs.timeouts import settle_timeout, unfinished_rollback
from zuke.state._protocol import StateStore
from zuke.state.records import RunDelta, RunEvent, RunRecord
from zuke.state.update import GaveUp, Unchanged

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

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


def check_suspended(record: RunRecord) -> None:
    if record.status == "suspended":
        return
    if record.status in ("running", "cancelling"):
        by = moved_by(record)
        raise AlreadyResumedError(
            f"resume: run {record.id} is {record.status} (resumed or started by {by} "
            f"at {record.updated_at}); nothing to do",
            run_id=record.id,
            by=by,
        )
    raise RunNotSuspendedError(
        f'resume: run {record.id} is "{record.status}", not suspended',
        run_id=record.id,
        status=record.status,
    )


async def is_due(store: StateStore, run_id: str) -> bool:
    """Whether the run is parked with a gate whose signal is stored, or whose trigger's
    failure was recorded for its next holder (its ``on_failure`` disposition is due)."""
    found = await asyncio.to_thread(store.get_run, run_id)
    return found is not None and due(found.record)


def due(record: RunRecord) -> bool:
    """:func:`is_due` on a record the caller has just read."""
    if record.status != "suspended":
        return False
    return bool(due_signals(record)) or failed_gate(record) is not None


async def continue_due(
    build_cls: type[Build], store: StateStore, run_id: str, run: RunOptions, *, actor: str
) -> ResumeOutcome | None:
    """Continue a run that just suspended while a signal one of its gates waits for is
    stored (it arrived while the run ran); ``None`` when nothing is due or another process
    already continues it. The process that suspended the run calls this right after."""
    if not await is_due(store, run_id):
        return None
    try:
        return await continue_run(build_cls, store, run_id, ResumeOptions(), run, actor=actor)
    except (AlreadyResumedError, RunNotSuspendedError):
        # Between the look and the lease another process took the run up, or already took
        # it to its end (a watcher, a sweep): nothing is left for this process to continue.
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
        if not await is_due(store, run_id):
            break
        try:
            again = await _continue_once(build_cls, store, run_id, resume, run, actor=actor)
        except (AlreadyResumedError, RunNotSuspendedError):
            break  # someone else continues it, or already ended it
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
        check_suspended(hold.record)
        loaded = load_for(build_cls, hold.record, run)
        plan = await plan_of(loaded, hold.record)
        check_resumable(hold.record, plan, resume)
        failed = failed_gate(hold.record)
        if failed is not None:  # decided before any deadline that passed since
            return await settle_failed_gate(loaded, hold, *failed, run, actor=actor)
        now = run.clock.now_ms()
        # Past a deadline, each such gate is asked once more as of it: an answer given in
        # time passes it; a failure takes its on_failure, anything else times it out.
        final = await check_gates(loaded, Taken(hold), now, {}, expired=True)
        for check in final:
            if isinstance(check.result, WaitFailed):
                reason = check.result.reason
                return await settle_failed_gate(loaded, hold, check.gate, reason, run, actor=actor)
            if not isinstance(check.result, Satisfied):
                notes = [f"gate {check.gate!r}: its final check: {check.detail}"] if (
                    check.errored) else []  # fmt: skip
                return await settle_timeout(loaded, hold, check.gate, run, actor=actor,
                                            notes=notes)  # fmt: skip
        rows = passed_rows(loaded, final, iso(now))
        extra = RunDelta(updated_at=iso(now), targets=rows) if rows else None
        return await resume_now(loaded, plan, hold, resume, run, actor=actor, delta_extra=extra)
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
        by = moved_by(updated.record)
        raise AlreadyResumedError(
            f"resume: run {record.id} was resumed by {by} at "
            f"{updated.record.updated_at}; nothing to do",
            run_id=record.id,
            by=by,
        )
    adoption = await hold.hand_over()
    try:
        # An unfinished rollback is driven, then the whole run's compensations walk.
        result = await execute_resumed(loaded, rollback or plan, adoption, run, actor=actor,
                                       settle_as="cancelled" if rollback else None,
                                       walk_plan=plan if rollback else None)  # fmt: skip
    except BaseException:
        # Nobody drives the run: give the lease back (a no-op if the engine already did).
        await hold.give_back()
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
        delta = RunDelta(  # the starter stays the record's actor: the event names the resumer
            updated_at=stamp,
            status="running",
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


__all__ = [
    "MAX_CONTINUATIONS",
    "ResumeOptions",
    "check_resumable",
    "check_suspended",
    "continue_due",
    "continue_run",
    "is_due",
    "pushed_deadline",
    "resume_now",
]
