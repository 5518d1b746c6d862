from __future__ import annotations

import asyncio
import threading

import pytest

from zuke import Build, Context, RunResult, UsageError, execute, target
from zuke._engine.observer import Observer, Transition
from zuke._engine.run import RunOptions, execute_async

WAIT = 10.0  # a deadline for events, never a sleep


def statuses(result: RunResult) -> dict[str, str]:
    return {name: o.status for name, o in result.outcomes.items()}


class Pair(Build):
    """Two independent targets that can only both succeed if they overlap."""

    @target
    def left(self, t):
        return t.executes(lambda: _rendezvous("left"))

    @target
    def right(self, t):
        return t.executes(lambda: _rendezvous("right"))


_barrier = threading.Barrier(2)
_barrier_timeout = {"s": WAIT}


def _rendezvous(name: str) -> None:
    _barrier.wait(timeout=_barrier_timeout["s"])


def test_parallel_runs_independent_targets_concurrently() -> None:
    _barrier.reset()
    result = execute(Pair, ["left", "right"], parallel=2, env={})
    assert statuses(result) == {"left": "succeeded", "right": "succeeded"}


def test_without_parallel_targets_never_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    _barrier.reset()
    monkeypatch.setitem(_barrier_timeout, "s", 0.2)
    result = execute(Pair, ["left", "right"], env={})
    # Each waits alone at the barrier and times out: proof they did not overlap.
    assert statuses(result) == {"left": "failed", "right": "failed"}


def test_a_failure_skips_its_dependents_while_independent_branches_finish() -> None:
    ran: list[str] = []

    class Branches(Build):
        @target
        def broken(self, t):
            return t.executes(lambda: 1 / 0)

        @target
        def after_broken(self, t):
            return t.depends_on(self.broken).executes(lambda: ran.append("after_broken"))

        @target
        def beyond(self, t):
            return t.depends_on(self.after_broken).executes(lambda: ran.append("beyond"))

        @target
        def independent(self, t):
            return t.executes(lambda: ran.append("independent"))

        @target
        def all(self, t):
            return t.depends_on(self.beyond, self.independent)

    result = execute(Branches, ["all"], env={})
    assert statuses(result) == {
        "broken": "failed",
        "after_broken": "skipped",
        "beyond": "skipped",
        "independent": "succeeded",
        "all": "skipped",
    }
    assert ran == ["independent"]
    assert result.status == "failed" and not result.ok
    assert result.outcomes["broken"].error == "ZeroDivisionError: division by zero"


def test_proceed_after_failure_lets_dependents_run_and_the_run_pass() -> None:
    ran: list[str] = []

    class Lenient(Build):
        @target
        def flaky_check(self, t):
            return t.proceed_after_failure().executes(lambda: 1 / 0)

        @target
        def ship(self, t):
            return t.depends_on(self.flaky_check).executes(lambda: ran.append("ship"))

    result = execute(Lenient, ["ship"], env={})
    assert statuses(result) == {"flaky_check": "failed", "ship": "succeeded"}
    assert result.ok and ran == ["ship"]


def test_skip_treats_a_target_as_done() -> None:
    ran: list[str] = []

    class Skippable(Build):
        @target
        def slow(self, t):
            return t.executes(lambda: ran.append("slow"))

        @target
        def fast(self, t):
            return t.depends_on(self.slow).executes(lambda: ran.append("fast"))

    result = execute(Skippable, ["fast"], skip=["slow"], env={})
    assert statuses(result) == {"slow": "skipped", "fast": "succeeded"} and result.ok
    assert ran == ["fast"]


def test_skip_of_an_unknown_target_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="Unknown target in --skip: nope"):
        execute(Pair, ["left"], skip=["nope"], env={})


def test_sync_and_async_bodies_with_and_without_ctx_all_run() -> None:
    seen: list[str] = []

    async def async_with_ctx(ctx: Context) -> None:
        await asyncio.sleep(0)
        seen.append(f"async-ctx:{ctx.target}")

    async def async_plain() -> None:
        seen.append("async-plain")

    class Mixed(Build):
        @target
        def a(self, t):
            return t.executes(lambda ctx: seen.append(f"sync-ctx:{ctx.target}"))

        @target
        def b(self, t):
            return t.depends_on(self.a).executes(lambda: seen.append("sync-plain"))

        @target
        def c(self, t):
            return t.depends_on(self.b).executes(async_with_ctx)

        @target
        def d(self, t):
            return t.depends_on(self.c).executes(async_plain)

        @target
        def e(self, t):
            return t.depends_on(self.d).executes(self._method)

        def _method(self, ctx: Context) -> None:
            seen.append(f"method:{ctx.run_id == ctx.run_id}")

    assert execute(Mixed, ["e"], env={}).ok
    assert seen == ["sync-ctx:a", "sync-plain", "async-ctx:c", "async-plain", "method:True"]


def test_a_sync_body_runs_off_the_event_loop() -> None:
    loop_ticked = threading.Event()

    async def ticker() -> None:
        await asyncio.sleep(0)
        loop_ticked.set()

    class Blocking(Build):
        @target
        def blocker(self, t):
            # Blocks until the loop has run another coroutine: only possible off the loop.
            return t.executes(lambda: loop_ticked.wait(WAIT) or 1 / 0)

        @target
        def tick(self, t):
            return t.executes(ticker)

    result = execute(Blocking, ["blocker", "tick"], parallel=2, env={})
    assert statuses(result) == {"blocker": "succeeded", "tick": "succeeded"}


def test_a_body_past_its_timeout_fails_with_a_clear_message() -> None:
    async def hang() -> None:
        await asyncio.Event().wait()

    class Slow(Build):
        @target
        def async_hang(self, t):
            return t.timeout("50ms").executes(hang)

        @target
        def sync_hang(self, t):
            # told to stop at its timeout, it returns: the run waits for a sync body to return
            return t.timeout(50).executes(lambda ctx: ctx.cancelled.wait(WAIT))

    result = execute(Slow, ["async_hang", "sync_hang"], parallel=2, env={})
    assert statuses(result) == {"async_hang": "failed", "sync_hang": "failed"}
    assert result.outcomes["async_hang"].error == "async_hang timed out after 50ms"
    assert result.outcomes["sync_hang"].error == "sync_hang timed out after 50ms"


def test_retry_reruns_a_failing_body_until_it_passes() -> None:
    attempts: list[int] = []

    def flaky() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError(f"attempt {len(attempts)}")

    class Retrying(Build):
        @target
        def flaky(self, t):
            return t.retry(2).executes(flaky)

    assert execute(Retrying, ["flaky"], env={}).ok
    assert len(attempts) == 3


def test_retry_gives_up_with_the_last_error() -> None:
    attempts: list[int] = []

    def always() -> None:
        attempts.append(1)
        raise RuntimeError(f"attempt {len(attempts)}")

    class Hopeless(Build):
        @target
        def hopeless(self, t):
            return t.retry(1, delay="1ms").executes(always)

    result = execute(Hopeless, ["hopeless"], env={})
    assert result.outcomes["hopeless"].error == "RuntimeError: attempt 2 (after 2 attempts)"


def test_a_target_without_a_body_succeeds_once_its_dependencies_do() -> None:
    ran: list[str] = []

    class Aggregate(Build):
        @target
        def part(self, t):
            return t.executes(lambda: ran.append("part"))

        @target
        def all(self, t):
            return t.depends_on(self.part)

    result = execute(Aggregate, ["all"], env={})
    assert result.ok and ran == ["part"]
    assert result.outcomes["all"].status == "succeeded"
    assert result.outcomes["all"].started_at is not None


def test_a_body_that_calls_sys_exit_fails_instead_of_exiting() -> None:
    import sys

    class Exiting(Build):
        @target
        def bye(self, t):
            return t.executes(lambda: sys.exit(3))

    result = execute(Exiting, ["bye"], env={})
    assert result.outcomes["bye"].error == "the body called sys.exit(3)"


class Collect(Observer):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def transition(self, t: Transition) -> None:
        self.seen.append((t.target, t.status))


def test_every_transition_reaches_observers_in_order() -> None:
    class Two(Build):
        @target
        def a(self, t):
            return t.executes(lambda: None)

        @target
        def b(self, t):
            return t.depends_on(self.a).executes(lambda: 1 / 0)

    observer = Collect()
    execute(Two, ["b"], env={}, observers=[observer])
    assert observer.seen == [
        ("a", "running"),
        ("a", "succeeded"),
        ("b", "running"),
        ("b", "failed"),
    ]


def test_cancel_stops_launching_cancels_async_bodies_and_skips_the_rest() -> None:
    cancel = asyncio.Event()

    class Cancellable(Build):
        @target
        def long(self, t):
            return t.executes(self._long)

        async def _long(self, ctx: Context) -> None:
            cancel.set()
            await asyncio.Event().wait()

        @target
        def later(self, t):
            return t.depends_on(self.long).executes(lambda: None)

    options = RunOptions(targets=["later"], env={}, cancel=cancel)
    result = asyncio.run(execute_async(Cancellable, options))
    assert result.status == "cancelled"
    assert statuses(result) == {"long": "failed", "later": "skipped"}
    assert result.outcomes["long"].error == "cancelled while running"


def test_a_timed_out_sync_attempt_is_told_to_stop_and_the_retry_is_not() -> None:
    seen: list[bool] = []
    first_told = threading.Event()

    def body(ctx: Context) -> None:
        if not seen:
            seen.append(False)
            first_told.set() if ctx.cancelled.wait(WAIT) else None
            return
        seen.append(ctx.cancelled.is_set())

    class Slow(Build):
        @target
        def slow(self, t):
            return t.timeout("50ms").retry(1).executes(body)

    result = execute(Slow, ["slow"], env={})
    assert result.ok
    assert first_told.wait(WAIT), "the timed-out attempt was never told to stop"
    assert seen == [False, False]


def test_merge_patch_follows_rfc_7386() -> None:
    from zuke._engine.context import merge_patch

    base = {"a": 1, "b": {"c": 2, "d": 3}, "e": "x"}
    patch = {"a": None, "b": {"c": None, "f": 4}, "e": {"g": None, "h": 5}}
    assert merge_patch(base, patch) == {"b": {"d": 3, "f": 4}, "e": {"h": 5}}


def test_a_bad_deadline_fails_before_anything_runs_even_without_state() -> None:
    from zuke import DurationError

    ran: list[str] = []

    class Late(Build):
        def deadline(self) -> str:
            return "whenever"

        @target
        def a(self, t):
            return t.executes(lambda: ran.append("a"))

    with pytest.raises(DurationError, match="'whenever' is not a duration"):
        execute(Late, ["a"], env={})
    assert ran == []


def test_an_observer_that_raises_is_dropped_and_the_run_goes_on() -> None:
    class Broken(Observer):
        async def transition(self, t: Transition) -> None:
            raise BrokenPipeError("stdout closed")

    ran: list[str] = []

    class Two(Build):
        @target
        def a(self, t):
            return t.executes(lambda: ran.append("a"))

        @target
        def b(self, t):
            return t.depends_on(self.a).executes(lambda: ran.append("b"))

    warnings: list[str] = []
    collect = Collect()
    options = RunOptions(
        targets=["b"], env={}, observers=[Broken(), collect], on_warning=warnings.append
    )
    result = asyncio.run(execute_async(Two, options))
    assert result.ok and ran == ["a", "b"]
    assert len(warnings) == 1 and "Broken failed and was dropped" in warnings[0]
    assert collect.seen[-1] == ("b", "succeeded")
