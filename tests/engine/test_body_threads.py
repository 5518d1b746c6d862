"""The run's body threads (``zuke._engine.body_threads``): results handed back in batches,
threads reused, a job stopped before it starts never runs, and the threads never hold the
process open."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from zuke._engine.body_threads import BodyThreads

WAIT_S = 10


def _counting_hand_backs(pool: BodyThreads) -> list[int]:
    """Count the pool's hand-backs on the loop (each is one wake-up of the loop)."""
    calls: list[int] = []
    original = pool._hand_back

    def counted() -> None:
        calls.append(1)
        original()

    pool._hand_back = counted  # type: ignore[method-assign]
    return calls


class Holding:
    """A body that says it runs, then holds until released; it returns "returned"."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> str:
        self.running.set()
        assert self.release.wait(WAIT_S)
        return "returned"


def _run(main: Callable[[BodyThreads], Any], workers: int = 8) -> Any:
    pool = BodyThreads(max_workers=workers, thread_name_prefix="test-body")
    try:
        return asyncio.run(main(pool))
    finally:
        pool.shutdown(wait=True)


def test_a_job_hands_back_its_value_and_its_exception() -> None:
    def boom() -> None:
        raise ValueError("no")

    async def main(pool: BodyThreads) -> None:
        ok = pool.start(lambda x: x * 2, (21,))
        bad = pool.start(boom, ())
        await ok.future
        await bad.future
        assert ok.outcome() == 42
        with pytest.raises(ValueError, match="no"):
            bad.outcome()

    _run(main)


def test_bodies_that_finish_together_wake_the_loop_once() -> None:
    """The batching: eight bodies return while the loop is busy; one hand-back takes them all
    (a wake-up per body would be eight)."""
    n = 8
    returned = threading.Semaphore(0)

    def body(i: int) -> int:
        returned.release()
        return i

    async def main(pool: BodyThreads) -> list[int]:
        calls = _counting_hand_backs(pool)
        jobs = [pool.start(body, (i,)) for i in range(n)]
        for _ in range(n):  # the loop is busy (blocked) until every body has returned
            assert returned.acquire(timeout=WAIT_S)
        await asyncio.gather(*(job.future for job in jobs))
        assert len(calls) == 1
        return [job.outcome() for job in jobs]

    assert _run(main) == list(range(n))


def test_threads_are_reused_one_body_after_another() -> None:
    async def main(pool: BodyThreads) -> set[str]:
        names = set()
        for _ in range(50):
            job = pool.start(lambda: threading.current_thread().name, ())
            await job.future
            names.add(job.outcome())
        return names

    assert len(_run(main)) == 1


def test_no_more_threads_than_the_limit_and_a_job_beyond_it_waits_for_one() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def hold() -> str:
        started.release()
        assert release.wait(WAIT_S)
        return threading.current_thread().name

    async def main(pool: BodyThreads) -> set[str]:
        jobs = [pool.start(hold, ()) for _ in range(3)]
        for _ in range(2):
            assert started.acquire(timeout=WAIT_S)
        assert pool._workers == 2  # the third waits for one of them
        release.set()
        await asyncio.gather(*(job.future for job in jobs))
        return {job.outcome() for job in jobs}

    assert len(_run(main, workers=2)) == 2


def test_a_job_stopped_before_it_started_never_runs() -> None:
    release = threading.Event()
    ran: list[str] = []

    def hold() -> None:
        assert release.wait(WAIT_S)
        ran.append("first")

    async def main(pool: BodyThreads) -> None:
        first = pool.start(hold, ())
        second = pool.start(ran.append, ("second",))  # queued: the only thread is busy
        assert pool.stop(second) is None  # it never runs: nothing to wait for
        release.set()
        await first.future
        third = pool.start(ran.append, ("third",))  # the thread went past the stopped job
        await third.future

    _run(main, workers=1)
    assert ran == ["first", "third"]


def test_a_job_stopped_while_it_runs_gives_a_future_that_resolves_when_it_returned() -> None:
    hold = Holding()

    async def main(pool: BodyThreads) -> None:
        job = pool.start(hold, ())
        assert hold.running.wait(WAIT_S)
        returned = pool.stop(job)
        assert returned is not None
        assert not returned.done()
        hold.release.set()
        await returned
        assert job.outcome() == "returned"
        assert pool.stop(job) is None  # handed back: nothing more to wait for

    _run(main)


def test_a_cancelled_waiter_still_gets_the_hand_back_of_its_running_body() -> None:
    """The executor's pattern: the awaiting task is cancelled (its future with it), stops
    the job, and waits for the body on the future ``stop`` gave."""
    hold = Holding()

    async def main(pool: BodyThreads) -> None:
        job = pool.start(hold, ())
        waiter = asyncio.ensure_future(job.future)
        assert await asyncio.to_thread(hold.running.wait, WAIT_S)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        returned = pool.stop(job)
        assert returned is not None
        hold.release.set()
        await asyncio.wait_for(returned, WAIT_S)
        assert job.outcome() == "returned"

    _run(main)


def test_start_after_shutdown_is_refused() -> None:
    async def main(pool: BodyThreads) -> None:
        pool.shutdown(wait=False)
        with pytest.raises(RuntimeError, match="shut down"):
            pool.start(print, ())

    _run(main)


def test_shutdown_ends_the_threads() -> None:
    async def main(pool: BodyThreads) -> None:
        for _ in range(3):
            job = pool.start(lambda: None, ())
            await job.future

    before = set(threading.enumerate())
    _run(main)  # shuts down, then joins submit's threads; the body threads end when told
    for thread in set(threading.enumerate()) - before:
        if thread.name.startswith("test-body"):
            thread.join(WAIT_S)
            assert not thread.is_alive()


def test_a_pool_never_shut_down_does_not_hold_the_process_open() -> None:
    """Idle body threads are told to end at interpreter exit, as ``concurrent.futures``
    does for its own: a process whose pool was never shut down still exits."""
    probe = (
        "import asyncio\n"
        "from zuke._engine.body_threads import BodyThreads\n"
        "pool = BodyThreads(max_workers=4)\n"
        "async def main():\n"
        "    job = pool.start(lambda: 'ok', ())\n"
        "    await job.future\n"
        "    print(job.outcome())\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "ok"
