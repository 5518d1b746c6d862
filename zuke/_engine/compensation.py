"""Compensations (``on_cancel``): which run, in what order, and running one.

Pure engine logic over a run record, shared by every way a run is cancelled
(:mod:`zuke.runs.compensate` drives the walk and records it):

* **which** — a target's compensation runs if and only if the record says
  the target ``succeeded``; on a ``degraded`` record (a write was lost, so a
  success may be missing) every target not recorded ``failed`` or
  ``skipped`` is compensated instead, and the walk says so;
* **order** — reverse topological order of the run's plan, ordering edges
  (``extra_edges`` and ``order_with``) included: later work is unwound
  before what it was built on;
* **running one** — the compensation target's body, sync on a thread or
  async, with its own ``timeout`` and ``retry``; its ``ctx.state`` is the
  *original* target's recorded meta (writes stay in memory), and it is never
  told to stop by the cancel it is part of.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from zuke._engine.context import Context, RunState, StateHandle
from zuke._engine.executor import BodyFailure, run_body
from zuke._engine.plan import TargetSpec
from zuke._redact import Redactor
from zuke.state.records import RunRecord

#: the audit event written once per compensation attempted (``args``: target, compensation)
COMPENSATE_EVENT = "compensate"
DEGRADED_NOTE = (
    "the run record is incomplete (degraded): compensating every target not recorded "
    "failed or skipped, since a success may not have been recorded"
)


@dataclass(frozen=True)
class Step:
    """One compensation to run: ``compensation`` undoes ``target``."""

    target: str
    compensation: str


@dataclass(frozen=True)
class StepOutcome:
    step: Step
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def eligible(record: RunRecord, name: str) -> bool:
    """Whether ``name``'s compensation runs: it succeeded (degraded: not failed or skipped)."""
    row = record.targets.get(name)
    if record.degraded:
        return row is None or row.status not in ("failed", "skipped")
    return row is not None and row.status == "succeeded"


def done_steps(record: RunRecord) -> set[str]:
    """The targets whose compensation is recorded done (attempted, whatever it did)."""
    return {
        e.args["target"] for e in record.events if e.tool == COMPENSATE_EVENT and "target" in e.args
    }


def plan_steps(
    record: RunRecord, specs: Mapping[str, TargetSpec], order: Iterable[str]
) -> list[Step]:
    """The compensations of the run, in walk order; ``order`` is the plan's topological order."""
    names = list(dict.fromkeys(order))
    # Rows the plan does not know (a timed-out gate's rollback target) ran last: they go first.
    extra = [n for n in record.targets if n not in names]
    steps = []
    for name in [*reversed(extra), *reversed(names)]:
        spec = specs.get(name)
        if spec is None or spec.on_cancel is None or not eligible(record, name):
            continue
        steps.append(Step(name, spec.on_cancel))
    return steps


class CompensationContext(Context):
    """``ctx`` of a compensation: its ``ctx.state`` is the original target's."""

    def __init__(
        self,
        run: RunState,
        target: str,
        original: str,
        cancelled: threading.Event | None = None,
    ) -> None:
        super().__init__(run, target, cancelled=cancelled)
        self.original = original
        self.state = StateHandle(run, original)

    def for_attempt(self) -> Context:
        return CompensationContext(self._run, self.target, self.original, self._run.attempt_event())


def walk_state(record: RunRecord, *, actor: str, redactor: Redactor) -> RunState:
    """The in-memory state compensations see: every target's recorded meta, nothing persisted."""
    meta: dict[str, Mapping[str, Any]] = {n: row.meta for n, row in record.targets.items()}
    return RunState(
        run_id=record.id,
        actor=actor,
        redactor=redactor,
        signals=record.signals,
        meta=meta,
        params=dict(record.params),
    )


async def run_step(
    step: Step,
    specs: Mapping[str, TargetSpec],
    state: RunState,
    pool: ThreadPoolExecutor,
    notify: Callable[[str], None] = lambda message: None,
) -> StepOutcome:
    """Run one compensation; a failure is returned (redacted), never raised."""
    spec = specs.get(step.compensation)
    if spec is None:
        return StepOutcome(
            step, f"compensation {step.compensation!r} is not a target of this build"
        )
    if spec.body is None:
        return StepOutcome(step)  # an aggregate or a gate: nothing to run
    ctx = CompensationContext(state, step.compensation, step.target)
    try:
        await run_body(spec, ctx, pool, notify)
    except BodyFailure as failure:
        return StepOutcome(step, state.redactor.text(failure.message))
    return StepOutcome(step)
