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
* **fan-outs** — a fan-out's items are re-materialised from the recorded
  parameters and matched to the record by sub-target name; every item that
  succeeded *or was in flight* when the run stopped (``interrupted``) is
  compensated, items in reverse order, each item's stages in reverse, nested
  fan-outs inside out — all before the fan-out's own compensation;
* **running one** — the compensation target's body, sync on a thread or
  async, with its own ``timeout`` and ``retry``; its ``ctx.state`` is the
  *original* target's recorded meta (writes stay in memory), and it is never
  told to stop by the cancel it is part of;
* **at most once** — a compensation's intent (a ``compensating`` event) is
  recorded before it runs and its end (a ``compensate`` event) after: one
  with an intent and no end was interrupted (a crash, ``kill -9``) and may be
  partly done, so no later walk runs it again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from zuke._engine.context import Context, RunState, StateHandle
from zuke._engine.executor import BodyFailure, run_body
from zuke._engine.fan_out import SpecIndex
from zuke._engine.plan import Plan, TargetSpec
from zuke._errors import ZukeError
from zuke._fan_out import split_sub_name
from zuke._redact import Redactor
from zuke.state.records import RunRecord, TargetRecord

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

#: the audit event written once per compensation attempted (``args``: target, compensation)
COMPENSATE_EVENT = "compensate"
#: written before a compensation runs (same ``args``): without a ``compensate`` event after
#: it, the compensation was interrupted and is never run again
COMPENSATE_INTENT_EVENT = "compensating"
INTERRUPTED = "interrupted: may be partly done; not run again"
DEGRADED_NOTE = (
    "the run record is incomplete (degraded): compensating every target not recorded "
    "failed or skipped, since a success may not have been recorded"
)


@dataclass(frozen=True)
class Step:
    """One compensation to run: ``compensation`` undoes ``target``."""

    target: str
    compensation: str
    #: the compensation's spec (``None``: resolved from the plan by name)
    spec: TargetSpec | None = None
    #: why it cannot run (an item list that cannot be re-materialised): recorded as failed
    problem: str | None = None


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
        # A row the walk itself ended (interrupted) was running: its success may be lost.
        return row is None or row.status not in ("failed", "skipped") or row.interrupted
    return row is not None and row.status == "succeeded"


def item_eligible(record: RunRecord, name: str) -> bool:
    """A fan-out item's stage is compensated if it succeeded or was in flight when the run
    stopped (its work may be partly done)."""
    row = record.targets.get(name)
    if row is None:
        return False
    if row.status in ("succeeded", "running") or (row.status == "failed" and row.interrupted):
        return True
    return record.degraded and row.status not in ("failed", "skipped")


def _targets(record: RunRecord, tool: str) -> set[str]:
    return {e.args["target"] for e in record.events if e.tool == tool and "target" in e.args}


def done_steps(record: RunRecord) -> set[str]:
    """The targets whose compensation is recorded done (attempted, whatever it did)."""
    return _targets(record, COMPENSATE_EVENT)


def interrupted_steps(record: RunRecord) -> set[str]:
    """The targets whose compensation was started and never recorded done: it may have
    run in part (its walker crashed), so it must not run again."""
    return _targets(record, COMPENSATE_INTENT_EVENT) - done_steps(record)


async def walk_steps(record: RunRecord, plan: Plan) -> tuple[list[Step], list[str]]:
    """Every compensation of the run in walk order, fan-out items included; and notes.

    The order is the reverse of the plan's topological order; a fan-out's items
    unwind just before the fan-out's own compensation.
    """
    index = SpecIndex({**plan.declared, **plan.specs})
    notes: list[str] = []
    steps: list[Step] = []
    names = list(dict.fromkeys(plan.order))
    # Rows the plan does not know (a timed-out gate's rollback target) ran last: they go
    # first; a fan-out's sub-targets are walked with their fan-out.
    extra = [n for n in record.targets if n not in names and "[" not in n]
    for name in [*reversed(extra), *reversed(names)]:
        spec = plan.specs.get(name)
        if spec is None:
            continue
        if spec.fan_out is not None:
            steps += await _item_steps(record, spec, index, notes)
        if spec.on_cancel is not None and eligible(record, name):
            steps.append(Step(name, spec.on_cancel))
    return steps, notes


async def _item_steps(
    record: RunRecord, spec: TargetSpec, index: SpecIndex, notes: list[str]
) -> list[Step]:
    recorded = [
        n
        for n in record.targets
        if (split := split_sub_name(n)) is not None and split[0] == spec.name
    ]
    if not recorded:
        return []
    try:
        items = await index.items(spec)
    except ZukeError as exc:
        problem = f"its items could not be re-materialised ({exc})"
        return [Step(f"{spec.name}[*]", "its items' compensations", problem=problem)]
    twins = {name for item in items for name in item.names}
    for name in recorded:
        if name not in twins:
            notes.append(
                f"{name} is recorded but has no twin in the re-materialised fan-out (is the "
                "item list deterministic?); it is not compensated"
            )
    steps: list[Step] = []
    for item in reversed(items):
        for stage in reversed(item.stages):
            if stage.fan_out is not None:
                steps += await _item_steps(record, stage, index, notes)
            if stage.on_cancel is None or not item_eligible(record, stage.name):
                continue
            comp = stage.compensation or index.known(stage.on_cancel)
            steps.append(Step(stage.name, stage.on_cancel, spec=comp))
    return steps


def ended_rows(record: RunRecord, reason: str, now: str) -> dict[str, TargetRecord]:
    """Rows of a stopped run: running ones failed (and ``interrupted``)."""
    return {
        name: replace(row, status="failed", error=reason, ended_at=now, interrupted=True)
        for name, row in record.targets.items()
        if row.status == "running"
    }


def unreached_rows(record: RunRecord, now: str) -> dict[str, TargetRecord]:
    """Rows a cancelled run never reached, skipped — only when the run is settled, so that
    a walk resumed after a crash still sees them pending (a degraded record's walk
    compensates those)."""
    return {
        name: replace(row, status="skipped", ended_at=now, waiting_for=None)
        for name, row in record.targets.items()
        if row.status in ("pending", "waiting")
    }


class CompensationContext(Context):
    """``ctx`` of a compensation: its ``ctx.state`` is the original target's."""

    def __init__(
        self,
        run: RunState,
        target: str,
        original: str,
        cancelled: threading.Event | None = None,
        *,
        attempt: bool = False,
    ) -> None:
        super().__init__(run, target, cancelled=cancelled, attempt=attempt)
        self.original = original
        self.state = StateHandle(run, original)

    def for_attempt(self) -> Context:
        return CompensationContext(self._run, self.target, self.original, attempt=True)


def walk_state(record: RunRecord, *, actor: str, redactor: Redactor) -> RunState:
    """The in-memory state compensations see: every target's recorded meta, nothing persisted.
    ``ctx.actor`` is the run's starter; ``actor`` (the walker) is ``ctx.resumed_by``."""
    meta: dict[str, Mapping[str, Any]] = {n: row.meta for n, row in record.targets.items()}
    return RunState(
        run_id=record.id,
        actor=record.actor,
        actor_source=record.actor_source,
        resumed_by=actor,
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
    if step.problem is not None:
        return StepOutcome(step, step.problem)
    spec = step.spec or specs.get(step.compensation)
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
