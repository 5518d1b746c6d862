"""A compensation runs at most once: its intent is recorded before it runs, and a walk
resumed after a crash mid-compensation never runs it again."""

from __future__ import annotations

import pytest

from tests.engine.walk_support import (
    LEASE_TTL_MS,
    Crash,
    chain_build,
    events,
    plan_of,
    record_of,
    running_run,
    take_lease,
    walk_now,
)
from zuke._clock import ManualClock
from zuke._engine.compensation import COMPENSATE_EVENT, COMPENSATE_INTENT_EVENT, INTERRUPTED
from zuke.state.memory import MemoryStateStore


def test_the_intent_is_recorded_before_the_compensation_runs_and_its_end_after() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    seen: list[tuple[str, list[tuple[str, str, str]]]] = []

    def undo(name: str) -> None:  # what the record says while the compensation runs
        seen.append((name, events(record_of(store), COMPENSATE_INTENT_EVENT, COMPENSATE_EVENT)))

    lease = take_lease(store, clock, "owner")
    running_run(store, lease)
    result = walk_now(store, clock, lease, plan_of(chain_build(undo)), "owner")
    assert result.status == "cancelled" and result.stopped is None
    intent, done = COMPENSATE_INTENT_EVENT, COMPENSATE_EVENT
    assert seen == [
        ("unmigrate", [(intent, "migrate", "ok")]),
        ("undeploy", [(intent, "migrate", "ok"), (done, "migrate", "ok"),
                      (intent, "deploy", "ok")]),
    ]  # fmt: skip
    assert events(record_of(store), intent, done)[-1] == (done, "deploy", "ok")


def test_a_walk_resumed_after_a_crash_mid_compensation_does_not_run_it_again() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    ran: list[str] = []

    def undo(name: str) -> None:
        ran.append(name)
        if name == "unmigrate" and ran.count(name) == 1:
            raise Crash  # the process dies in the middle of unmigrate

    plan = plan_of(chain_build(undo))
    first = take_lease(store, clock, "owner")
    running_run(store, first)
    with pytest.raises(Crash):
        walk_now(store, clock, first, plan, "owner")
    crashed = record_of(store)
    assert crashed.status == "cancelling"
    assert events(crashed, COMPENSATE_INTENT_EVENT, COMPENSATE_EVENT) == [
        (COMPENSATE_INTENT_EVENT, "migrate", "ok")  # started, never recorded done
    ]

    clock.advance(LEASE_TTL_MS + 1)  # the dead owner's lease lapses; the sweep takes it
    sweeper = take_lease(store, clock, "sweep")
    warnings: list[str] = []
    result = walk_now(store, clock, sweeper, plan, "sweep", warnings.append)
    assert ran == ["unmigrate", "undeploy"]  # unmigrate: once, in the crashed walk only
    assert result.status == "cancelled" and result.stopped is None
    assert result.interrupted == ["migrate → unmigrate"]
    assert result.compensated == ["deploy → undeploy"]
    record = record_of(store)
    assert record.status == "cancelled" and record.locks == {}
    (cut,) = [e for e in record.events
              if e.tool == COMPENSATE_EVENT and e.args["target"] == "migrate"]  # fmt: skip
    assert cut.outcome == "error" and cut.detail == f"migrate → unmigrate: {INTERRUPTED}"
    assert any("migrate → unmigrate was interrupted" in w for w in warnings)
    summary = record.events[-1]
    assert summary.tool == "cancel" and summary.outcome == "error"
    assert summary.detail == (
        "ran 1 compensation(s); 1 interrupted earlier, not run again; the run is cancelled"
    )
