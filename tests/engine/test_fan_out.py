"""Fan-out (``for_each``) in one process: items, stages, concurrency, failures, settings."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from tests.engine.fan_out_support import fan_build, only, run, statuses
from zuke import Build, parameter, target
from zuke._engine.run import load
from zuke._errors import BuildDefinitionError
from zuke._fan_out import ForEachSettings
from zuke._target import Target, TargetBuilder
from zuke.state.memory import MemoryStateStore


def three_stages(log: list[Any]) -> Any:
    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        return {
            stage: target().executes(lambda ctx, stage=stage: log.append((repo, stage, ctx.target)))
            for stage in ("checks", "fork", "deploy")
        }

    return stages


def test_each_item_runs_its_stages_in_order_as_sub_targets_named_parent_item_stage() -> None:
    store, log = MemoryStateStore(), list[Any]()
    result = run(fan_build(store, three_stages(log)))
    assert result.status == "succeeded"
    for repo in "abc":
        mine = [entry for entry in log if entry[0] == repo]
        assert [stage for _, stage, _ in mine] == ["checks", "fork", "deploy"]
        assert [name for _, _, name in mine] == [
            f"batch[{repo}].{s}" for s in ("checks", "fork", "deploy")
        ]
    # the summary: the fan-out, then its sub-targets item by item, then what follows
    assert list(result.outcomes) == [
        "batch",
        *(f"batch[{r}].{s}" for r in "abc" for s in ("checks", "fork", "deploy")),
        "ship",
    ]


def test_every_sub_target_has_its_own_row_in_the_run_record() -> None:
    store = MemoryStateStore()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        return {"deploy": target().executes(lambda ctx: ctx.state.set({"at": f"sit-{repo}"}))}

    run(fan_build(store, stages))
    rows = only(store).targets
    assert {n: r.status for n, r in rows.items() if "[" in n} == {
        "batch[a].deploy": "succeeded",
        "batch[b].deploy": "succeeded",
        "batch[c].deploy": "succeeded",
    }
    assert rows["batch[b].deploy"].meta == {"at": "sit-b"}  # each item its own ctx.state
    assert rows["batch"].status == "succeeded"


def test_the_items_function_reads_parameters_when_the_fan_out_runs() -> None:
    store, log = MemoryStateStore(), list[Any]()
    result = run(fan_build(store, three_stages(log)), repos=["x", "y"])
    assert {repo for repo, _, _ in log} == {"x", "y"}
    assert "batch[y].deploy" in result.outcomes


def test_no_items_is_a_success_and_what_follows_runs() -> None:
    store, shipped = MemoryStateStore(), list[str]()
    build = fan_build(store, three_stages([]), after=lambda: shipped.append("ship"))
    result = run(build, repos=[])
    assert result.status == "succeeded" and shipped == ["ship"]
    assert list(result.outcomes) == ["batch", "ship"]


def test_never_more_items_run_at_once_than_the_concurrency_and_the_bound_is_reached() -> None:
    store = MemoryStateStore()
    seen = {"active": 0, "peak": 0, "started": 0}
    total = 10

    async def body() -> None:
        seen["active"] += 1
        seen["started"] += 1
        seen["peak"] = max(seen["peak"], seen["active"])
        # Hold the slot until every slot is taken (or no more items can start).
        while seen["active"] < 3 and seen["started"] < total:
            await asyncio.sleep(0)
        seen["active"] -= 1

    build = fan_build(
        store,
        lambda repo, i: {"only": target().executes(body)},
        items=lambda b: list(range(total)),
        configure=lambda s: s.concurrency(3),
    )
    assert run(build).status == "succeeded"
    assert seen["peak"] == 3


@pytest.mark.parametrize(("asked", "got"), [(0, 1), (-4, 1), (2.7, 2), (5, 5)])
def test_concurrency_is_clamped_to_at_least_one(asked: float, got: int) -> None:
    spec = ForEachSettings("batch").concurrency(asked).freeze(list, dict)  # type: ignore[arg-type]
    assert spec.concurrency == got


def test_concurrency_defaults_to_the_cpu_count() -> None:
    spec = ForEachSettings("batch").freeze(list, dict)  # type: ignore[arg-type]
    assert spec.concurrency == (os.cpu_count() or 1)


def test_there_is_no_barrier_between_items() -> None:
    """Item a's first stage waits until item b has finished all three of its stages."""
    store = MemoryStateStore()
    b_done = asyncio.Event()

    async def slow_first() -> None:
        await asyncio.wait_for(b_done.wait(), 10)

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        first = target().executes(slow_first) if repo == "a" else target().executes(lambda: None)
        last = target().executes(b_done.set) if repo == "b" else target().executes(lambda: None)
        return {"one": first, "two": target().executes(lambda: None), "three": last}

    build = fan_build(store, stages, configure=lambda s: s.concurrency(2))
    result = run(build, repos=["a,b"])
    assert result.status == "succeeded"


def failing_at(fail: str, log: list[Any]) -> Any:
    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        def first() -> None:
            log.append((repo, "one"))
            if repo == fail:
                raise RuntimeError(f"{repo} is broken")

        return {
            "one": target().executes(first),
            "two": target().executes(lambda: log.append((repo, "two"))),
        }

    return stages


def test_without_isolation_the_first_failure_stops_the_batch() -> None:
    store, log = MemoryStateStore(), list[Any]()
    build = fan_build(store, failing_at("b", log), configure=lambda s: s.concurrency(1))
    result = run(build)
    assert result.status == "failed"
    assert log == [("a", "one"), ("a", "two"), ("b", "one")]  # c never started
    got = statuses(result)
    assert got["batch[b].two"] == "skipped"
    assert got["batch[c].one"] == got["batch[c].two"] == "skipped"
    assert got["batch"] == "failed" and got["ship"] == "skipped"
    error = result.outcomes["batch"].error or ""
    assert "1 of 3 item(s) failed: b (one)" in error and "the batch stopped" in error


def test_with_isolation_a_failed_item_skips_only_its_own_later_stages() -> None:
    store, log = MemoryStateStore(), list[Any]()
    build = fan_build(
        store,
        failing_at("b", log),
        configure=lambda s: s.concurrency(1).continue_on_item_failure(),
    )
    result = run(build)
    got = statuses(result)
    assert ("c", "two") in log and ("b", "two") not in log
    assert got["batch[b].two"] == "skipped" and got["batch[c].two"] == "succeeded"
    assert got["batch"] == "failed"  # the fan-out fails if any item failed
    assert result.outcomes["batch"].error == "1 of 3 item(s) failed: b (one)"


def test_items_in_flight_stop_after_their_current_stage_when_the_batch_stops() -> None:
    store = MemoryStateStore()
    a_failed = asyncio.Event()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        async def first() -> None:
            if repo == "a":
                a_failed.set()
                raise RuntimeError("a is broken")
            await asyncio.wait_for(a_failed.wait(), 10)  # b is in flight when a fails

        return {"one": target().executes(first), "two": target().executes(lambda: None)}

    result = run(fan_build(store, stages, configure=lambda s: s.concurrency(2)), repos=["a,b"])
    got = statuses(result)
    assert got["batch[b].one"] == "succeeded" and got["batch[b].two"] == "skipped"


def test_proceed_after_failure_on_the_fan_out_lets_the_run_pass() -> None:
    store, log, shipped = MemoryStateStore(), list[Any](), list[str]()
    build = fan_build(
        store,
        failing_at("b", log),
        configure=lambda s: s.continue_on_item_failure(),
        batch=lambda t: t.proceed_after_failure(),
        after=lambda: shipped.append("ship"),
    )
    result = run(build)
    assert result.status == "succeeded" and shipped == ["ship"]
    assert statuses(result)["batch"] == "failed"


def test_a_retry_on_the_fan_out_runs_only_the_failed_items_again() -> None:
    store, runs = MemoryStateStore(), {"a": 0, "b": 0}

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        def body() -> None:
            runs[repo] += 1
            if repo == "b" and runs["b"] == 1:
                raise RuntimeError("flaky")

        return {"one": target().executes(body)}

    build = fan_build(
        store, stages, configure=lambda s: s.continue_on_item_failure(), batch=lambda t: t.retry(1)
    )
    result = run(build, repos=["a,b"])
    assert result.status == "succeeded"
    assert runs == {"a": 1, "b": 2}


def test_a_timeout_on_the_fan_out_bounds_the_whole_batch() -> None:
    store, started = MemoryStateStore(), list[str]()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        async def forever() -> None:
            started.append(repo)
            await asyncio.Event().wait()

        return {"one": target().executes(forever)}

    build = fan_build(
        store, stages, configure=lambda s: s.concurrency(1), batch=lambda t: t.timeout("100ms")
    )
    result = run(build)
    got = statuses(result)
    assert started == ["a"]  # the batch stopped: b and c never started
    assert got["batch[a].one"] == "failed"
    assert got["batch[b].one"] == got["batch[c].one"] == "skipped"
    assert "batch timed out after 100ms" in (result.outcomes["batch"].error or "")


def test_a_lock_on_the_fan_out_is_held_while_its_items_run_and_released_after() -> None:
    store, seen = MemoryStateStore(), list[list[str]]()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        return {"one": target().executes(lambda: seen.append([e.key for e in store.list_locks()]))}

    build = fan_build(
        store, stages, batch=lambda t: t.lock(lambda s: s.key("deploy-all").with_ttl("5m"))
    )
    assert run(build).status == "succeeded"
    assert all("deploy-all" in keys for keys in seen) and len(seen) == 3
    assert all(e.key != "deploy-all" for e in store.list_locks())


def test_each_stage_has_its_own_retry_and_timeout() -> None:
    store, tries = MemoryStateStore(), {"n": 0}

    def flaky() -> None:
        tries["n"] += 1
        if tries["n"] < 3:
            raise RuntimeError("not yet")

    async def hangs() -> None:
        await asyncio.Event().wait()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        return {
            "flaky": target().executes(flaky).retry(2),
            "slow": target().executes(hangs).timeout("50ms"),
        }

    result = run(fan_build(store, stages), repos=["a"])
    assert tries["n"] == 3 and statuses(result)["batch[a].flaky"] == "succeeded"
    assert "timed out after 50ms" in (result.outcomes["batch[a].slow"].error or "")


def test_a_nested_fan_out_names_its_sub_targets_parent_item_stage_inner_stage() -> None:
    store, log = MemoryStateStore(), list[str]()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        inner = target().for_each(
            lambda: ["x", "y"],
            lambda shard, i: {"go": target().executes(lambda ctx: log.append(ctx.target))},
        )
        return {"prep": target().executes(lambda: None), "shards": inner}

    result = run(fan_build(store, stages), repos=["a,b"])
    assert result.status == "succeeded"
    assert sorted(log) == [f"batch[{r}].shards[{s}].go" for r in "ab" for s in "xy"]
    rows = only(store).targets
    assert rows["batch[a].shards[y].go"].status == "succeeded"
    assert rows["batch[a].shards"].status == "succeeded"
    names = list(result.outcomes)
    assert (
        names.index("batch[a].shards")
        < names.index("batch[a].shards[x].go")
        < names.index("batch[b].prep")
    )


def test_an_items_function_that_raises_fails_the_fan_out_and_the_record_settles_failed() -> None:
    store = MemoryStateStore()

    def broken(build: Build) -> Any:
        raise RuntimeError("the inventory API is down")

    result = run(fan_build(store, three_stages([]), items=broken))
    assert result.status == "failed"
    error = result.outcomes["batch"].error or ""
    assert error == "fan-out 'batch': its items function raised: the inventory API is down"
    assert only(store).status == "failed"


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        (lambda r, i: ["not", "a", "dict"], "must return a dict of stage name"),
        (lambda r, i: {"a b": target().executes(lambda: None)}, "stage name 'a b' must be"),
        (lambda r, i: {"one": "nope"}, "must be a free target() builder"),
        (
            lambda r, i: {"one": target().depends_on(Target("x")).executes(lambda: None)},
            "declares depends_on()",
        ),
        (lambda r, i: 1 / 0, "its factory raised for item 'a': division by zero"),
    ],
)
def test_a_factory_that_returns_something_else_fails_the_fan_out_saying_what(
    stages: Any, expected: str
) -> None:
    store = MemoryStateStore()
    result = run(fan_build(store, stages))
    assert result.status == "failed"
    assert expected in (result.outcomes["batch"].error or "")


def test_an_items_function_that_returns_a_string_is_refused() -> None:
    store = MemoryStateStore()
    result = run(fan_build(store, three_stages([]), items=lambda b: "abc"))
    assert "must return a list of items, got str" in (result.outcomes["batch"].error or "")


@pytest.mark.parametrize(
    ("configure", "expected"),
    [
        (lambda t: t.executes(lambda: None), "for_each() and executes()"),
        (lambda t: t.waits_for(lambda s: None), "for_each() and waits_for()"),
        (lambda t: t.effect("e", lambda: None), "effects belong to a stage"),
    ],
)
def test_a_fan_out_with_a_body_a_wait_or_an_effect_fails_the_load(
    configure: Any, expected: str
) -> None:
    build = fan_build(MemoryStateStore(), three_stages([]), batch=configure)
    with pytest.raises(
        BuildDefinitionError, match=expected.replace("(", r"\(").replace(")", r"\)")
    ):
        load(build, {}, {})


def test_for_each_refuses_arguments_that_are_not_functions() -> None:
    with pytest.raises(BuildDefinitionError, match="items must be a function"):
        TargetBuilder("batch").for_each(["a", "b"], lambda r, i: {})  # type: ignore[arg-type]
    with pytest.raises(BuildDefinitionError, match="factory must be a function"):
        TargetBuilder("batch").for_each(list, {"x": 1})  # type: ignore[arg-type]


def test_a_free_compensation_builder_is_refused_on_a_declared_target() -> None:
    class Bad(Build):
        @target
        def deploy(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda: None).on_cancel(target().executes(lambda: None))

    with pytest.raises(BuildDefinitionError, match="only for fan-out stages"):
        load(Bad, {}, {})


def test_each_stage_may_hold_a_lock_of_its_own_keyed_by_its_item() -> None:
    store, held = MemoryStateStore(), dict[str, str]()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        def deploy(ctx: Any) -> None:
            held[repo] = ctx.lock.key
            assert ctx.lock.key in {e.key for e in store.list_locks()}

        locked = target().lock(lambda s: s.lock_key("deploy", repo).with_ttl("5m"))
        return {"deploy": locked.executes(deploy)}

    assert run(fan_build(store, stages)).status == "succeeded"
    assert held == {"a": "deploy-a", "b": "deploy-b", "c": "deploy-c"}
    assert store.list_locks() == [] or all(
        not e.key.startswith("deploy-") for e in store.list_locks()
    )


def test_a_stage_lock_with_a_bad_key_fails_the_fan_out_before_any_item_runs() -> None:
    store, ran = MemoryStateStore(), list[str]()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        bad = target().lock(lambda s: s.key("has space").with_ttl("5m"))
        return {"deploy": bad.executes(lambda: ran.append(repo))}

    result = run(fan_build(store, stages))
    assert result.status == "failed" and ran == []
    assert "batch[a].deploy" in (result.outcomes["batch"].error or "")


def off_build(locked: bool) -> type[Build]:
    class Off(Build):
        repos = parameter("unused").array()

        @target
        def batch(self, t: TargetBuilder) -> TargetBuilder:
            def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
                stage = target().executes(lambda: None)
                if locked:
                    stage = stage.lock(lambda s: s.lock_key("deploy", repo).with_ttl("5m"))
                return {"deploy": stage}

            return t.for_each(lambda: ["a", "b"], stages)

    return Off


def test_with_state_off_a_plain_fan_out_runs_unrecorded() -> None:
    result = run(off_build(locked=False), "batch", env={"ZUKE_STATE": "off"})
    assert result.status == "succeeded" and not result.recorded
    assert statuses(result)["batch[b].deploy"] == "succeeded"


def test_with_state_off_a_fan_out_whose_stages_lock_fails_before_any_item_runs() -> None:
    result = run(off_build(locked=True), "batch", env={"ZUKE_STATE": "off"})
    assert result.status == "failed"
    error = result.outcomes["batch"].error or ""
    assert "stage batch[a].deploy uses .lock()" in error and "ZUKE_STATE=off" in error
    assert (
        "batch[a].deploy" not in result.outcomes
        or result.outcomes["batch[a].deploy"].status != "succeeded"
    )


def test_a_wide_fan_out_of_sync_bodies_gets_a_thread_for_each_item_it_runs_at_once() -> None:
    """60 items at concurrency 60: every body runs at once (none waits for a thread)."""
    import threading

    store = MemoryStateStore()
    everyone = threading.Barrier(60, timeout=30)

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        return {"meet": target().executes(lambda: everyone.wait())}

    build = fan_build(
        store, stages, items=lambda b: list(range(60)), configure=lambda s: s.concurrency(60)
    )
    result = run(build)
    assert result.status == "succeeded"
    assert not everyone.broken
