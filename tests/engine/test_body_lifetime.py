"""A target's claims live exactly as long as its body: timeouts, retries, lost claims."""

from __future__ import annotations

import asyncio
import threading
import time

from zuke import Build, Context, LockAcquired, LockHeld, LockHolder, StateStore, target
from zuke._engine.run import RunOptions, execute_async
from zuke.state.memory import MemoryStateStore

HOLDER = LockHolder(actor="bob", run_id="other-run", since="2026-01-01T00:00:00.000Z")


class Overlap:
    """Counts bodies running at once, and what a rival saw of the lock meanwhile."""

    def __init__(self, store: MemoryStateStore) -> None:
        self.store = store
        self.mutex = threading.Lock()
        self.running = 0
        self.most = 0
        self.attempts = 0
        self.rival: list[object] = []

    def body(self) -> None:  # not cooperative: ignores ctx.cancelled, like most real work
        with self.mutex:
            self.running += 1
            self.attempts += 1
            self.most = max(self.most, self.running)
        time.sleep(0.5)
        self.rival.append(self.store.acquire_lock("deploy-key", HOLDER, 60_000))
        with self.mutex:
            self.running -= 1


def run_with_warnings(build: type[Build], targets: list[str]) -> tuple[object, list[str]]:
    warnings: list[str] = []
    options = RunOptions(targets=targets, env={}, on_warning=warnings.append)
    return asyncio.run(execute_async(build, options)), warnings


def test_a_retry_starts_only_after_the_timed_out_attempt_returned() -> None:
    store = MemoryStateStore()
    overlap = Overlap(store)

    class Retried(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def deploy(self, t):
            return (
                t.lock(lambda s: s.key("deploy-key").with_ttl("1h"))
                .timeout(100)
                .retry(2)
                .executes(overlap.body)
            )

    result, warnings = run_with_warnings(Retried, ["deploy"])
    assert overlap.attempts == 3
    assert overlap.most == 1  # never two copies of the body at once
    assert all(isinstance(seen, LockHeld) for seen in overlap.rival)  # guarded throughout
    assert "timed out" in (result.outcomes["deploy"].error or "")  # type: ignore[attr-defined]
    assert sum("waiting for its body to return" in w for w in warnings) == 3
    assert isinstance(store.acquire_lock("deploy-key", HOLDER, 1_000), LockAcquired)


class RefusingStore(MemoryStateStore):
    """Refuses every renewal of ``res`` (someone else took it)."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = threading.Event()

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        if key == "res":
            self.refused.set()
            return False
        return super().renew_lock(key, token, ttl_ms)


def test_a_lost_claim_ends_the_run_only_after_the_sync_body_returned() -> None:
    store = RefusingStore()
    returned = threading.Event()

    def body(ctx: Context) -> None:
        assert store.refused.wait(10)
        ctx.cancelled.wait(10)  # told to stop...
        time.sleep(0.3)  # ...and it takes a moment to wind down
        returned.set()

    class Lost(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def deploy(self, t):
            return t.lock(lambda s: s.key("res").with_ttl(1_000)).executes(body)

    result, _ = run_with_warnings(Lost, ["deploy"])
    assert returned.is_set(), "the run ended while its body was still running"
    assert result.status == "failed"  # type: ignore[attr-defined]
    assert "was lost" in (result.outcomes["deploy"].error or "")  # type: ignore[attr-defined]


def test_a_cancelled_run_waits_for_its_sync_body_and_says_which() -> None:
    store = MemoryStateStore()
    started = threading.Event()
    looked = threading.Event()
    returned = threading.Event()

    def body(ctx: Context) -> None:
        started.set()
        ctx.cancelled.wait(10)
        looked.wait(10)  # winds down past what the engine says it waits for, and the TTL
        returned.set()

    class Slow(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def deploy(self, t):
            return t.lock(lambda s: s.key("slow-key").with_ttl(1_000)).executes(body)

    async def scenario() -> tuple[object, list[str], object]:
        warnings: list[str] = []
        cancel = asyncio.Event()
        options = RunOptions(targets=["deploy"], env={}, on_warning=warnings.append, cancel=cancel)
        run = asyncio.ensure_future(execute_async(Slow, options))
        while not started.is_set():
            await asyncio.sleep(0.01)
        past_ttl = time.monotonic() + 1.2
        cancel.set()
        while not any("waiting for deploy" in w for w in warnings):
            assert not run.done(), "the run ended before its body returned"
            await asyncio.sleep(0.01)
        while time.monotonic() < past_ttl:  # the condition under test: the TTL has passed
            await asyncio.sleep(0.05)
        # Past its 1 s TTL, and still held: the heartbeat goes on while the body winds down.
        rival = await asyncio.to_thread(store.acquire_lock, "slow-key", HOLDER, 1_000)
        looked.set()
        return await run, warnings, rival

    result, warnings, rival = asyncio.run(scenario())
    assert returned.is_set()
    assert result.status == "cancelled"  # type: ignore[attr-defined]
    assert isinstance(rival, LockHeld)
    assert any("interrupt again to exit now" in w for w in warnings)
