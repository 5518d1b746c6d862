"""A fan-out's plain synchronous stage is awaited in its item's task (no task of its own,
``executor.in_own_task``), and what stops a stage still reaches its body: the job's future
is registered as the body, so the fan-out's timeout tells the body and waits for it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tests.engine.fan_out_support import fan_build, run, statuses
from zuke import target
from zuke._engine.context import Context
from zuke._target import TargetBuilder
from zuke.state.memory import MemoryStateStore

WAIT_S = 30


def test_a_plain_sync_stage_takes_no_task_of_its_own() -> None:
    """20 items x 3 stages: one task per item (and a few for the run), not one per stage."""
    tasks: list[object] = []

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        return {s: target().executes(lambda: None) for s in ("check", "fork", "deploy")}

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        tasks.append(task)
        return task

    async def main() -> str:
        asyncio.get_running_loop().set_task_factory(counting)
        from zuke._engine.run import RunOptions, execute_async

        build = fan_build(MemoryStateStore(), stages, configure=lambda s: s.concurrency(4))
        repos = ",".join(f"r{i}" for i in range(20))
        opts = RunOptions(targets=["ship"], params={"repos": [repos]}, env={})
        return (await execute_async(build, opts)).status

    assert asyncio.run(main()) == "succeeded"
    assert len(tasks) < 20 + 20  # items and the run's own: 60 stages would add 60


def test_the_fan_out_timeout_tells_a_stage_awaited_without_a_task_and_waits_for_it() -> None:
    store = MemoryStateStore()
    told: list[str] = []
    started = threading.Event()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        def hold(ctx: Context) -> None:
            started.set()
            if ctx.cancelled.wait(WAIT_S):  # the attempt's event: set only by telling it
                told.append(repo)

        return {"one": target().executes(hold)}

    build = fan_build(
        store, stages, configure=lambda s: s.concurrency(1), batch=lambda t: t.timeout("100ms")
    )
    result = run(build)
    got = statuses(result)
    assert started.is_set()
    assert told == ["a"]  # told through its job's future, and waited for before the end
    assert got["batch[a].one"] == "failed"
    assert got["batch[b].one"] == got["batch[c].one"] == "skipped"
    assert "batch timed out after 100ms" in (result.outcomes["batch"].error or "")


def test_what_a_sync_stage_returns_to_await_is_stopped_by_the_fan_out_timeout_too() -> None:
    store = MemoryStateStore()
    stopped: list[str] = []

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        async def later() -> None:
            try:
                await asyncio.sleep(WAIT_S)
            except asyncio.CancelledError:
                stopped.append(repo)
                raise

        return {"one": target().executes(lambda: later())}  # sync: returns an awaitable

    build = fan_build(
        store, stages, configure=lambda s: s.concurrency(1), batch=lambda t: t.timeout("100ms")
    )
    result = run(build)
    assert stopped == ["a"]
    assert statuses(result)["batch[a].one"] == "failed"
