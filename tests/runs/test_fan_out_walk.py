"""The cancel walk of a fan-out run driven from another process: re-materialised items,
a crash mid-walk, a degraded record, items that cannot be re-materialised."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.engine.fan_out_support import fan_build
from zuke import Build, LockAcquired, LockHolder, target
from zuke._clock import ManualClock
from zuke._engine.run import RunOptions
from zuke._target import TargetBuilder
from zuke.runs import cancel_run
from zuke.runs.sweep import resume_check_async
from zuke.state.memory import MemoryStateStore
from zuke.state.records import GraphNode, RunEvent, RunRecord, RunStatus, TargetRecord

HOLDER = LockHolder(actor="owner", run_id="run-1", since="2026-01-01T00:00:00.000Z")
AT = "2026-01-01T00:00:00.000Z"


def undo_build(
    store: MemoryStateStore, log: list[Any], *, broken_items: bool = False
) -> type[Build]:
    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        def undo(stage: str) -> TargetBuilder:
            return target().executes(lambda ctx: log.append((repo, stage, ctx.state.get())))

        return {
            "deploy": target().executes(lambda: None).on_cancel(undo("deploy")),
            "verify": target().executes(lambda: None).on_cancel(undo("verify")),
        }

    def items(build: Build) -> Any:
        if broken_items:
            raise RuntimeError("the inventory API is down")
        return build.repos.value  # type: ignore[attr-defined]

    return fan_build(store, stages, items=items)


def dead_fan_run(
    store: MemoryStateStore,
    clock: ManualClock,
    rows: dict[str, str],
    *,
    status: RunStatus = "running",
    events: tuple[RunEvent, ...] = (),
    degraded: bool = False,
) -> None:
    """A run of ``Fan`` over ``a,b,c`` whose owner died (its lease lapsed)."""
    lease = store.acquire_lock("zuke-run-run-1", HOLDER, 1_000)
    assert isinstance(lease, LockAcquired)
    targets = {
        name: TargetRecord(status=s, meta={"at": name})  # type: ignore[arg-type]
        for name, s in rows.items()
    }
    record = RunRecord(
        id="run-1", build="Fan", root_target="ship", status=status, actor="owner",
        created_at=AT, updated_at=AT, graph=(GraphNode("batch"), GraphNode("ship", ("batch",))),
        targets=targets, events=events, params={"repos": "a,b,c"},
        locks={"zuke-run-run-1": lease.token}, degraded=degraded,
        intended_terminal="cancelled" if status == "cancelling" else None,
    )  # fmt: skip
    store.create_run(record)
    clock.advance(1_001)


def record_of(store: MemoryStateStore) -> RunRecord:
    found = store.get_run("run-1")
    assert found is not None
    return found.record


def compensated(store: MemoryStateStore) -> list[str]:
    return [e.args["target"] for e in record_of(store).events if e.tool == "compensate"]


ROWS = {
    "batch": "running",
    "batch[a].deploy": "succeeded",
    "batch[a].verify": "succeeded",
    "batch[b].deploy": "running",  # in flight when the owner died
    "batch[c].deploy": "pending",
}


def test_a_canceller_re_materialises_the_items_from_the_recorded_parameters() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    dead_fan_run(store, clock, ROWS)
    # The canceller supplies no --repos: the items come from the run's own record.
    result = cancel_run(
        store, "run-1", actor="ops", clock=clock, build=undo_build(store, log), env={}
    )
    assert result.status == "cancelled"
    assert log == [
        ("b", "deploy", {"at": "batch[b].deploy"}),
        ("a", "verify", {"at": "batch[a].verify"}),
        ("a", "deploy", {"at": "batch[a].deploy"}),
    ]
    assert compensated(store) == ["batch[b].deploy", "batch[a].verify", "batch[a].deploy"]
    record = record_of(store)
    assert record.status == "cancelled" and record.locks == {}
    assert record.targets["batch[b].deploy"].interrupted


def test_a_recorded_item_with_no_twin_is_reported_and_not_compensated() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    dead_fan_run(store, clock, {**ROWS, "batch[z].deploy": "succeeded"})
    result = cancel_run(
        store, "run-1", actor="ops", clock=clock, build=undo_build(store, log), env={}
    )
    assert "batch[z].deploy" not in compensated(store)
    assert any("batch[z].deploy" in n and "deterministic" in n for n in result.notes)


def test_a_walk_cut_short_by_a_crash_resumes_without_repeating_an_item_compensation() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    args = {"target": "batch[b].deploy", "compensation": "batch[b].deploy.on_cancel"}
    done = RunEvent(at=AT, tool="compensate", actor="owner", detail="b undone", args=args)
    rows = {**ROWS, "batch[b].deploy": "failed"}
    dead_fan_run(store, clock, rows, status="cancelling", events=(done,))
    # the first walk ended b's row (interrupted) before it crashed
    found = store.get_run("run-1")
    assert found is not None
    from dataclasses import replace

    fresh = replace(
        found.record,
        targets={
            **found.record.targets,
            "batch[b].deploy": TargetRecord(status="failed", interrupted=True),
        },
    )
    store.put_run(fresh, expected_version=found.version)
    report = asyncio.run(
        resume_check_async(undo_build(store, log), store, run=RunOptions(env={}, clock=clock))
    )
    assert [(e.action, e.result) for e in report.entries] == [("reaped", "cancelled")]
    assert [(repo, stage) for repo, stage, _ in log] == [("a", "verify"), ("a", "deploy")]
    assert compensated(store) == ["batch[b].deploy", "batch[a].verify", "batch[a].deploy"]


def test_a_degraded_record_widens_the_walk_to_items_not_recorded_failed_or_skipped() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    rows = {**ROWS, "batch[c].verify": "skipped"}
    dead_fan_run(store, clock, rows, degraded=True)
    cancel_run(store, "run-1", actor="ops", clock=clock, build=undo_build(store, log), env={})
    # c's deploy is pending, which a degraded record cannot trust; c's verify was skipped
    assert [(repo, stage) for repo, stage, _ in log] == [
        ("c", "deploy"), ("b", "deploy"), ("a", "verify"), ("a", "deploy"),
    ]  # fmt: skip


def test_items_that_cannot_be_re_materialised_are_a_failed_step_and_the_run_still_ends() -> None:
    clock, log = ManualClock(), list[Any]()
    store = MemoryStateStore(clock=clock)
    dead_fan_run(store, clock, ROWS)
    build = undo_build(store, log, broken_items=True)
    result = cancel_run(store, "run-1", actor="ops", clock=clock, build=build, env={})
    assert result.status == "cancelled" and log == []
    (failure,) = result.failures
    assert failure.startswith("batch[*] → ") and "the inventory API is down" in failure
    assert record_of(store).status == "cancelled"
