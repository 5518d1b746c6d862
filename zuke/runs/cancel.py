"""``zuke cancel``: end a run from any process and give back what it holds.

The canceller moves the record to ``cancelled`` with a compare-and-swap, then
releases every claim the record lists (the run's lease and its targets'
locks) with the tokens the run recorded when it took them. A live owner
learns of it on its next renewal — refused, so the claim is lost and it stops
— or on its next write, which conflicts and re-reads a run that is no longer
running. Compensations (``on_cancel``) are not run here yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._errors import RunError, RunNotFoundError, StateError
from zuke.state._ids import check_id
from zuke.state._protocol import Conflict, StateStore
from zuke.state.records import (
    TERMINAL_STATUSES,
    RunDelta,
    RunEvent,
    RunRecord,
    RunStatus,
    TargetRecord,
    apply_delta,
)

MAX_ATTEMPTS = 10


class ForeignRunError(RunError):
    """The run belongs to another build."""


@dataclass(frozen=True)
class CancelResult:
    run_id: str
    status: RunStatus
    noop: bool
    released: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_ownership(record: RunRecord, *, origin: str | None, build_name: str | None) -> None:
    """Refuse a run of another build. A missing origin on either side does not decide."""
    if origin and record.build_id and origin != record.build_id:
        raise ForeignRunError(
            f'run {record.id} belongs to build "{record.build_id}", not "{origin}"; '
            "set ZUKE_BUILD_ID to the same value everywhere this build runs",
            run_id=record.id,
        )
    if build_name and record.build != build_name:
        raise ForeignRunError(
            f"run {record.id} is a run of {record.build}, not of {build_name}", run_id=record.id
        )


def _stopped_rows(record: RunRecord, reason: str, now: str) -> dict[str, TargetRecord]:
    rows = {}
    for name, row in record.targets.items():
        if row.status == "running":
            rows[name] = replace(row, status="failed", error=reason, ended_at=now)
        elif row.status in ("pending", "waiting"):
            rows[name] = replace(row, status="skipped", ended_at=now, waiting_for=None)
    return rows


def cancel_run(
    store: StateStore,
    run_id: str,
    *,
    actor: str,
    origin: str | None = None,
    build_name: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> CancelResult:
    """Cancel ``run_id``; a run that already ended is a no-op."""
    check_id(run_id)
    for _ in range(MAX_ATTEMPTS):
        found = store.get_run(run_id)
        if found is None:
            raise RunNotFoundError(f'no run "{run_id}" in the store', run_id=run_id)
        record = found.record
        check_ownership(record, origin=origin, build_name=build_name)
        if record.status in TERMINAL_STATUSES:
            return CancelResult(run_id=run_id, status=record.status, noop=True)
        now = iso(clock.now_ms())
        held = dict(record.locks)
        event = RunEvent(
            at=now,
            tool="cancel",
            actor=actor,
            detail=f"cancelled by {actor}; released {len(held)} claim(s)",
            args={"released": ",".join(sorted(held))},
        )
        delta = RunDelta(
            updated_at=now,
            status="cancelled",
            targets=_stopped_rows(record, f"cancelled by {actor}", now),
            events=(event,),
            locks=dict.fromkeys(held),
        )
        outcome = store.put_run(apply_delta(record, delta), expected_version=found.version)
        if isinstance(outcome, Conflict):
            continue
        warnings = []
        for key, token in sorted(held.items()):
            try:
                store.release_lock(key, token)
            except StateError as exc:
                warnings.append(f"could not release {key} ({exc}); it lapses after its TTL")
        return CancelResult(
            run_id=run_id, status="cancelled", noop=False, released=sorted(held), warnings=warnings
        )
    raise RunError(f"gave up cancelling {run_id} after repeated conflicting writes", run_id=run_id)
