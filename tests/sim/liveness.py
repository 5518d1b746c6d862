"""Liveness: what is due happens. Checked once a seed's actors have all finished.

The safety invariants (:mod:`tests.sim.invariants`) say nothing happens twice. These
say that what should happen does — checked at the end of a seed, in two looks:

1. when the scheduler has no move left (every actor finished, crashed or gone), a
   run parked with a signal stored for a gate that waits is a violation **unless the
   seed had a fault** (a crash, a stall, a cut-off or a lost answer) that may have
   taken the process that was to continue it: every holder of a run looks again
   after letting go (the owner that suspended it, a deliverer, a sweep), so with no
   fault nobody may leave a due signal behind;
2. then the **drain**: faults off, one more process sweeps (what ``zuke resume
   --check`` from cron does) every :data:`DRAIN_EVERY_MS` — past a lease's TTL, so a
   run whose owner is gone is reaped — until every run is settled or
   :data:`DRAIN_SWEEPS` sweeps ran. After it, whatever the faults were:

========================  ==============================================================
invariant                 what breaks it
========================  ==============================================================
signal-consumed           a run is parked with a signal stored for a gate that waits for
                          it (nobody continued it; after the drain, not even a sweep)
gate-once                 a signal gate passed while its own signal is not stored (it
                          was resumed for another gate's signal); passing twice is
                          ``succeeded-final``'s and ``body-once``'s
lease-live                a run is left ``running`` or ``cancelling`` after the drain:
                          nobody holds its lease, and a sweep past the lease's TTL did
                          not take it
item-scope                a fan-out item's gate passed while its own signal is not stored
                          (another item's signal resumed it); twice is ``body-once``'s
stated-reason             a run ends ``failed``/``cancelled`` with no reason recorded, or
                          waits (``suspended``) with no gate waiting
========================  ==============================================================
"""

from __future__ import annotations

import re

from tests.sim.invariants import Invariants
from zuke.runs.gate_failures import failed_gate
from zuke.runs.signals import due_signals
from zuke.state.records import TERMINAL_STATUSES, RunRecord

#: the drain sweeps this often (sim ms): past a lease's TTL (60 s), so a gone owner's
#: run is reaped by the next sweep
DRAIN_EVERY_MS = 75_000
#: at most this many drain sweeps (a workflow's 5 min, a gate's 2 min timeout, a lock's
#: TTL, with room)
DRAIN_SWEEPS = 12


def _signal_of(trigger: str) -> str | None:
    return trigger.removeprefix("signal:") if trigger.startswith("signal:") else None


def settled(record: RunRecord) -> bool:
    """Nothing is left for a sweep to do: the run ended, or it waits only for signals that
    have not come, with no deadline to keep."""
    if record.status in TERMINAL_STATUSES:
        return True
    if record.status != "suspended" or due_signals(record) or failed_gate(record) is not None:
        return False
    if not any(row.status == "waiting" for row in record.targets.values()):
        return False  # reaped, nothing waits: a sweep resumes it
    for row in record.targets.values():
        waiting = row.waiting_for
        if row.status != "waiting" or waiting is None:
            continue
        if waiting.deadline is not None or _signal_of(waiting.trigger) is None:
            return False
    return True


def before_drain(inv: Invariants, run_ids: list[str], *, faulted: bool) -> None:
    """The first look: with no fault in the seed, no run is parked with a due signal."""
    if faulted:
        return
    for run_id in run_ids:
        record = inv.record(run_id)
        due = due_signals(record) if record is not None and record.status == "suspended" else []
        if due:
            inv.fail("signal-consumed", f"run {run_id} is parked with {due[0]}'s signal stored, "
                     "and every actor finished with no fault: nobody continued it")  # fmt: skip


def after_drain(inv: Invariants, run_ids: list[str]) -> None:
    """The second look, after the drain's sweeps."""
    for run_id in run_ids:
        record = inv.record(run_id)
        if record is None:
            continue
        where = f"run {run_id} ({record.status})"
        due = due_signals(record) if record.status == "suspended" else []
        if due:
            inv.fail("signal-consumed", f"{where} is parked with {due[0]}'s signal stored, even "
                     "after the drain's sweeps")  # fmt: skip
        for name, row in sorted(record.targets.items()):
            wanted = _gate_signal(name)
            if row.status == "succeeded" and wanted is not None and wanted not in record.signals:
                inv.fail("gate-once", f"{where}: {name} passed with no {wanted!r} signal stored")
            wanted = _item_signal(name)
            if row.status == "succeeded" and wanted is not None and wanted not in record.signals:
                inv.fail("item-scope", f"{where}: {name} passed with no {wanted!r} signal stored "
                         "(another item's signal resumed it)")  # fmt: skip
        if record.status in ("running", "cancelling"):
            inv.fail("lease-live", f"{where} is left {record.status} after the drain: nobody "
                     "drives it, and a sweep past its lease's TTL did not take it")  # fmt: skip
        reason = _missing_reason(record)
        if reason is not None:
            inv.fail("stated-reason", f"{where} {reason}")


def _gate_signal(target: str) -> str | None:
    """The signal a gate of the sim's builds waits for (``gate_a`` waits for ``a``)."""
    return target.removeprefix("gate_") if target.startswith("gate_") else None


def _item_signal(target: str) -> str | None:
    """The signal a fan-out item's gate waits for (``batch[x].approve`` waits for ``go-x``)."""
    found = re.fullmatch(r"batch\[(.+)\]\.approve", target)
    return f"go-{found.group(1)}" if found else None


def _missing_reason(record: RunRecord) -> str | None:
    if record.status == "suspended":
        waiting = [r for r in record.targets.values() if r.status == "waiting" and r.waiting_for]
        return None if waiting else "waits with no gate waiting"
    if record.status in ("failed", "cancelled"):
        said = any(row.error for row in record.targets.values()) or any(
            event.detail or event.tool == "cancel" for event in record.events
        )
        return None if said else f"ended {record.status} with no reason recorded"
    return None
