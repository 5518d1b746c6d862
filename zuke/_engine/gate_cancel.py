"""Telling each gate still waiting that its run is cancelled: ``WaitTrigger.on_cancel``.

A gate may have started something outside zuke that outlives the run (``github_workflow``
dispatched a workflow run). When the run is cancelled — by ``zuke cancel`` (of a suspended
run, of a gone owner's, or of a live owner's: the owner does it), Ctrl-C, MCP's
``cancel_run``, a gate's ``"cancel-run"`` disposition, a sweep finishing an interrupted
walk — every gate still ``waiting`` is told once, under the run's lease, before the
compensations run (:mod:`zuke._engine.walk` calls :func:`ask`; a timeout's rollback, which
skips the other waiting gates before it runs, calls it too). What the hook answers, or the
exception it raised, is recorded in the run's events (:data:`GATE_CANCEL_EVENT`, one per
gate); a gate with that event is never asked again — so a walk taken over after a crash
asks only those not yet recorded, and a hook whose answer was lost to the crash is asked
again (at least once: ``github_workflow`` then hears GitHub's 409, "already finished").
A hook that raises or hangs never stops the cancel.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from zuke._clock import Clock, parse_iso
from zuke._engine.claims import Claim
from zuke._engine.plan import TargetSpec
from zuke._redact import Redactor
from zuke._waits import GateState, WaitContext
from zuke.state.records import RunDelta, RunEvent, RunRecord

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

#: the run's event for one gate told of the cancel (``args.gate``; ``detail``: its answer)
GATE_CANCEL_EVENT = "gate-cancel"
#: how long a trigger's ``on_cancel`` may take before the cancel goes on without it
CANCEL_HOOK_S = 60.0


@dataclass(frozen=True)
class GateHooks:
    """What it takes to ask a run's gates: their specs (a fan-out's items included), the
    parameters a trigger sees, the run's redactor, and who is cancelling (this process)."""

    find: Callable[[str], Awaitable[TargetSpec | None]]
    params: Mapping[str, Any]
    redactor: Redactor
    resumed_by: str


@dataclass(frozen=True)
class Told:
    """One gate told of the cancel: what it answered, or why it could not."""

    gate: str
    answer: str | None
    error: str | None = None


def waiting_gates(record: RunRecord) -> list[str]:
    """The gates waiting when the run was cancelled that no earlier walk recorded as told:
    rows still ``waiting``, and rows the cancelled run's own process skipped while they
    waited (they keep their ``waitingFor``)."""
    told = {e.args.get("gate") for e in record.events if e.tool == GATE_CANCEL_EVENT}
    return [
        name
        for name, row in record.targets.items()
        if row.status in ("waiting", "skipped") and row.waiting_for is not None and name not in told
    ]


async def _persist() -> None:
    return None  # nothing a cancel hook writes is kept (as for on_timeout)


def context(record: RunRecord, gate: str, hooks: GateHooks, now_ms: int) -> WaitContext:
    """The trigger's context from the record: its state read-only, the run's starter, the
    canceller as ``resumed_by``."""
    row = record.targets[gate]
    meta = dict(row.meta)
    deadline = row.waiting_for.deadline if row.waiting_for else None
    return WaitContext(
        run_id=record.id,
        target=gate,
        params=hooks.params,
        signals=record.signals,
        state=GateState(lambda: dict(meta), lambda patch: None),
        now_ms=now_ms,
        deadline_ms=parse_iso(deadline) if deadline else None,
        persist=_persist,
        actor=record.actor,
        actor_source=record.actor_source,
        resumed_by=hooks.resumed_by,
        redact=hooks.redactor.text,
    )


async def ask(record: RunRecord, gate: str, hooks: GateHooks, now_ms: int) -> Told | None:
    """Call ``gate``'s ``trigger.on_cancel`` once; never raises (the cancel goes on).
    ``None``: not a gate (a fan-out parked on its items)."""
    text = hooks.redactor.text
    try:
        spec = await hooks.find(gate)
    except Exception as exc:  # a fan-out whose items cannot be read again
        return Told(gate, None, text(f"its on_cancel hook was not called: {exc}"))
    if spec is None:
        return Told(gate, None, "its on_cancel hook was not called: the build has no such gate")
    if spec.wait is None:
        return None  # a fan-out parked on its items' gates: each item's gate is told
    ctx = context(record, gate, hooks, now_ms)
    try:
        answer: Any = spec.wait.trigger.on_cancel(ctx)  # a user's hook may be sync
        if inspect.isawaitable(answer):
            answer = await asyncio.wait_for(answer, CANCEL_HOOK_S)
    except Exception as exc:
        what = "timed out" if isinstance(exc, TimeoutError) else f"raised {type(exc).__name__}"
        return Told(gate, None, text(f"its on_cancel hook {what}: {exc}".rstrip(": ")))
    return Told(gate, None if answer is None else text(str(answer)))


class Walker(Protocol):
    """What :func:`tell` needs of the walk (:class:`zuke._engine.walker.Walker`)."""

    run_id: str
    lease: Claim
    clock: Clock

    async def prove(self) -> bool: ...

    def lapsed(self) -> bool: ...

    def ours(self, record: RunRecord) -> bool: ...

    async def write(self, change: Callable[[RunRecord], RunDelta | None]) -> RunRecord | None: ...

    def event(self, tool: str, detail: str, *, outcome: str = "ok", **args: str) -> RunEvent: ...


class Said(Protocol):
    """Where :func:`tell` puts what the gates said (the walk's result)."""

    notes: list[str]
    gates: list[str]


async def tell(
    w: Walker,
    claim: Claim,
    record: RunRecord,
    gates: GateHooks | None,
    result: Said,
    notify: Callable[[str], None],
) -> Literal["taken", "unproven"] | None:
    """Each gate still waiting is told of the cancel (its trigger's ``on_cancel``), under the
    lease proven just before, ahead of any compensation; what it answered is recorded as its
    event, while the record is ``cancelling`` and names the walker's lease. Why the walk
    must stop (its lease taken over, or not proven), or ``None``."""
    waiting = waiting_gates(record)
    if not waiting:
        return None
    if gates is None:
        note = f"no build here: gates {', '.join(waiting)} were not told of the cancel"
        result.notes.append(note)
        notify(f"Run {w.run_id}: {note}")
        return None
    for gate in waiting:
        if w.lease.lost.is_set() or claim.lost.is_set():
            return "taken"
        if not await w.prove():
            return "unproven"
        told = await ask(record, gate, gates, w.clock.now_ms())
        if told is None:
            continue
        if w.lease.lost.is_set() or w.lapsed():
            return "taken"  # its answer is not recorded: the next walk asks again
        said = told.error or told.answer
        event = w.event(GATE_CANCEL_EVENT, said or "nothing to do",
                        outcome="error" if told.error else "ok", gate=gate)  # fmt: skip

        def append(fresh: RunRecord, event: RunEvent = event) -> RunDelta | None:
            if fresh.status != "cancelling" or not w.ours(fresh):
                return None
            return RunDelta(updated_at=event.at, events=(event,))

        if await w.write(append) is None:
            return "taken"
        if said:
            line = f"gate {gate!r}: {said}"
            result.gates.append(line)
            notify(f"Run {w.run_id}: {line}")
    return None


__all__ = [
    "CANCEL_HOOK_S",
    "GATE_CANCEL_EVENT",
    "GateHooks",
    "Told",
    "Walker",
    "ask",
    "tell",
    "waiting_gates",
]
