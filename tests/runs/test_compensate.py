"""The walk driven from another process: a dead owner's run, a crash mid-walk, degraded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.engine.test_compensation import cd_build
from zuke import LockAcquired, LockHolder
from zuke._clock import ManualClock
from zuke._engine.compensation import DEGRADED_NOTE
from zuke._engine.run import RunOptions
from zuke._errors import RunError
from zuke.runs import cancel_run
from zuke.runs.sweep import resume_check_async
from zuke.state.memory import MemoryStateStore
from zuke.state.records import GraphNode, RunEvent, RunRecord, RunStatus, TargetRecord

HOLDER = LockHolder(actor="owner", run_id="run-1", since="2026-01-01T00:00:00.000Z")
AT = "2026-01-01T00:00:00.000Z"


def dead_run(
    store: MemoryStateStore,
    clock: ManualClock,
    *,
    status: RunStatus = "running",
    rows: dict[str, str] | None = None,
    events: tuple[RunEvent, ...] = (),
    degraded: bool = False,
) -> None:
    """A run of ``CD`` whose owner died: its lease lapsed."""
    lease = store.acquire_lock("zuke-run-run-1", HOLDER, 1_000)
    assert isinstance(lease, LockAcquired)
    statuses = rows or {"deploy": "succeeded", "migrate": "succeeded", "notify": "running"}
    targets = {
        n: TargetRecord(status=s, meta={"slot": "sit-7"} if n == "deploy" else {})  # type: ignore[arg-type]
        for n, s in statuses.items()
    }
    graph = (
        GraphNode("deploy"), GraphNode("migrate", ("deploy",)), GraphNode("notify"),
        GraphNode("flaky"), GraphNode("stop", ("notify", "migrate", "flaky")),
        GraphNode("after", ("stop",)),
    )  # fmt: skip
    record = RunRecord(
        id="run-1", build="CD", root_target="after", status=status, actor="owner",
        created_at=AT, updated_at=AT, graph=graph, targets=targets, events=events,
        locks={"zuke-run-run-1": lease.token}, degraded=degraded,
        intended_terminal="cancelled" if status == "cancelling" else None,
    )  # fmt: skip
    store.create_run(record)
    clock.advance(1_001)


def record_of(store: MemoryStateStore) -> RunRecord:
    found = store.get_run("run-1")
    assert found is not None
    return found.record


def test_the_canceller_takes_over_the_walk_of_a_dead_holder() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    build = cd_build(store, log)
    dead_run(store, clock)
    result = cancel_run(store, "run-1", actor="ops", clock=clock, build=build, env={})
    assert (result.status, result.owner) == ("cancelled", None)
    # notify was still running when its owner died: it did not succeed, it is not undone
    assert log == ["unmigrate", ("undeploy", {"slot": "sit-7"})]
    assert result.compensated == ["migrate → unmigrate", "deploy → undeploy"]
    assert "Ran 2 compensation(s)." in result.summary()
    record = record_of(store)
    assert record.status == "cancelled" and record.locks == {}
    assert record.targets["notify"].status == "failed"
    # each compensation's intent lands before it runs, its end after
    assert [e.tool for e in record.events] == [
        "cancel", "compensating", "compensate", "compensating", "compensate", "cancel",
    ]  # fmt: skip
    assert store.list_locks() == []  # the lease and the cancel lock are both given back


def test_zuke_cancel_says_which_compensation_an_earlier_walk_left_interrupted() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    build = cd_build(store, log)
    started = RunEvent(at=AT, tool="compensating", actor="owner", detail="migrate → unmigrate",
                       args={"target": "migrate", "compensation": "unmigrate"})  # fmt: skip
    dead_run(store, clock, status="cancelling", events=(started,))
    result = cancel_run(store, "run-1", actor="ops", clock=clock, build=build, env={})
    assert log == [("undeploy", {"slot": "sit-7"})]  # unmigrate may be partly done: not again
    assert result.interrupted == ["migrate → unmigrate"]
    assert "Not run again" in result.summary() and "migrate → unmigrate" in result.summary()


def test_a_walk_cut_short_by_a_crash_is_resumed_by_the_sweep_without_repeating_one() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    build = cd_build(store, log)
    done = RunEvent(at=AT, tool="compensate", actor="owner", detail="migrate → unmigrate",
                    args={"target": "migrate", "compensation": "unmigrate"})  # fmt: skip
    dead_run(store, clock, status="cancelling", events=(done,))
    report = asyncio.run(resume_check_async(build, store, run=RunOptions(env={}, clock=clock)))
    assert [(e.action, e.result) for e in report.entries] == [("reaped", "cancelled")]
    assert log == [("undeploy", {"slot": "sit-7"})]  # unmigrate was recorded done: not again
    record = record_of(store)
    assert record.status == "cancelled" and record.locks == {}
    assert [e.args.get("target") for e in record.events if e.tool == "compensate"] == [
        "migrate", "deploy",
    ]  # fmt: skip


def test_a_degraded_record_widens_the_walk_to_every_target_not_failed_or_skipped() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    build = cd_build(store, log)
    rows = {"deploy": "succeeded", "migrate": "pending", "flaky": "failed", "after": "skipped"}
    dead_run(store, clock, rows=rows, degraded=True)
    result = cancel_run(store, "run-1", actor="ops", clock=clock, build=build, env={})
    # migrate's success may be the write that was lost; notify has no row at all
    assert log == ["unnotify", "unmigrate", ("undeploy", {"slot": "sit-7"})]
    assert DEGRADED_NOTE in result.notes
    assert record_of(store).status == "cancelled"


def test_without_a_build_owed_compensations_are_never_skipped_silently() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    dead_run(store, clock)
    before = store.get_run("run-1")
    with pytest.raises(RunError, match=r"may owe compensations .*--no-compensations"):
        cancel_run(store, "run-1", actor="ops", clock=clock)
    assert store.get_run("run-1") == before and store.list_locks() == []
    result = cancel_run(store, "run-1", actor="ops", clock=clock, compensations="skip")
    assert result.status == "cancelled" and result.compensated == []
    assert any("without compensations" in n for n in result.notes)


def test_a_dead_walkers_cancel_lock_is_taken_over_once_its_lease_has_lapsed() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    build = cd_build(store, log)
    walker = LockHolder(actor="dead-walker", run_id="run-1", since=AT)
    stale = store.acquire_lock("zuke-cancel-run-1", walker, 3_600_000)  # outlives its lease
    assert isinstance(stale, LockAcquired)
    dead_run(store, clock, status="cancelling")
    warnings: list[str] = []
    report = asyncio.run(
        resume_check_async(
            build, store, run=RunOptions(env={}, clock=clock, on_warning=warnings.append)
        )
    )
    assert [(e.action, e.result) for e in report.entries] == [("reaped", "cancelled")]
    assert log == ["unmigrate", ("undeploy", {"slot": "sit-7"})]
    assert record_of(store).status == "cancelled"
    assert store.list_locks() == []


def test_a_degraded_walk_resumed_after_a_crash_still_widens_to_unproven_targets() -> None:
    """The first walk ended notify's running row before it crashed; migrate was never
    reached. A resumed walk on the degraded record compensates both, and deploy."""
    from dataclasses import replace

    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    build = cd_build(store, log)
    rows = {"deploy": "succeeded", "migrate": "pending", "notify": "failed", "flaky": "failed",
            "after": "skipped"}  # fmt: skip
    dead_run(store, clock, status="cancelling", rows=rows, degraded=True)
    found = store.get_run("run-1")
    assert found is not None
    ended = replace(found.record.targets["notify"], interrupted=True)
    store.put_run(
        replace(found.record, targets={**found.record.targets, "notify": ended}),
        expected_version=found.version,
    )
    asyncio.run(resume_check_async(build, store, run=RunOptions(env={}, clock=clock)))
    assert log == ["unnotify", "unmigrate", ("undeploy", {"slot": "sit-7"})]
    record = record_of(store)
    assert record.status == "cancelled"
    assert record.targets["migrate"].status == "skipped"  # skipped only once the run settled


def test_a_walk_the_sweep_cannot_take_is_reported_with_whose_it_is_not_left_out() -> None:
    from zuke import LockHeld

    clock, log = ManualClock(), list[Any]()

    class Contended(MemoryStateStore):
        """Another walker always gets the cancel lock first (a race the sweep loses)."""

        def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> Any:
            if key.startswith("zuke-cancel-"):
                return LockHeld(LockHolder(actor="other-walker", run_id="run-1", since=AT))
            return super().acquire_lock(key, holder, ttl_ms)

    store = Contended(clock=clock)
    dead_run(store, clock, status="cancelling")
    report = asyncio.run(
        resume_check_async(cd_build(store, log), store, run=RunOptions(env={}, clock=clock))
    )
    (entry,) = report.entries
    assert (entry.action, entry.result) == ("left-alone", "cancelling")
    assert entry.detail == "being cancelled by other-walker"
    assert log == [] and report.ok
