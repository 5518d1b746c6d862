"""Compensations (``on_cancel``) walked by a run cancelled in its own process."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from zuke import Build, target
from zuke._engine.run import RunOptions, execute_async
from zuke._engine.walk import cancel_lock_key
from zuke._errors import GraphError
from zuke._target import Target, TargetBuilder
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunRecord


def cd_build(
    store: MemoryStateStore, log: list[Any], *, edges: str = "none", fail_unmigrate: bool = False
) -> type[Build]:
    """``deploy → migrate``, ``notify`` beside them, then ``stop`` (which cancels the run)
    and ``after`` (never reached); ``flaky`` fails (proceed_after_failure)."""

    class CD(Build):
        cancel: asyncio.Event

        def state_store(self) -> MemoryStateStore:
            return store

        def extra_edges(self) -> list[tuple[Target, Target]]:
            return [(self.migrate, self.notify)] if edges == "extra" else []

        async def order_with(self, t: Mapping[str, Target]) -> list[tuple[Target, Target]]:
            return [(t["migrate"], t["notify"])] if edges == "lazy" else []

        @target
        def deploy(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda ctx: ctx.state.set({"slot": "sit-7"})).on_cancel(self.undeploy)

        @target
        def migrate(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.deploy).executes(lambda: None).on_cancel(self.unmigrate)

        @target
        def notify(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda: None).on_cancel(self.unnotify)

        @target
        def flaky(self, t: TargetBuilder) -> TargetBuilder:
            def body() -> None:
                raise RuntimeError("flaky")

            return t.executes(body).proceed_after_failure().on_cancel(self.unflaky)

        @target
        def stop(self, t: TargetBuilder) -> TargetBuilder:
            async def body() -> None:
                CD.cancel.set()
                await asyncio.sleep(30)

            return t.depends_on(self.notify, self.migrate, self.flaky).executes(body)

        @target
        def after(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.stop).executes(lambda: None).on_cancel(self.unafter)

        @target
        def undeploy(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda ctx: log.append(("undeploy", ctx.state.get())))

        @target
        def unmigrate(self, t: TargetBuilder) -> TargetBuilder:
            def body() -> None:
                log.append("unmigrate")
                if fail_unmigrate:
                    raise RuntimeError("the schema would not roll back")

            return t.executes(body)

        @target
        def unnotify(self, t: TargetBuilder) -> TargetBuilder:
            async def body() -> None:
                log.append("unnotify")

            return t.executes(body)

        @target
        def unflaky(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda: log.append("unflaky"))

        @target
        def unafter(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda: log.append("unafter"))

    return CD


def cancel_during_stop(build: type[Build], warnings: list[str] | None = None) -> Any:
    async def go() -> Any:
        event = asyncio.Event()
        build.cancel = event  # type: ignore[attr-defined]
        options = RunOptions(
            targets=["after"],
            env={},
            cancel=event,
            on_warning=(warnings if warnings is not None else []).append,
        )
        return await execute_async(build, options)

    return asyncio.run(go())


def only(store: MemoryStateStore) -> RunRecord:
    (summary,) = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None
    return found.record


def test_compensations_run_iff_their_target_succeeded_in_reverse_order() -> None:
    store, log = MemoryStateStore(), list[Any]()
    result = cancel_during_stop(cd_build(store, log))
    assert result.status == "cancelled"
    # notify was planned first, so it unwinds last; flaky failed and after never ran
    assert log == ["unmigrate", ("undeploy", {"slot": "sit-7"}), "unnotify"]
    record = only(store)
    assert record.status == "cancelled" and record.locks == {}
    assert record.intended_terminal == "cancelled"
    compensations = [(e.args["target"], e.outcome) for e in record.events if e.tool == "compensate"]
    assert compensations == [("migrate", "ok"), ("deploy", "ok"), ("notify", "ok")]
    assert record.events[-1].tool == "cancel"
    assert record.events[-1].detail == "ran 3 compensation(s); the run is cancelled"
    assert store.list_locks() == [] or all(
        e.key != cancel_lock_key(record.id) for e in store.list_locks()
    )


@pytest.mark.parametrize("edges", ["extra", "lazy"])
def test_the_walk_honours_extra_edges_and_order_with(edges: str) -> None:
    store, log = MemoryStateStore(), list[Any]()
    cancel_during_stop(cd_build(store, log, edges=edges))
    # notify runs after migrate now: it is unwound before it
    assert log == ["unnotify", "unmigrate", ("undeploy", {"slot": "sit-7"})]


def test_a_compensation_that_raises_is_recorded_and_the_walk_continues() -> None:
    store, log = MemoryStateStore(), list[Any]()
    warnings: list[str] = []
    result = cancel_during_stop(cd_build(store, log, fail_unmigrate=True), warnings)
    assert result.status == "cancelled"
    assert log == ["unmigrate", ("undeploy", {"slot": "sit-7"}), "unnotify"]
    record = only(store)
    failed = [e for e in record.events if e.tool == "compensate" and e.outcome == "error"]
    assert len(failed) == 1 and failed[0].args["target"] == "migrate"
    assert "the schema would not roll back" in (failed[0].detail or "")
    assert record.events[-1].outcome == "error"
    assert "ran 3 compensation(s), 1 failed" in (record.events[-1].detail or "")
    assert any("3 compensation(s) ran, 1 failed" in w for w in warnings)


def test_on_cancel_naming_an_unknown_target_is_a_definition_error() -> None:
    class Bad(Build):
        @target
        def deploy(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda: None).on_cancel(Target("nope"))

    from zuke._engine.run import load

    with pytest.raises(GraphError, match="on_cancel\\(\\) names unknown target 'nope'"):
        load(Bad, {}, {})
