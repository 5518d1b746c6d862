"""Whether a gate timed out: its deadline against when its answer was given.

Apart from :mod:`zuke.runs.timeouts` (settling a disposition, under the run's lease) because
this is a rule on the record alone, asked by a resume before it delivers a signal, by the
sweep, and again on the fresh record under the lease before a timeout is written.

**An answer versus a timeout is decided by when it was given, not by who looks
first.** A signal *received* before the deadline passes the gate even when the sweep or
resume that sees it runs long after; one received after does not save it, and once a
timeout is settled a late signal is refused with a message naming it
(:func:`timeout_refusal`).
"""

from __future__ import annotations

from dataclasses import replace

from zuke._clock import has_passed, parse_iso
from zuke.state.records import RunRecord, TargetRecord

#: the audit trail's event of a gate that timed out (its ``args``: the gate, ``onTimeout``)
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
        if has_passed(waiting.deadline, now_ms) and not signal_wins(record, row):
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


def timed_out_error(record: RunRecord, gate: str) -> str:
    row = record.targets[gate]
    deadline = row.waiting_for.deadline if row.waiting_for else None
    return f'wait "{gate}" timed out (deadline {deadline})'


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


__all__ = [
    "TIMEOUT_EVENT",
    "expired_gate",
    "signal_wins",
    "still_expired",
    "timed_out_error",
    "timeout_refusal",
]
