"""Going on with a run that another process started: the engine side of ``zuke resume``.

The resumer (:mod:`zuke.runs.resume`) decides *whether* to resume — status,
graph, lease, the compare-and-swap out of ``suspended`` — and hands over the
adopted record and the lease it took. This module rebuilds the run's plan
from the record, seeds what earlier processes did (succeeded targets are
done and never run again; metadata, signals and outcomes are as recorded)
and drives the rest, exactly as a fresh run would.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from zuke._engine.context import RunState
from zuke._engine.drive import drive
from zuke._engine.durable import DurableRun
from zuke._engine.plan import Plan, make_plan
from zuke._engine.reporters import reporters_of
from zuke._engine.result import Outcome, RunResult, RunVerdict
from zuke._engine.run import LoadedBuild, RunOptions, ordering_edges
from zuke._reporting import RunReporter
from zuke.state._protocol import LockAcquired, StateStore, StoredRun
from zuke.state.records import RunRecord

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


@dataclass(frozen=True)
class Adoption:
    """What a resumer hands the engine: the record (now ``running``) and the lease it holds."""

    store: StateStore
    found: StoredRun
    lease: LockAcquired
    #: when the lease was last proven (a renewal's or the acquisition's start): the
    #: engine's heartbeat counts its stop point from there, not from the hand-over
    since_ms: int | None = None


async def plan_of(loaded: LoadedBuild, record: RunRecord) -> Plan:
    """The run's plan, rebuilt from the build for the targets the record planned."""
    names = [n.name for n in record.graph if n.name in loaded.graph.specs]
    skipped = [n for n in names if record.targets.get(n) and record.targets[n].status == "skipped"]
    edges = await ordering_edges(loaded.build, loaded.graph)
    return make_plan(loaded.graph, names or [record.root_target], skip=skipped, ordering=edges)


def graph_drift(record: RunRecord, plan: Plan) -> list[str]:
    """How the build's graph differs from the run's: added, removed or re-wired targets."""
    recorded = {n.name: tuple(n.depends_on) for n in record.graph}
    current = {name: tuple(plan.hard[name]) for name in plan.order}
    drift = [f"{name} was removed" for name in recorded if name not in current]
    drift += [f"{name} was added" for name in current if name not in recorded]
    drift += [
        f"{name} now depends on {', '.join(current[name]) or 'nothing'} "
        f"(was {', '.join(recorded[name]) or 'nothing'})"
        for name in current
        if name in recorded and set(current[name]) != set(recorded[name])
    ]
    return drift


def prior_outcomes(record: RunRecord) -> dict[str, Outcome]:
    """The targets earlier processes settled, as ``ctx.outcome_of`` reports them."""
    return {
        name: Outcome(
            status=row.status, error=row.error, started_at=row.started_at, ended_at=row.ended_at
        )
        for name, row in record.targets.items()
        if row.status in ("succeeded", "failed", "skipped")
    }


async def execute_resumed(
    loaded: LoadedBuild,
    plan: Plan,
    adoption: Adoption,
    options: RunOptions,
    *,
    actor: str,
    settle_as: RunVerdict | None = None,
    walk_plan: Plan | None = None,
) -> RunResult:
    """Drive the rest of an adopted run; the lease is released on every way out. ``actor``
    is this process's (``ctx.resumed_by``); ``ctx.actor`` stays the run's starter."""
    started = time.perf_counter()
    record = adoption.found.record
    prior = prior_outcomes(record)
    state = RunState(
        run_id=record.id,
        actor=record.actor,  # who started it, in every process
        actor_source=record.actor_source,
        resumed_by=actor,
        redactor=loaded.redactor,
        params=loaded.public_params,
        signals=record.signals,
        meta={name: row.meta for name, row in record.targets.items()},
        prior=prior,
        redriven=frozenset(
            name
            for name, row in record.targets.items()
            if row.status == "running" or any(e.status != "done" for e in row.effects.values())
        ),
    )
    durable = DurableRun.adopt(
        store=adoption.store,
        found=adoption.found,
        lease=adoption.lease,
        since_ms=adoption.since_ms,
        state=state,
        env=options.env,
        clock=options.clock,
        warn=options.on_warning,
    )
    done: Mapping[str, Outcome] = {n: o for n, o in prior.items() if o.status == "succeeded"}
    return await drive(
        plan,
        state=state,
        durable=durable,
        options=options,
        started=started,
        done=done,
        earlier=prior,
        settle_as=settle_as,
        walk_plan=walk_plan,
        reporters=_reporters(loaded),
    )


def _reporters(loaded: LoadedBuild) -> list[RunReporter]:
    return reporters_of(loaded.build)
