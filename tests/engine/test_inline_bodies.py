"""Where a synchronous body runs: on the loop's thread when it is the run's only work
(no thread hop), on a worker thread otherwise — and what must still reach it there.

The real signals (Ctrl-C, a second one, ``zuke cancel`` from another process) are
in ``tests/e2e/test_inline_body_processes.py``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from zuke import Build, Context, LockHeld, StateStore, execute, target
from zuke._engine import drive as drive_module
from zuke._engine.run import RunOptions, execute_async
from zuke._engine.scheduler import Scheduler
from zuke.state.memory import MemoryStateStore
from zuke.state.records import LockHolder

WAIT = 10.0  # a deadline for events, never a sleep
MAIN = threading.main_thread()


class Where(Build):
    """Each body notes the thread it ran on."""

    seen: dict[str, threading.Thread] = {}

    def _note(self, name: str) -> None:
        Where.seen[name] = threading.current_thread()

    @target
    def first(self, t):
        return t.executes(lambda: self._note("first"))

    @target
    def second(self, t):
        return t.depends_on(self.first).executes(lambda: self._note("second"))

    @target
    def timed(self, t):
        return t.timeout("30s").executes(lambda: self._note("timed"))

    @target
    def left(self, t):
        return t.executes(lambda: self._note("left"))

    @target
    def right(self, t):
        return t.executes(lambda: self._note("right"))


def test_the_runs_only_work_runs_on_the_loops_thread() -> None:
    Where.seen.clear()
    result = execute(Where, ["second"], env={})
    assert result.ok
    assert Where.seen == {"first": MAIN, "second": MAIN}


def test_a_timeout_keeps_its_body_on_a_worker_thread() -> None:
    Where.seen.clear()
    assert execute(Where, ["timed"], env={}).ok
    assert Where.seen["timed"] is not MAIN  # the timeout is a timer on the loop


def test_targets_that_may_run_together_keep_their_worker_threads() -> None:
    Where.seen.clear()
    assert execute(Where, ["left", "right"], env={}, parallel=2).ok
    assert Where.seen["left"] is not MAIN and Where.seen["right"] is not MAIN
    Where.seen.clear()
    assert execute(Where, ["left", "right"], env={}).ok  # one at a time: each is alone
    assert Where.seen == {"left": MAIN, "right": MAIN}


def test_a_locked_body_keeps_its_worker_thread() -> None:
    seen: list[threading.Thread] = []
    store = MemoryStateStore()

    class Locked(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def deploy(self, t):
            lock = lambda s: s.key("res").with_ttl("30m")  # noqa: E731
            return t.lock(lock).executes(lambda: seen.append(threading.current_thread()))

    assert execute(Locked, ["deploy"], env={}).ok
    assert seen and seen[0] is not MAIN


def test_an_inline_body_may_run_its_own_event_loop() -> None:
    """A sync body that calls ``asyncio.run`` works inline as it did on a worker thread."""

    async def fetch() -> str:
        await asyncio.sleep(0)
        return "fetched"

    got: list[object] = []

    class Nested(Build):
        @target
        def call(self, t):
            def body() -> None:
                got.append(threading.current_thread())
                got.append(asyncio.run(fetch()))

            return t.executes(body)

    result = execute(Nested, ["call"], env={})
    assert result.ok, result.outcomes["call"].error
    assert got == [MAIN, "fetched"]


def test_a_sync_body_that_returns_a_coroutine_is_awaited() -> None:
    done: list[str] = []

    async def later() -> None:
        await asyncio.sleep(0)
        done.append("awaited")

    class Returns(Build):
        @target
        def call(self, t):
            return t.executes(lambda: later())

    assert execute(Returns, ["call"], env={}).ok
    assert done == ["awaited"]


def test_an_inline_bodys_failure_and_retries_are_as_on_a_thread() -> None:
    calls: list[threading.Thread] = []

    def flaky() -> None:
        calls.append(threading.current_thread())
        if len(calls) < 3:
            raise RuntimeError(f"attempt {len(calls)}")

    class Flaky(Build):
        @target
        def once(self, t):
            return t.executes(lambda: 1 / 0)

        @target
        def thrice(self, t):
            return t.retry(2).executes(flaky)

    result = execute(Flaky, ["once", "thrice"], env={})
    assert result.outcomes["once"].status == "failed"
    assert result.outcomes["once"].error == "ZeroDivisionError: division by zero"
    assert result.outcomes["thrice"].status == "succeeded"
    assert calls == [MAIN, MAIN, MAIN]


def test_a_cancel_from_another_thread_reaches_a_body_on_the_loops_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the cancel watch and a refused lease do (``interrupt_from_thread``): the body
    is told at once, though the loop cannot run until it returns, and the run ends
    cancelled with the next target never started."""
    started = threading.Event()
    told: list[bool] = []
    schedulers: list[Scheduler] = []

    class Spy(Scheduler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            schedulers.append(self)

    monkeypatch.setattr(drive_module, "Scheduler", Spy)

    class Long(Build):
        @target
        def wait(self, t):
            def body(ctx: Context) -> None:
                started.set()
                told.append(ctx.cancelled.wait(WAIT))

            return t.executes(body)

        @target
        def after(self, t):
            return t.depends_on(self.wait).executes(lambda: told.append(False))

    async def main() -> Any:
        loop = asyncio.get_running_loop()

        def cancel_from_a_thread() -> None:
            assert started.wait(WAIT)
            scheduler = schedulers[0]
            loop.call_soon_threadsafe(scheduler.cancel, "cancelled by ops")
            scheduler.interrupt_from_thread()

        threading.Thread(target=cancel_from_a_thread, daemon=True).start()
        return await execute_async(Long, RunOptions(targets=["after"], env={}, inline=True))

    result = asyncio.run(main())
    assert told == [True]  # told while it ran; `after` never started
    assert result.status == "cancelled"
    assert result.outcomes["after"].status == "skipped"


def test_a_refused_lease_reaches_a_body_on_the_loops_thread() -> None:
    """The run's lease is renewed on its own thread while the body blocks the loop; a
    refusal is handed to the loop and tells the body at once."""
    refuse = threading.Event()
    renewed = threading.Event()
    told: list[bool] = []

    class Refusing(MemoryStateStore):
        def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
            if refuse.is_set():
                return False
            answer = super().renew_lock(key, token, ttl_ms)
            renewed.set()
            return answer

    store = Refusing()

    class Leased(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def work(self, t):
            def body(ctx: Context) -> None:
                assert threading.current_thread() is MAIN
                assert renewed.wait(WAIT)  # renewals go on while the loop stands still
                refuse.set()
                told.append(ctx.cancelled.wait(WAIT))

            return t.executes(body)

    result = asyncio.run(
        execute_async(
            Leased,
            RunOptions(targets=["work"], env={"ZUKE_RUN_LEASE_TTL": "1s"}, state=True, inline=True),
        )
    )
    assert told == [True]
    assert result.status == "failed"
    assert "its lease was taken over by another process" in (result.stop_reason or "")


def test_a_long_inline_body_does_not_starve_the_lease() -> None:
    """Renewals run on the heartbeat's thread: a body that holds the loop for several
    renewal intervals keeps its lease (a rival is refused throughout)."""
    rivals: list[object] = []
    renewals = threading.Semaphore(0)

    class Renewing(MemoryStateStore):
        def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
            answer = super().renew_lock(key, token, ttl_ms)
            renewals.release()
            return answer

    store = Renewing()
    rival = LockHolder(actor="rival", run_id="rival", since="2026-01-01T00:00:00.000Z")

    class Long(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def work(self, t):
            def body(ctx: Context) -> None:
                for _ in range(3):  # three renewals while the loop stands still
                    assert renewals.acquire(timeout=WAIT)
                    rivals.append(store.acquire_lock(f"zuke-run-{ctx.run_id}", rival, 1000))

            return t.executes(body)

    result = asyncio.run(
        execute_async(
            Long,
            RunOptions(targets=["work"], env={"ZUKE_RUN_LEASE_TTL": "1s"}, state=True, inline=True),
        )
    )
    assert result.ok, result.stop_reason
    assert len(rivals) == 3 and all(isinstance(r, LockHeld) for r in rivals)


def test_a_loop_shared_with_other_work_keeps_every_body_on_a_worker_thread() -> None:
    """``zuke mcp`` runs a build on its server's loop: a body must never hold that loop
    (``RunOptions.inline`` is off unless the loop runs the run alone)."""
    seen: list[threading.Thread] = []
    ticked = threading.Event()

    class Blocking(Build):
        @target
        def work(self, t):
            def body() -> None:
                seen.append(threading.current_thread())
                assert ticked.wait(WAIT)  # the loop's other work goes on meanwhile

            return t.executes(body)

    async def main() -> Any:
        async def other_work() -> None:
            await asyncio.sleep(0)
            while not ticked.is_set():
                ticked.set()
                await asyncio.sleep(0)

        ticker = asyncio.ensure_future(other_work())
        try:
            return await execute_async(Blocking, RunOptions(targets=["work"], env={}))
        finally:
            ticker.cancel()

    result = asyncio.run(main())
    assert result.ok, result.outcomes["work"].error
    assert seen and seen[0] is not MAIN
