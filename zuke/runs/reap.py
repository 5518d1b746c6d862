"""Reaping: what the sweep does with ``running`` and ``cancelling`` runs nobody drives.

A run whose process was killed stays ``running`` for ever, and anything it
owed (an effect above all) with it. The run's lease says whether anyone is
still there, and it is asked first, always:

* **the lease is held** — the run is merely slow: it is left alone, deadline
  or not (settling it would run its compensations beside the work they undo);
* **the lease can be taken** — its holder is gone. Under the lease, the run
  goes back to ``suspended`` with a ``reap`` event saying why, and the same
  sweep then resumes it (re-driving owed effects);
* **gone, and past** ``deadlineAt`` — it is settled ``failed``: it ran out of
  time, and whatever waits on it needs an answer. Settling is irreversible,
  so it also needs the build's graph to match the run's; handing a run back
  to ``suspended`` is reversible and asks only that the run is this build's.

Either way the dead holder's claims that the record lists are released with
their recorded tokens: nobody holds them any more, and the resumed run takes
its locks again. A run left ``cancelling`` by a process that died mid-walk has its
walk resumed — the compensations not yet recorded done run, none twice — and
ends ``intendedTerminal`` (``cancelled`` if none was recorded); a run settled
``failed`` past its deadline gets its compensations the same way (the build
is loaded with the run's recorded parameters to run them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from zuke._clock import Clock, iso, parse_iso
from zuke._engine.claims import lease_key
from zuke._engine.plan import TargetSpec
from zuke.state._protocol import LockAcquired, LockHolder, StateStore
from zuke.state.records import RunDelta, RunEvent, RunRecord, RunStatus
from zuke.state.update import Updated, update_run

if TYPE_CHECKING:
    from zuke._build import Build

#: How long the sweep holds a dead run's lease while it reaps it.
REAP_TTL_MS = 60_000

#: ``stopped``: the run's walk could not go on (another process holds it); ``unchanged``: a
#: lost race (the run moved meanwhile), which a sweep does not report
ReapAction = Literal["returned", "settled", "finished", "live", "stopped", "unchanged"]


@dataclass(frozen=True)
class Reaped:
    """What reaping did with one run; ``status`` is the run's status afterwards."""

    run_id: str
    action: ReapAction
    status: RunStatus
    detail: str


def past_deadline(record: RunRecord, now_ms: int) -> bool:
    """A malformed or absent ``deadlineAt`` is never past."""
    deadline = parse_iso(record.deadline_at) if record.deadline_at else None
    return deadline is not None and deadline <= now_ms


def graph_matches(record: RunRecord, specs: Mapping[str, TargetSpec]) -> bool:
    """The build has every target of the run, with the same dependencies."""
    return all(
        node.name in specs and set(specs[node.name].depends_on) == set(node.depends_on)
        for node in record.graph
    )


def reap_run(
    store: StateStore,
    run_id: str,
    *,
    specs: Mapping[str, TargetSpec],
    actor: str,
    clock: Clock,
    build: type[Build],
    env: Mapping[str, str],
) -> Reaped:
    """Reap one ``running`` or ``cancelling`` run if its holder is gone.

    A ``cancelling`` run and a run past its deadline are settled with their
    compensation walk (:mod:`zuke.runs.compensate`); any other goes back to
    ``suspended``.
    """
    now_ms = clock.now_ms()
    holder = LockHolder(actor, run_id, iso(now_ms))
    taken = store.acquire_lock(lease_key(run_id), holder, REAP_TTL_MS)
    if not isinstance(taken, LockAcquired):
        return Reaped(run_id, "live", "running", f"held by {taken.holder.actor}: left alone")
    try:
        found = store.get_run(run_id)
        record = found.record if found is not None else None
        if record is not None:
            walked = _walk_if_due(store, record, taken, specs=specs, build=build, env=env,
                                  actor=actor, clock=clock)  # fmt: skip
            if walked is not None:
                return walked
        return _return_to_suspended(store, run_id, actor=actor, now_ms=now_ms)
    finally:
        store.release_lock(lease_key(run_id), taken.token)


def _walk_if_due(
    store: StateStore,
    record: RunRecord,
    taken: LockAcquired,
    *,
    specs: Mapping[str, TargetSpec],
    build: type[Build],
    env: Mapping[str, str],
    actor: str,
    clock: Clock,
) -> Reaped | None:
    """Finish a ``cancelling`` run's walk, or settle a run past its deadline ``failed``
    with its compensations; ``None`` when neither applies."""
    from zuke.runs.compensate import run_sync, walk_taken

    now = iso(clock.now_ms())
    if record.status == "cancelling":
        final = record.intended_terminal or "cancelled"
        why = f"finished {final}: the process cancelling it was gone (its walk resumed)"
        intended: RunStatus = final
        action: ReapAction = "finished"
        reason = f"the run was {final}"
    elif record.status == "running" and past_deadline(record, clock.now_ms()):
        if not graph_matches(record, specs):
            return None
        why = (
            f"settled failed with its compensations: its lease had lapsed and its deadline "
            f"({record.deadline_at}) passed"
        )
        intended, action = "failed", "settled"
        reason = "abandoned past the run's deadline"
    else:
        return None
    event = RunEvent(at=now, tool="reap", actor=actor, detail=why)
    result, _, _ = run_sync(
        walk_taken(store, record, taken, ttl_ms=REAP_TTL_MS, build=build, env=env, actor=actor,
                   clock=clock, intended=intended, reason=reason,
                   first=(event,))
    )  # fmt: skip
    if result.stopped is not None:
        return Reaped(record.id, "stopped", result.status, result.stopped)
    return Reaped(record.id, action, result.status, why)


def _return_to_suspended(store: StateStore, run_id: str, *, actor: str, now_ms: int) -> Reaped:
    """A ``running`` run whose holder is gone goes back to ``suspended``, for a resume."""
    now = iso(now_ms)
    outcome: dict[str, Reaped] = {}
    tokens: dict[str, str] = {}

    def change(record: RunRecord) -> RunDelta | None:
        # The dead holder's claims go with it (a resumed run takes its locks again).
        tokens.clear()
        tokens.update({k: v for k, v in record.locks.items() if k != lease_key(run_id)})
        if record.status != "running":  # e.g. marked cancelling meanwhile: the next sweep
            outcome["r"] = Reaped(run_id, "unchanged", record.status, "no longer running")
            return None
        why = "returned to suspended: its lease had lapsed (its process is gone)"
        outcome["r"] = Reaped(run_id, "returned", "suspended", why)
        return RunDelta(
            updated_at=now,
            status="suspended",
            locks=dict.fromkeys(record.locks),
            events=(RunEvent(at=now, tool="reap", actor=actor, detail=why),),
        )

    result = update_run(store, run_id, change)
    if isinstance(result, Updated):
        for key, token in sorted(tokens.items()):
            store.release_lock(key, token)
    found = outcome.get("r")
    if found is None or (not isinstance(result, Updated) and found.action != "unchanged"):
        return Reaped(run_id, "unchanged", result.record.status, "changed while being reaped")
    return found
