"""One suspended run in a sweep: its gates asked, and what follows.

Apart from :mod:`zuke.runs.sweep` (which runs a sweep covers, in what order, reaping first,
one bad run never stopping the rest) because this is what happens to *one* run: its gates
past their deadline asked first, as of the deadline, then the others; then the run is
resumed (a gate passed, or none waits), a failed gate's ``on_failure`` or a timed-out gate's
disposition settled, its checks stamped, or — a store whose write budget does not afford
it — deferred to the next sweep. Nothing is written without the run's lease, taken at the
first change (:class:`~zuke.runs.lifecycle.LazyHold`); a signal stored while the sweep
held the run is continued once the sweep lets go.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from zuke._build import Build
from zuke._clock import iso
from zuke._engine import store_traits as traits
from zuke._engine.plan import Plan
from zuke._engine.resumed import plan_of
from zuke._engine.run import LoadedBuild, RunOptions
from zuke._waits import Satisfied, WaitFailed
from zuke.runs.continuation import ResumeOptions, check_resumable, continue_due, resume_now
from zuke.runs.gate_checks import GateAnswer, check_gates, passed_rows, record_checks
from zuke.runs.gate_failures import settle_failed_gate
from zuke.runs.lifecycle import LazyHold, load_for
from zuke.runs.sweep_report import SweepEntry, check_detail, last_checked
from zuke.runs.timeouts import settle_timeout
from zuke.state._protocol import StateStore, StoredRun
from zuke.state.records import RunDelta, RunEvent

#: the audit trail's event of a gate a sweep passed (``detail``: what satisfied it)
PASSED_EVENT = "gate-passed"


async def sweep_run(
    build_cls: type[Build],
    store: StateStore,
    found: StoredRun,
    resume: ResumeOptions,
    run: RunOptions,
    actor: str,
    shared: dict[str, Any],
    loaded: LoadedBuild | None = None,
) -> SweepEntry:
    record = found.record
    loaded = loaded or load_for(build_cls, record, run)
    plan = await plan_of(loaded, record)
    check_resumable(record, plan, resume)
    lazy = LazyHold(store, record, actor=actor, clock=run.clock, env=run.env,
                    warn=run.on_warning)  # fmt: skip
    try:
        entry = await _sweep_checked(loaded, plan, lazy, resume, run, actor, shared)
    finally:
        held = await lazy.release()  # a no-op once a resume took the lease over
    if entry.result != "suspended" or not held:
        return entry
    # Let go, then look again: a signal stored while this sweep held the run is due now,
    # and its deliverer, finding the run held, left it to the holder.
    again = await continue_due(build_cls, store, record.id, run, actor=actor)
    if again is None:
        return entry
    notes = "; ".join(n for n in (entry.detail, *again.notes) if n) or None
    return replace(entry, action="resumed", result=again.status, detail=notes)


async def _sweep_checked(
    loaded: LoadedBuild,
    plan: Plan,
    lazy: LazyHold,
    resume: ResumeOptions,
    run: RunOptions,
    actor: str,
    shared: dict[str, Any],
) -> SweepEntry:
    """Check one run's gates; every change is made under its lease, taken then."""
    record = lazy.basis
    name = type(loaded.build).__name__
    now = run.clock.now_ms()
    # Gates past their deadline first, each asked once more as of it: an answer given in
    # time passes it however late this sweep runs; none (or a trigger that cannot say) times
    # it out. Only then are the other gates asked.
    final = await check_gates(loaded, lazy, now, shared, expired=True)
    if (refused := _refused(record.id, name, final)) is not None:
        return refused
    for check in final:
        if isinstance(check.result, WaitFailed):
            return await _settle_failed(loaded, lazy, check, run, actor)
        if not isinstance(check.result, Satisfied):
            return await _settle_timeout(loaded, lazy, check, run, actor)
    checks = [*final, *await check_gates(loaded, lazy, now, shared, expired=False)]
    if (refused := _refused(record.id, name, checks)) is not None:
        return refused
    failed = next((c for c in checks if isinstance(c.result, WaitFailed)), None)
    if failed is not None:
        return await _settle_failed(loaded, lazy, failed, run, actor)
    passed = [c for c in checks if isinstance(c.result, Satisfied)]
    if passed or not checks:
        gates = ", ".join(c.gate for c in passed) or None
        writes = traits.resume_writes(loaded.graph.specs, record, {c.gate for c in passed})
        if not traits.reserve_writes(lazy.store, writes):  # decided before anything is written
            return _deferred(record.id, name, gates, writes)
        hold = await lazy.get()
        stamp = iso(now)
        rows = passed_rows(loaded, passed, stamp)
        outcome = await resume_now(
            loaded,
            plan,
            hold,
            resume,
            run,
            actor=actor,
            delta_extra=RunDelta(
                updated_at=stamp, targets=rows, events=_passed_events(loaded, passed, stamp, actor)
            ),
        )
        lost = outcome.result.record_error if outcome.result is not None else None
        return SweepEntry(
            record.id,
            name,
            "failed" if lost else "resumed",  # a run whose end is not recorded is no success
            outcome.status,
            gate=gates,
            detail=lost or "; ".join(outcome.notes) or None,
        )
    stamping = traits.SETTLE_WRITES + traits.STAMP_HEADROOM  # unaffordable: the next sweep asks
    if traits.reserve_writes(lazy.store, stamping):
        await record_checks(lazy, checks, now)
    first = checks[0]
    # A gate inside its interval was not asked: its last answer is not passed off as current.
    detail = "; ".join(d for c in checks if (d := check_detail(c))) or None
    idle = all(not c.due for c in checks)
    return SweepEntry(
        record.id,
        name,
        "still-waiting",
        "suspended",
        gate=first.gate,
        detail=detail,
        errored=any(c.errored for c in checks),
        rechecked=not idle,
        last_checked=last_checked(first) if idle else None,
    )


def _refused(run_id: str, build: str, checks: list[GateAnswer]) -> SweepEntry | None:
    """A gate whose trigger's service refused this process's credentials: the sweep fails for
    the run, left waiting as it was (nothing is settled or written on a check it could not
    make); the entry says which credential to check."""
    check = next((c for c in checks if c.refused), None)
    if check is None:
        return None
    return SweepEntry(run_id, build, "failed", "suspended", gate=check.gate, detail=check.detail,
                      errored=True, access_failed=True)  # fmt: skip


def _passed_events(
    loaded: LoadedBuild, passed: list[GateAnswer], stamp: str, actor: str
) -> tuple[RunEvent, ...]:
    """The audit trail's line for each gate this sweep passed, with what its trigger said of
    who or what satisfied it (an approval's approvers), redacted."""
    return tuple(
        RunEvent(
            at=stamp,
            tool=PASSED_EVENT,
            actor=actor,
            args={"gate": c.gate},
            detail=loaded.redactor.text(c.result.audit)
            if isinstance(c.result, Satisfied) and c.result.audit
            else None,
        )
        for c in passed
    )


async def _settle_failed(
    loaded: LoadedBuild, lazy: LazyHold, check: GateAnswer, run: RunOptions, actor: str
) -> SweepEntry:
    """A gate whose trigger failed: its ``on_failure`` disposition, under the lease."""
    record, name = lazy.basis, type(loaded.build).__name__
    assert isinstance(check.result, WaitFailed)
    reason = check.result.reason
    if not traits.reserve_writes(lazy.store, traits.SETTLE_WRITES):
        return _deferred(record.id, name, check.gate, traits.SETTLE_WRITES)
    hold = await lazy.get()
    settled = await settle_failed_gate(loaded, hold, check.gate, reason, run, actor=actor)
    plain = settled.status == "failed" and settled.result is None  # "fail": the reason says it
    detail = reason if plain or not settled.notes else "; ".join(settled.notes)
    return SweepEntry(record.id, name, "gate-failed", settled.status, gate=check.gate,
                      detail=detail, handled=settled.ok)  # fmt: skip


async def _settle_timeout(
    loaded: LoadedBuild, lazy: LazyHold, check: GateAnswer, run: RunOptions, actor: str
) -> SweepEntry:
    """A gate past its deadline whose final check did not pass it: its timeout disposition."""
    record, name = lazy.basis, type(loaded.build).__name__
    if not traits.reserve_writes(lazy.store, traits.SETTLE_WRITES):
        return _deferred(record.id, name, check.gate, traits.SETTLE_WRITES)
    hold = await lazy.get()
    notes = [f"gate {check.gate!r}: its final check: {check.detail}"] if check.errored else []
    outcome = await settle_timeout(loaded, hold, check.gate, run, actor=actor, notes=notes)
    return SweepEntry(record.id, name, "timed-out", outcome.status, gate=check.gate,
                      detail="; ".join(outcome.notes), handled=outcome.ok)  # fmt: skip


def _deferred(run_id: str, build: str, gate: str | None, writes: int) -> SweepEntry:
    detail = (f"the store's write budget does not afford it now (about {writes} writes): "
              "left suspended for the next sweep")  # fmt: skip
    return SweepEntry(run_id, build, "deferred", "suspended", gate=gate, detail=detail)


__all__ = ["PASSED_EVENT", "sweep_run"]
