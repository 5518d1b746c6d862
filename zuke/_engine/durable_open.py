"""Opening a fresh run's durable side: the store it needs (or none), its lease, then its
first record — in that order, so a record that says ``running`` always has a live holder
(:mod:`zuke._engine.durable` owns the run from there; a resume adopts one instead)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._engine.cancel_watch import poll_interval_s
from zuke._engine.claims import acquire_lease, lease_key, lease_ttl_ms, on_loop
from zuke._engine.context import RunState
from zuke._engine.durable import DurableRun
from zuke._engine.plan import Plan, requires_state
from zuke._engine.record import ci_run_url, deadline_at, new_record
from zuke._engine.writer import RunStateWriter
from zuke._errors import StateError
from zuke.state._protocol import LockHeld, LockHolder, StateStore
from zuke.state.resolve import resolve_store


def needs_state(plan: Plan) -> bool:
    """Whether a feature of the plan needs a store even without ``--state``.

    A fan-out does: its items may hold gates, locks or compensations that are
    known only once it runs, and its per-item verdicts belong in the record.
    (With ``ZUKE_STATE=off`` a fan-out still runs; one whose stages need a store
    fails when its items are read, before any runs.)
    """
    return any(requires_state(spec) or spec.fan_out is not None for spec in plan.specs.values())


async def open_run(
    *,
    build_name: str,
    override: StateStore | None,
    deadline: str | int | None,
    plan: Plan,
    roots: list[str],
    params: Mapping[str, str],
    state: RunState,
    env: Mapping[str, str],
    clock: Clock,
    required: bool,
    cwd: Path | None,
    warn: Callable[[str], None],
    loop_is_the_runs: bool = False,
) -> DurableRun | None:
    """Take the lease, then write the first record; ``None`` for a stateless run.

    ``loop_is_the_runs`` (``RunOptions.inline``): on a local store the lease, the record's
    creation and end, and the lease's release are made on the loop's thread
    (:func:`~zuke._engine.claims.on_loop`)."""
    if env.get("ZUKE_STATE", "") == "off" and override is None:
        if any(requires_state(spec) for spec in plan.specs.values()):
            raise StateError(
                "this run needs a state store (a target uses .lock(), .waits_for(), "
                ".effect() or .on_cancel()), but ZUKE_STATE=off disables it; "
                "unset ZUKE_STATE to run it"
            )
        return None
    store = resolve_store(
        override=override, env=env, required=required or needs_state(plan), cwd=cwd
    )
    if store is None:
        return None
    now = clock.now_ms()
    record = new_record(
        run_id=state.run_id,
        build=build_name,
        plan=plan,
        roots=roots,
        params=params,
        actor=state.actor,
        actor_source=state.actor_source,
        now_ms=now,
        env=env,
        deadline=deadline_at(deadline, now),
    )
    ttl = lease_ttl_ms(env, store)
    poll_s = poll_interval_s(env)  # a bad value fails here, before the lease is taken
    holder = LockHolder(state.resumed_by, state.run_id, iso(now), ci_run_url(env))
    since = SYSTEM_CLOCK.now_ms()  # the store's expiry is at least this plus the TTL
    here = on_loop(store, loop_is_the_runs)
    taken = await acquire_lease(store, state.run_id, holder, ttl_ms=ttl, here=here)
    if isinstance(taken, LockHeld):
        raise StateError(f"run id {state.run_id} is already leased; the id was reused")
    record = replace(record, locks={lease_key(state.run_id): taken.token})
    writer = RunStateWriter(
        store, record, version=None, run_state=state, clock=clock,
        redactor=state.redactor, warn=warn,
    )  # fmt: skip
    writer.at_ends_here = here
    run = DurableRun.with_lease(store, writer, taken, ttl, state=state, env=env, clock=clock,
                          warn=warn, since_ms=since)  # fmt: skip
    run.lease.release_here = here
    try:
        await writer.create()
    except BaseException:
        await run.lease.release()
        raise
    run.start(poll_s)
    return run
