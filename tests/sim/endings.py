"""The end-of-seed safety checks: what a seed's record and store hold once every actor
finished (the liveness checks, after the drain, are :mod:`tests.sim.liveness`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuke.state.records import TERMINAL_STATUSES, RunRecord

if TYPE_CHECKING:
    from tests.sim.invariants import Invariants


def settle(inv: Invariants, compensated_targets: dict[str, str]) -> None:
    """At the end: a run that ended cancelled compensated every target it succeeded
    (``compensated_targets``: target -> its compensation); with no fault in the seed, a
    run that ended keeps no lock in the store."""
    now = inv.store.clock.now_ms()
    if not any(a.faulted for a in inv.actors.values()):
        for run_id, key in sorted(inv.kept):
            claim = inv.view.claim(key)
            if (
                inv._status.get(run_id) in TERMINAL_STATUSES
                and claim is not None
                and claim.is_live(now)
                and claim.holder is not None
                and claim.holder.run_id == run_id
            ):
                status = inv._status[run_id]
                inv.fail("finished-holds-nothing", f"run {run_id} ended {status} and "
                          f"still holds {key} in the store")  # fmt: skip
    for run_id in sorted(inv._status):
        record = inv.record(run_id)
        if record is None or record.status != "cancelled":
            continue
        for target in sorted(compensated_targets):
            row = record.targets.get(target)
            succeeded = row is not None and row.status == "succeeded"
            if succeeded and _interrupted(record, target):
                continue  # at most once: started by a walker that faulted, never re-run
            if succeeded and not inv.compensations.get((run_id, target)):
                inv.fail("compensation-iff", f"run {run_id} ended cancelled, and {target} "
                          "succeeded, but its compensation never ran")  # fmt: skip


def _interrupted(record: RunRecord, target: str) -> bool:
    """The record says ``target``'s compensation was started by a walker that never recorded
    its end (crashed, paused or cut off after its intent landed): at most once means it is
    not run again, and the operator is told it may be partly done."""
    return any(
        e.tool == "compensate"
        and e.args.get("target") == target
        and "interrupted" in (e.detail or "")
        for e in record.events
    )
