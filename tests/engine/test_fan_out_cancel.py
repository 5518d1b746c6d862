"""Cancelling a run with a fan-out: which items are compensated, in what order, with what state."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.engine.fan_out_support import fan_build, only, run
from zuke import Build, target
from zuke._target import TargetBuilder
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunRecord


def compensated(record: RunRecord) -> list[tuple[str, str]]:
    return [(e.args["target"], e.outcome) for e in record.events if e.tool == "compensate"]


def cancelling_build(
    store: MemoryStateStore, log: list[Any], cancel: asyncio.Event, **kw: Any
) -> type[Build]:
    """Items a, b, c at concurrency 2: when a's ``verify`` starts it cancels the run, with
    a's ``deploy`` done, a's ``verify`` and b's ``deploy`` in flight, and c not started."""

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        async def deploy(ctx: Any) -> None:
            ctx.state.set({"slot": f"sit-{repo}"})
            if repo == "b":
                await asyncio.Event().wait()  # in flight when the cancel lands

        async def verify() -> None:
            cancel.set()
            await asyncio.Event().wait()

        def undo(stage: str) -> TargetBuilder:
            return target().executes(lambda ctx: log.append((repo, stage, ctx.state.get())))

        return {
            "deploy": target().executes(deploy).on_cancel(undo("deploy")),
            "verify": target().executes(verify).on_cancel(undo("verify")),
        }

    def prep(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: None).on_cancel(self.unprep)  # type: ignore[attr-defined]

    def unprep(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: log.append("unprep"))

    def unbatch(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: log.append("unbatch"))

    return fan_build(
        store,
        stages,
        configure=lambda s: s.concurrency(2),
        batch=lambda t: t.depends_on(t_handle("prep")).on_cancel(t_handle("unbatch")),
        extra={"prep": target(prep), "unprep": target(unprep), "unbatch": target(unbatch)},
        **kw,
    )


def t_handle(name: str) -> Any:
    from zuke._target import Target

    return Target(name)


def test_succeeded_and_in_flight_items_are_compensated_in_reverse_before_the_fan_out() -> None:
    store, log, cancel = MemoryStateStore(), list[Any](), asyncio.Event()
    result = run(cancelling_build(store, log, cancel), cancel=cancel)
    assert result.status == "cancelled"
    assert log == [
        ("b", "deploy", {"slot": "sit-b"}),  # in flight: what it recorded so far
        ("a", "verify", {}),  # in flight
        ("a", "deploy", {"slot": "sit-a"}),  # succeeded: reads its own ctx.state
        # the fan-out itself did not succeed (it was cancelled): no "unbatch"
        "unprep",
    ]
    record = only(store)
    assert record.status == "cancelled" and record.locks == {}
    assert compensated(record) == [
        ("batch[b].deploy", "ok"),
        ("batch[a].verify", "ok"),
        ("batch[a].deploy", "ok"),
        ("prep", "ok"),
    ]
    assert record.targets["batch[b].deploy"].interrupted
    assert not record.targets["batch[a].deploy"].interrupted
    assert "batch[c].deploy" not in {t for t, _ in compensated(record)}


def test_an_item_that_failed_on_its_own_is_not_compensated() -> None:
    store, log = MemoryStateStore(), list[Any]()
    cancel = asyncio.Event()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        async def deploy() -> None:
            if repo == "a":
                raise RuntimeError("a broke")
            cancel.set()
            await asyncio.Event().wait()

        undo = target().executes(lambda: log.append(repo))
        return {"deploy": target().executes(deploy).on_cancel(undo)}

    build = fan_build(
        store, stages, configure=lambda s: s.concurrency(1).continue_on_item_failure()
    )
    result = run(build, repos=["a,b"], cancel=cancel)
    assert result.status == "cancelled"
    assert log == ["b"]  # b was in flight; a failed before the cancel


def test_a_compensation_that_raises_is_recorded_and_the_walk_goes_on() -> None:
    store, log, cancel = MemoryStateStore(), list[Any](), asyncio.Event()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        async def deploy() -> None:
            if repo == "c":
                cancel.set()
                await asyncio.Event().wait()

        def undo() -> None:
            log.append(repo)
            if repo == "b":
                raise RuntimeError("b would not roll back")

        return {"deploy": target().executes(deploy).on_cancel(target().executes(undo))}

    result = run(fan_build(store, stages, configure=lambda s: s.concurrency(1)), cancel=cancel)
    assert result.status == "cancelled"
    assert log == ["c", "b", "a"]
    record = only(store)
    assert compensated(record) == [
        ("batch[c].deploy", "ok"),
        ("batch[b].deploy", "error"),
        ("batch[a].deploy", "ok"),
    ]
    failed = next(e for e in record.events if e.outcome == "error" and e.tool == "compensate")
    assert "b would not roll back" in (failed.detail or "")
    assert record.events[-1].detail == "ran 3 compensation(s), 1 failed; the run is cancelled"


def test_a_stage_may_name_a_declared_target_as_its_compensation_with_the_items_state() -> None:
    store, log, cancel = MemoryStateStore(), list[Any](), asyncio.Event()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        async def deploy(ctx: Any) -> None:
            ctx.state.set({"repo": repo})
            if repo == "b":
                cancel.set()
                await asyncio.Event().wait()

        return {"deploy": target().executes(deploy).on_cancel(t_handle("undeploy"))}

    def undeploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda ctx: log.append((ctx.target, ctx.state.get())))

    build = fan_build(
        store, stages, configure=lambda s: s.concurrency(1), extra={"undeploy": target(undeploy)}
    )
    run(build, repos=["a,b"], cancel=cancel)
    assert log == [("undeploy", {"repo": "b"}), ("undeploy", {"repo": "a"})]
    assert [e.args["compensation"] for e in only(store).events if e.tool == "compensate"] == [
        "undeploy",
        "undeploy",
    ]


def test_a_nested_fan_out_unwinds_inside_out() -> None:
    store, log, cancel = MemoryStateStore(), list[str](), asyncio.Event()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        def shard_stages(shard: Any, i: int) -> dict[str, TargetBuilder]:
            async def go() -> None:
                if (repo, shard) == ("b", "y"):
                    cancel.set()
                    await asyncio.Event().wait()

            undo = target().executes(lambda: log.append(f"{repo}.{shard}"))
            return {"go": target().executes(go).on_cancel(undo)}

        prep_undo = target().executes(lambda: log.append(f"{repo}.prep"))
        return {
            "prep": target().executes(lambda: None).on_cancel(prep_undo),
            "shards": target()
            .for_each(lambda: ["x", "y"], shard_stages, lambda s: s.concurrency(1))
            .on_cancel(target().executes(lambda: log.append(f"{repo}.shards"))),
        }

    result = run(
        fan_build(store, stages, configure=lambda s: s.concurrency(1)), repos=["a,b"], cancel=cancel
    )
    assert result.status == "cancelled"
    # b's in-flight shard y, then its shard x, then b's prep (b's shards fan-out did not
    # succeed: its own compensation does not run); then a, whose fan-out succeeded.
    assert log == ["b.y", "b.x", "b.prep", "a.y", "a.x", "a.shards", "a.prep"]
    targets = [t for t, _ in compensated(only(store))]
    assert targets[0] == "batch[b].shards[y].go" and "batch[a].shards" in targets
