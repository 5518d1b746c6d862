"""The record checks (``terminal-once``, ``succeeded-final``, ``fences-rise``,
``deadline-credit``, ``signal-known``, ``secret-never-stored``, ``finished-holds-nothing``):
made after every step of the scheduler on what the store holds, against what it held
before — apart from the ledger checks of :mod:`tests.sim.invariants`, made the moment
something external happens, whose state (an :class:`~tests.sim.invariants.Invariants`)
they share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuke._clock import parse_iso
from zuke.state.records import TERMINAL_STATUSES, RunRecord

if TYPE_CHECKING:
    from tests.sim.invariants import Invariants

#: a resume credits the time parked up to when it looked, not when its write landed
CREDIT_SLACK_MS = 30_000


def observe(inv: Invariants) -> None:
    """Check what the store holds now against what it held before."""
    stored = inv.view.runs()  # id -> (JSON, version)
    for run_id, (text, version) in sorted(stored.items()):
        if inv._seen.get(run_id) == version:
            continue
        inv._seen[run_id] = version
        record = inv.record(run_id)
        if record is None:
            continue
        if inv.secret in text:
            inv.fail("secret-never-stored", f"run {run_id}'s record holds the secret")
        unknown = sorted(set(record.signals) - inv.signals)
        if unknown:
            inv.fail("signal-known", f"run {run_id} stored the signal {unknown[0]!r}, which "
                     "no gate waits for")  # fmt: skip
        before = inv._status.get(run_id)
        if before in TERMINAL_STATUSES and record.status != before:
            inv.fail("terminal-once", f"run {run_id} went from {before} to {record.status}")
        inv._status[run_id] = record.status
        if record.status in TERMINAL_STATUSES:
            inv.ended.setdefault(run_id, record.status)
        _deadline(inv, record, before)
        inv.kept.update((run_id, key) for key in record.held)
        if record.status in TERMINAL_STATUSES and record.held:
            inv.fail("finished-holds-nothing", f"run {run_id} ended {record.status} "
                     f"keeping {sorted(record.held)} in its record")  # fmt: skip
        succeeded = inv._succeeded.setdefault(run_id, set())
        for name in sorted(succeeded):
            row = record.targets.get(name)
            if row is None or row.status != "succeeded":
                now = row.status if row is not None else "absent"
                inv.fail("succeeded-final", f"run {run_id}: {name} was recorded succeeded, "
                         f"now {now}")  # fmt: skip
        fresh = {n for n, r in record.targets.items() if r.status == "succeeded"} - succeeded
        for name in sorted(fresh):  # the runs of it so far finished, by the record
            for run in inv.bodies.get((run_id, name), []):
                if run.recorded is None:
                    run.recorded = next(inv._order)
        succeeded.update(fresh)
    for key, claim in sorted(inv.view.claims().items()):
        top = inv._fences.get(key, 0)
        if claim.fence < top:
            inv.fail("fences-rise", f"the fence of {key} went from {top} to {claim.fence}")
        inv._fences[key] = max(top, claim.fence)


def _deadline(inv: Invariants, record: RunRecord, before: str | None) -> None:
    """Track the time parked; a resume must credit it to the run's deadline."""
    now = inv.store.clock.now_ms()
    run_id = record.id
    if before is None:
        inv._first_deadline[run_id] = parse_iso(record.deadline_at or "")
    if record.status == "suspended" and before != "suspended":
        inv._suspended_at[run_id] = now
    if before == "suspended" and record.status != "suspended":
        since = inv._suspended_at.pop(run_id, now)
        inv._parked[run_id] = inv._parked.get(run_id, 0) + now - since
        first = inv._first_deadline.get(run_id)
        current = parse_iso(record.deadline_at or "")
        resumed = bool(record.events) and record.events[-1].tool == "resume"
        resumer = inv.actors.get(record.events[-1].actor) if record.events else None
        if resumer is not None and resumer.faulted:
            # A resumer stalled between deciding its write and making it credits the
            # time parked up to when it decided: its clock reading is as old as its stall.
            resumed = False
        if not resumed:  # a timeout's rollback, a cancel: judged from here on
            inv._first_deadline[run_id], inv._parked[run_id] = current, 0
        elif first is not None and current is not None:
            owed = first + inv._parked[run_id]
            if current < owed - CREDIT_SLACK_MS:
                short = (owed - current) // 1000
                inv.fail("deadline-credit", f"run {run_id} was resumed with its deadline "
                         f"{short} s short of the time it was parked")  # fmt: skip
