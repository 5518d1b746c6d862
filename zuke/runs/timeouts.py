"""A gate past its deadline, or whose trigger failed: settling its disposition.

Whether a gate timed out is :mod:`zuke.runs.deadlines`' (a pure rule on the record); what
follows, under the run's lease, is here.

**An answer versus a timeout is decided by when it was given, not by who looks
first.** Past its deadline a gate's trigger gets a final check as of the
deadline (``ctx.as_of_ms``; the sweep and a resume ask it): a signal
*received* before the deadline, an ``/approve`` made in time, pass it even
when the sweep or resume that sees them runs long after. A signal received
after the deadline does not save the gate, and once a timeout is settled a
late signal is refused with a message naming it (:func:`~zuke.runs.deadlines.timeout_refusal`).

Dispositions (``s.on_timeout(...)``), each under the run's lease:

* ``"fail"`` (default) — the gate fails (``wait "<gate>" timed out``), what it
  held back is skipped, the run ends ``failed``;
* ``"cancel-run"`` — the same rows, and the run ends ``cancelled``;
* a target — it runs (a rollback, with its own ``ctx.state``), then the run
  ends ``cancelled`` whatever the rollback did (its row says how it went).

A ``"cancel-run"`` timeout walks the run's compensations (``on_cancel``) like
any cancellation. What each says is what happened (``ran rollback``,
``rollback failed (…)``, ``rollback did not run (…)``, then the run's final
status), and :attr:`~zuke.runs.outcome.ResumeOutcome.handled` whether the
disposition did its job — the one rule for the exit code. A gate whose trigger
failed takes its ``on_failure`` disposition on the same paths
(:func:`apply_disposition`, from :mod:`zuke.runs.gate_failures`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from zuke._clock import iso
from zuke._engine.plan import Plan, make_plan
from zuke._engine.result import RunResult
from zuke._engine.resumed import execute_resumed, plan_of
from zuke._engine.run import LoadedBuild, RunOptions, ordering_edges
from zuke._errors import AlreadyResumedError, RunError
from zuke.runs.deadlines import TIMEOUT_EVENT, still_expired, timed_out_error
from zuke.runs.gate_checks import timeout_hook
from zuke.runs.lifecycle import Hold, lease_key
from zuke.runs.outcome import ResumeAction, ResumeOutcome
from zuke.state._protocol import StateStore
from zuke.state.records import RunDelta, RunEvent, RunRecord, RunStatus, TargetRecord
from zuke.state.update import GaveUp, Unchanged

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

#: a gate whose trigger failed (``WaitFailed``) and its ``on_failure`` disposition
FAILED_EVENT = "wait-failed"
#: the events that may start a rollback a later process has to finish
ROLLBACK_EVENTS = (TIMEOUT_EVENT, FAILED_EVENT)


async def unfinished_rollback(loaded: LoadedBuild, record: RunRecord) -> Plan | None:
    """The rollback a timed-out gate started and nobody finished, as the plan to drive.

    A process that dies mid-rollback leaves the run ``running`` with a timeout (or a gate's
    failure) event and
    ``intendedTerminal: cancelled``; a reap hands it back to ``suspended``. What is left
    of it is the rollback, then ``cancelled`` — never its timed-out gate again.
    """
    if record.intended_terminal != "cancelled":
        return None
    event = next((e for e in reversed(record.events) if e.tool in ROLLBACK_EVENTS), None)
    rollback = (event.args.get("onTimeout") or event.args.get("onFailure")) if event else None
    if rollback is None or rollback not in record.targets:
        return None  # a string disposition settles in one write: nothing is left over
    if rollback not in loaded.graph.specs:
        raise RunError(
            f"run {record.id} was rolling back with {rollback!r}, which this build no longer "
            "has; restore the target, or cancel the run with zuke cancel",
            run_id=record.id,
        )
    edges = await ordering_edges(loaded.build, loaded.graph)
    return make_plan(loaded.graph, [rollback], ordering=edges)


async def release_kept(store: StateStore, kept: Mapping[str, str]) -> list[str]:
    """Give back the run-held locks of a run that just ended (its lease is ours); notes."""
    notes: list[str] = []
    for key, token in sorted(kept.items()):
        try:
            await asyncio.to_thread(store.release_lock, key, token)
            notes.append(f'released lock "{key}", which the run kept (held_until)')
        except Exception as exc:
            notes.append(f"could not release {key} ({exc}); it lapses after its TTL")
    return notes


def settled_rows(
    record: RunRecord, gate: str, now: str, error: str, *, keep: frozenset[str] = frozenset()
) -> dict[str, TargetRecord]:
    """The gate failed with ``error``; what it (or any other waiting gate) held back skipped."""
    row = record.targets[gate]
    rows = {gate: replace(row, status="failed", ended_at=now, waiting_for=None, error=error)}
    for name, other in record.targets.items():
        if name != gate and name not in keep and other.status in ("pending", "waiting"):
            rows[name] = replace(
                other, status="skipped", ended_at=now, waiting_for=None, error=None
            )
    return rows


def changed_under_us(record_id: str, outcome: Unchanged | GaveUp) -> AlreadyResumedError:
    """The record moved while a timeout was being settled: someone else has the run."""
    return AlreadyResumedError(
        f"resume: run {record_id} changed while its timeout was settled "
        f"(it is {outcome.record.status} now)",
        run_id=record_id,
    )


@dataclass(frozen=True)
class Settlement:
    """How a gate ends without passing (timed out, or its trigger failed) and what follows."""

    gate: str
    #: ``"fail"``, ``"cancel-run"``, or a target's name (``is_target``)
    disposition: str
    is_target: bool
    #: the gate row's error: why it failed
    error: str
    event: RunEvent
    action: ResumeAction
    #: the decision, taken again on the fresh record under the lease
    still: Callable[[RunRecord], bool]


async def settle_timeout(
    loaded: LoadedBuild, hold: Hold, gate: str, run: RunOptions, *, actor: str, notes: list[str]
) -> ResumeOutcome:
    """Apply ``gate``'s timeout disposition to the run ``hold`` holds.

    The caller releases ``hold`` on every way out (a no-op once a rollback took it over).
    """
    record = hold.record
    waiting = record.targets[gate].waiting_for
    assert waiting is not None
    now_ms = run.clock.now_ms()
    event = RunEvent(
        at=iso(now_ms),
        tool=TIMEOUT_EVENT,
        actor=actor,
        detail=f"gate {gate!r} timed out at {waiting.deadline}",
        args={"gate": gate, "onTimeout": waiting.on_timeout},
    )
    settlement = Settlement(
        gate, waiting.on_timeout, waiting.on_timeout_is_target, timed_out_error(record, gate),
        event, "timed-out", lambda fresh: still_expired(fresh, gate, now_ms),
    )  # fmt: skip
    check_rollback(loaded, record.id, settlement)
    # The hook is user code: it runs under the hold, whose heartbeat renews the lease. It
    # is an external call that no compare-and-swap guards, so the lease is proven first: a
    # holder paused since it read the record must not call it after a takeover (the new
    # holder calls it).
    await hold.prove()
    hooked = await timeout_hook(loaded, record, gate, now_ms, actor=actor)
    if hooked is not None:  # the hook's failure is news, never a reason to skip the rest
        notes = [*notes, hooked]
        run.on_warning(hooked)
    return await apply_disposition(loaded, hold, settlement, run, actor=actor, notes=notes)


def check_rollback(loaded: LoadedBuild, run_id: str, s: Settlement) -> None:
    """A target disposition the build no longer has: refused before anything moves."""
    if s.is_target and s.disposition not in loaded.graph.specs:
        how = "timed out" if s.action == "timed-out" else "failed"
        raise RunError(
            f"gate {s.gate!r} of run {run_id} {how} into {s.disposition!r}, which this build no "
            f"longer has; restore that target to roll back, or: zuke cancel {run_id}",
            run_id=run_id,
        )


async def apply_disposition(
    loaded: LoadedBuild, hold: Hold, s: Settlement, run: RunOptions, *, actor: str,
    notes: list[str],
) -> ResumeOutcome:  # fmt: skip
    """The gate fails with ``s.error``; then ``"fail"`` fails the run, ``"cancel-run"``
    walks its compensations, a target runs (then the run is ``cancelled``)."""
    if s.is_target:
        return await _run_rollback(loaded, hold, s, run, actor=actor, notes=notes)
    if s.disposition == "cancel-run":
        return await _cancel_run(loaded, hold, s, run, actor=actor, notes=notes)
    record = hold.record
    now = s.event.at
    final: RunStatus = "failed"

    kept: dict[str, str] = {}

    def settle(fresh: RunRecord) -> RunDelta | None:
        if not s.still(fresh):
            return None
        kept.clear()  # the run-held locks (held_until) the run gives back as it ends
        kept.update({k: t for k, t in fresh.locks.items() if k in fresh.held})
        return RunDelta(
            updated_at=now,
            status=final,
            targets=settled_rows(fresh, s.gate, now, s.error),
            events=(s.event,),
            intended_terminal=final,
            locks={lease_key(record.id): None, **dict.fromkeys(kept)},
            held=dict.fromkeys(fresh.held),
        )

    outcome = await hold.write(settle)
    if isinstance(outcome, (Unchanged, GaveUp)):
        raise changed_under_us(record.id, outcome)
    notes = [*notes, *await release_kept(hold.store, kept)]
    return ResumeOutcome(
        record.id, s.action, final, notes=[*notes, f"run {record.id}: {s.event.detail}; "
                                           f"the run is {final}"],
    )  # fmt: skip


async def _cancel_run(
    loaded: LoadedBuild, hold: Hold, s: Settlement, run: RunOptions, *, actor: str,
    notes: list[str],
) -> ResumeOutcome:  # fmt: skip
    """``"cancel-run"``: the gate fails, then the run's compensations walk."""
    record = hold.record
    now = s.event.at

    def mark(fresh: RunRecord) -> RunDelta | None:
        if not s.still(fresh):
            return None
        rows = {s.gate: settled_rows(fresh, s.gate, now, s.error)[s.gate]}
        return RunDelta(updated_at=now, targets=rows, events=(s.event,))

    marked = await hold.write(mark)
    if isinstance(marked, (Unchanged, GaveUp)):
        raise changed_under_us(record.id, marked)
    # Imported here: only a rollback walks (the walk and the compensations are a tenth of
    # what a signal's resume would import otherwise, issue 28 §3).
    from zuke.runs.compensate import walk_taken

    result, _, warnings = await walk_taken(
        hold,
        build=type(loaded.build),
        env=run.env,
        actor=actor,
        intended="cancelled",
        reason=f"the run was cancelled: {s.event.detail}",
        warn=run.on_warning,
    )
    ran = f"; ran {len(result.compensated)} compensation(s)" if result.compensated else ""
    stopped = f"; the walk stopped: {result.stopped}" if result.stopped else ""
    return ResumeOutcome(
        record.id,
        s.action,
        result.status,
        notes=[
            *notes,
            *warnings,
            f"run {record.id}: {s.event.detail}{ran}{stopped}; the run is {result.status}",
        ],
        handled=result.status == "cancelled" and result.stopped is None,
    )


async def _run_rollback(
    loaded: LoadedBuild, hold: Hold, s: Settlement, run: RunOptions, *, actor: str,
    notes: list[str],
) -> ResumeOutcome:  # fmt: skip
    record = hold.record
    rollback = s.disposition
    edges = await ordering_edges(loaded.build, loaded.graph)
    plan = make_plan(loaded.graph, [rollback], ordering=edges)
    now = s.event.at
    # The other gates still waiting are skipped here, before the rollback, and the run ends
    # cancelled: they are told of the cancel now (their on_cancel), under the lease.
    told = await _tell_skipped(loaded, hold, s.gate, frozenset(plan.order), actor=actor,
                               now_ms=run.clock.now_ms())  # fmt: skip

    def to_running(fresh: RunRecord) -> RunDelta | None:
        if not s.still(fresh):
            return None
        rows = settled_rows(fresh, s.gate, now, s.error, keep=frozenset(plan.order))
        for name in plan.order:  # the rollback's closure: new rows unless already done
            if name not in fresh.targets:
                rows[name] = TargetRecord()
        return RunDelta(
            updated_at=now,
            status="running",
            targets=rows,
            events=(s.event, *told),
            intended_terminal="cancelled",
            locks={lease_key(record.id): hold.token},
        )

    updated = await hold.write(to_running)
    if isinstance(updated, (Unchanged, GaveUp)):  # the caller gives the lease back
        raise changed_under_us(record.id, updated)
    # The record's graph gains the rollback's rows; the plan is just the rollback.
    # The rollback runs, then the run's compensation walk covers the whole run.
    whole = await plan_of(loaded, record)
    adoption = await hold.hand_over()
    result = await execute_resumed(
        loaded, plan, adoption, run, actor=actor, settle_as="cancelled", walk_plan=whole
    )
    found = await asyncio.to_thread(hold.store.get_run, record.id)
    row = found.record.targets.get(rollback) if found is not None else None
    did, handled = rollback_said(rollback, result, row)
    line = f"run {record.id}: {s.event.detail}; {did}; the run is {result.status}"
    if handled:
        result = replace(result, settled_by=line)
    return ResumeOutcome(
        record.id, s.action, result.status, result=result, notes=[*notes, line], handled=handled
    )


async def _tell_skipped(
    loaded: LoadedBuild, hold: Hold, gate: str, keep: frozenset[str], *, actor: str,
    now_ms: int,
) -> tuple[RunEvent, ...]:  # fmt: skip
    """Ask each other waiting gate a rollback skips (its ``on_cancel``); their events."""
    from zuke._engine import gate_cancel  # a rollback's only (see walk_taken's import)
    from zuke.runs.compensate import gate_hooks

    events = []
    hooks = gate_hooks(loaded, actor)
    for other in gate_cancel.waiting_gates(hold.record):
        if other == gate or other in keep:
            continue
        await hold.prove()  # user code runs under a lease proven just before
        told = await gate_cancel.ask(hold.record, other, hooks, now_ms)
        if told is None:
            continue
        said = told.error or told.answer
        events.append(RunEvent(at=iso(now_ms), tool=gate_cancel.GATE_CANCEL_EVENT, actor=actor,
                               outcome="error" if told.error else "ok",
                               detail=said or "nothing to do", args={"gate": other}))  # fmt: skip
    return tuple(events)


def rollback_said(
    rollback: str, result: RunResult, row: TargetRecord | None = None
) -> tuple[str, bool]:
    """What became of a disposition's rollback target, as the run's result (and its row,
    read after) tell it — never what was meant to happen: one the run stopped before its
    body started (a run-held lock lost while parked) did not run — and whether the
    disposition did its job (the rollback succeeded and the run was cancelled)."""
    outcome = result.outcomes.get(rollback)
    status = outcome.status if outcome is not None else "pending"
    error = outcome.error if outcome is not None else None
    stopped = result.stop_reason
    if status == "succeeded":
        did = f"ran {rollback}"
    elif status == "failed" and stopped and error == stopped:  # stopped, not failed itself
        cut = row is not None and row.interrupted
        did = f"{rollback} {'was interrupted' if cut else 'did not run'} ({stopped})"
    elif status == "failed":
        did = f"{rollback} failed ({error or 'no reason given'})"
    else:
        did = f"{rollback} did not run" + (f" ({stopped})" if stopped else "")
    return did, status == "succeeded" and result.status == "cancelled" and not stopped
