"""A gate past its deadline: deciding that it timed out, and settling its disposition.

**Signal versus timeout is decided by the record, not by who looks first.**
A gate waiting for a signal has not timed out if that signal was *received*
before the gate's deadline — even when the sweep or resume that sees both
runs long after. A signal received after the deadline does not save the gate,
and once a timeout is settled a late signal is refused with a message naming
it (:func:`timeout_refusal`).

Dispositions (``s.on_timeout(...)``), each under the run's lease:

* ``"fail"`` (default) — the gate fails (``wait "<gate>" timed out``), what it
  held back is skipped, the run ends ``failed``;
* ``"cancel-run"`` — the same rows, and the run ends ``cancelled``;
* a target — it runs (a rollback, with its own ``ctx.state``), then the run
  ends ``cancelled`` whatever the rollback did (its row says how it went).

A ``"cancel-run"`` timeout walks the run's compensations (``on_cancel``) like
any cancellation.
"""

from __future__ import annotations

from dataclasses import replace

from zuke._clock import iso, parse_iso
from zuke._engine.plan import Plan, make_plan
from zuke._engine.resumed import execute_resumed, plan_of
from zuke._engine.run import LoadedBuild, RunOptions, ordering_edges
from zuke._errors import AlreadyResumedError, RunError
from zuke.runs.compensate import walk_taken
from zuke.runs.gate_checks import timeout_hook
from zuke.runs.lifecycle import Hold, ResumeOutcome, lease_key
from zuke.state.records import RunDelta, RunEvent, RunRecord, RunStatus, TargetRecord
from zuke.state.update import GaveUp, Unchanged

TIMEOUT_EVENT = "timeout"


def signal_wins(record: RunRecord, row: TargetRecord) -> bool:
    """Whether the signal the gate waits for arrived before its deadline."""
    waiting = row.waiting_for
    if waiting is None or not waiting.trigger.startswith("signal:"):
        return False
    signal = record.signals.get(waiting.trigger.removeprefix("signal:"))
    deadline = parse_iso(waiting.deadline) if waiting.deadline else None
    received = parse_iso(signal.received_at) if signal is not None else None
    return received is not None and deadline is not None and received <= deadline


def expired_gate(record: RunRecord, now_ms: int) -> str | None:
    """The first waiting gate whose deadline has passed (and no signal beat it), if any."""
    for name, row in record.targets.items():
        waiting = row.waiting_for
        if row.status != "waiting" or waiting is None or waiting.deadline is None:
            continue
        deadline = parse_iso(waiting.deadline)
        if deadline is not None and deadline <= now_ms and not signal_wins(record, row):
            return name
    return None


def timeout_refusal(record: RunRecord, gate: str | None, signal: str) -> str | None:
    """Why a signal for a run that timed out is not delivered (``None``: it did not time out)."""
    if gate is not None:
        row = record.targets[gate]
        deadline = row.waiting_for.deadline if row.waiting_for else None
        return (
            f"the signal {signal!r} came after gate {gate!r}'s deadline ({deadline}): the gate "
            "timed out, and the signal was not delivered"
        )
    for event in reversed(record.events):
        if event.tool == TIMEOUT_EVENT:
            return (
                f"resume: run {record.id} is {record.status}: {event.detail}; the signal "
                f"{signal!r} came too late and was not delivered"
            )
    return None


async def unfinished_rollback(loaded: LoadedBuild, record: RunRecord) -> Plan | None:
    """The rollback a timed-out gate started and nobody finished, as the plan to drive.

    A process that dies mid-rollback leaves the run ``running`` with a timeout event and
    ``intendedTerminal: cancelled``; a reap hands it back to ``suspended``. What is left
    of it is the rollback, then ``cancelled`` — never its timed-out gate again.
    """
    if record.intended_terminal != "cancelled":
        return None
    event = next((e for e in reversed(record.events) if e.tool == TIMEOUT_EVENT), None)
    rollback = event.args.get("onTimeout") if event is not None else None
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


def _timed_out_rows(
    record: RunRecord, gate: str, now: str, *, keep: frozenset[str] = frozenset()
) -> dict[str, TargetRecord]:
    row = record.targets[gate]
    deadline = row.waiting_for.deadline if row.waiting_for else None
    rows = {
        gate: replace(
            row,
            status="failed",
            ended_at=now,
            waiting_for=None,
            error=f'wait "{gate}" timed out (deadline {deadline})',
        )
    }
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


def still_expired(fresh: RunRecord, gate: str, now_ms: int) -> bool:
    """The decision, taken again on the fresh record: the run is parked, and ``gate`` is
    still waiting past its deadline with no signal that beat it."""
    row = fresh.targets.get(gate)
    return (
        fresh.status == "suspended"
        and row is not None
        and row.status == "waiting"
        and expired_gate(replace(fresh, targets={gate: row}), now_ms) == gate
    )


async def settle_timeout(
    loaded: LoadedBuild, hold: Hold, gate: str, run: RunOptions, *, actor: str, notes: list[str]
) -> ResumeOutcome:
    """Apply ``gate``'s timeout disposition to the run ``hold`` holds.

    The caller releases ``hold`` on every way out (a no-op once a rollback took it over).
    """
    record = hold.record
    waiting = record.targets[gate].waiting_for
    assert waiting is not None
    if waiting.on_timeout_is_target and waiting.on_timeout not in loaded.graph.specs:
        raise RunError(
            f"gate {gate!r} of run {record.id} timed out into {waiting.on_timeout!r}, which this "
            f"build no longer has; restore that target to roll back, or: zuke cancel {record.id}",
            run_id=record.id,
        )
    now_ms = run.clock.now_ms()
    now = iso(now_ms)
    detail = f"gate {gate!r} timed out at {waiting.deadline}"
    event = RunEvent(
        at=now,
        tool=TIMEOUT_EVENT,
        actor=actor,
        detail=detail,
        args={"gate": gate, "onTimeout": waiting.on_timeout},
    )
    # The hook is user code: it runs under the hold, whose heartbeat renews the lease.
    hooked = await timeout_hook(loaded, record, gate, now_ms)
    if hooked is not None:  # the hook's failure is news, never a reason to skip the rest
        notes = [*notes, hooked]
        run.on_warning(hooked)
    if waiting.on_timeout_is_target:
        return await _run_rollback(loaded, hold, gate, waiting.on_timeout, run, actor=actor,
                                   event=event, notes=notes)  # fmt: skip
    if waiting.on_timeout == "cancel-run":
        return await _cancel_run(loaded, hold, gate, run, actor=actor, event=event, notes=notes)
    final: RunStatus = "failed"

    def settle(fresh: RunRecord) -> RunDelta | None:
        if not still_expired(fresh, gate, now_ms):
            return None
        return RunDelta(
            updated_at=now,
            status=final,
            targets=_timed_out_rows(fresh, gate, now),
            events=(event,),
            intended_terminal=final,
            locks={lease_key(record.id): None},
        )

    outcome = await hold.write(settle)
    if isinstance(outcome, (Unchanged, GaveUp)):
        raise changed_under_us(record.id, outcome)
    return ResumeOutcome(
        record.id,
        "timed-out",
        final,
        notes=[*notes, f"run {record.id}: {detail}; the run is {final}"],
    )


async def _cancel_run(
    loaded: LoadedBuild,
    hold: Hold,
    gate: str,
    run: RunOptions,
    *,
    actor: str,
    event: RunEvent,
    notes: list[str],
) -> ResumeOutcome:
    """``"cancel-run"``: the gate fails as timed out, then the run's compensations walk."""
    record = hold.record
    now = event.at
    now_ms = run.clock.now_ms()

    def mark(fresh: RunRecord) -> RunDelta | None:
        if not still_expired(fresh, gate, now_ms):
            return None
        rows = {gate: _timed_out_rows(fresh, gate, now)[gate]}
        return RunDelta(updated_at=now, targets=rows, events=(event,))

    marked = await hold.write(mark)
    if isinstance(marked, (Unchanged, GaveUp)):
        raise changed_under_us(record.id, marked)
    result, _, warnings = await walk_taken(
        hold,
        build=type(loaded.build),
        env=run.env,
        actor=actor,
        intended="cancelled",
        reason=f"the run was cancelled: {event.detail}",
        warn=run.on_warning,
    )
    ran = f"; ran {len(result.compensated)} compensation(s)" if result.compensated else ""
    return ResumeOutcome(
        record.id,
        "timed-out",
        result.status,
        notes=[
            *notes,
            *warnings,
            f"run {record.id}: {event.detail}{ran}; the run is {result.status}",
        ],
    )


async def _run_rollback(
    loaded: LoadedBuild,
    hold: Hold,
    gate: str,
    rollback: str,
    run: RunOptions,
    *,
    actor: str,
    event: RunEvent,
    notes: list[str],
) -> ResumeOutcome:
    record = hold.record
    edges = await ordering_edges(loaded.build, loaded.graph)
    plan = make_plan(loaded.graph, [rollback], ordering=edges)
    now = event.at
    now_ms = run.clock.now_ms()

    def to_running(fresh: RunRecord) -> RunDelta | None:
        if not still_expired(fresh, gate, now_ms):
            return None
        rows = _timed_out_rows(fresh, gate, now, keep=frozenset(plan.order))
        for name in plan.order:  # the rollback's closure: new rows unless already done
            if name not in fresh.targets:
                rows[name] = TargetRecord()
        return RunDelta(
            updated_at=now,
            status="running",
            actor=actor,
            targets=rows,
            events=(event,),
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
    return ResumeOutcome(
        record.id,
        "timed-out",
        result.status,
        result=result,
        notes=[*notes, f"run {record.id}: {event.detail}; ran {rollback} and cancelled the run"],
    )


async def settle_failed_gate(
    hold: Hold, gate: str, reason: str, run: RunOptions, *, actor: str
) -> RunStatus:
    """A gate whose trigger reported it cannot succeed: the gate fails, and so does the run."""
    now = iso(run.clock.now_ms())
    event = RunEvent(at=now, tool="wait-failed", actor=actor, detail=f"gate {gate!r}: {reason}")

    def settle(fresh: RunRecord) -> RunDelta | None:
        row = fresh.targets.get(gate)
        if fresh.status != "suspended" or row is None or row.status != "waiting":
            return None
        rows = _timed_out_rows(fresh, gate, now)
        rows[gate] = replace(rows[gate], error=reason)
        return RunDelta(
            updated_at=now,
            status="failed",
            targets=rows,
            events=(event,),
            locks={lease_key(hold.run_id): None},
        )

    outcome = await hold.write(settle)
    return outcome.record.status
