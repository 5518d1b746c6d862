"""A gate whose trigger failed (``WaitFailed``: a ``/deny``, a failed workflow): its
``on_failure`` disposition, settled under the run's lease.

The dispositions are a timeout's (:mod:`zuke.runs.timeouts`), on the same
paths: ``"fail"`` (default) fails the run, ``"cancel-run"`` walks its
compensations, a target runs instead (a rollback), then the run is
``cancelled``. The gate's row records the failure's reason either way.

Who settles it: a sweep whose check got the failure, or — when the process
driving the run got it — that process cancels in place (``"cancel-run"``) or
parks the gate with the failure recorded (``waitingFor.failed``) and hands
the run over: it suspends, and whoever holds it next (the same command
continuing it at once, or the next sweep) settles the disposition without
asking the trigger again.
"""

from __future__ import annotations

from zuke._clock import iso
from zuke._engine.run import LoadedBuild, RunOptions
from zuke.runs.lifecycle import Hold
from zuke.runs.outcome import ResumeOutcome
from zuke.runs.timeouts import FAILED_EVENT, Settlement, apply_disposition, check_rollback
from zuke.state.records import RunEvent, RunRecord


def failed_gate(record: RunRecord) -> tuple[str, str] | None:
    """The first waiting gate whose failure was recorded for the next holder: (gate, reason)."""
    for name, row in record.targets.items():
        waiting = row.waiting_for
        if row.status == "waiting" and waiting is not None and waiting.failed is not None:
            return name, waiting.failed
    return None


def _still_waiting(gate: str, fresh: RunRecord) -> bool:
    row = fresh.targets.get(gate)
    return fresh.status == "suspended" and row is not None and row.status == "waiting"


async def settle_failed_gate(
    loaded: LoadedBuild, hold: Hold, gate: str, reason: str, run: RunOptions, *, actor: str
) -> ResumeOutcome:
    """The gate failed (``reason``): apply its ``on_failure`` disposition (the build's)."""
    spec = await loaded.index.get(gate)
    wait = spec.wait if spec is not None else None
    disposition, is_target = (
        (wait.on_failure, wait.on_failure_is_target) if wait is not None else ("fail", False)
    )
    event = RunEvent(
        at=iso(run.clock.now_ms()),
        tool=FAILED_EVENT,
        actor=actor,
        detail=f"gate {gate!r}: {reason}",
        args={"gate": gate, "onFailure": disposition},
    )
    settlement = Settlement(
        gate, disposition, is_target, reason, event, "gate-failed",
        lambda fresh: _still_waiting(gate, fresh),
    )  # fmt: skip
    check_rollback(loaded, hold.run_id, settlement)
    return await apply_disposition(loaded, hold, settlement, run, actor=actor, notes=[])


__all__ = ["failed_gate", "settle_failed_gate"]
