"""Heartbeats: their schedule (with an injected clock), and a thread nothing can starve."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from zuke import LockAcquired, LockHolder, StoreUnavailableError
from zuke._clock import ManualClock
from zuke._engine.claims import Claim, next_beat_delay_ms
from zuke.state.memory import MemoryStateStore

HOLDER = LockHolder(actor="ann", run_id="run-1", since="2026-01-01T00:00:00.000Z")


def test_beats_come_at_half_the_ttl_counted_from_the_last_success() -> None:
    # A renewal that took 4 s of a 30 s beat: the next one is due 26 s later, not 30.
    delay = next_beat_delay_ms(ttl_ms=60_000, last_success_ms=0, now_ms=4_000, failures=0)
    assert delay == 26_000


def test_a_failed_renewal_is_retried_soon_and_backs_off_within_half_the_interval() -> None:
    delays = [
        next_beat_delay_ms(ttl_ms=60_000, last_success_ms=0, now_ms=30_000, failures=n)
        for n in range(1, 7)
    ]
    assert delays == [1_000, 2_000, 4_000, 8_000, 15_000, 15_000]


def test_a_short_ttl_retries_within_a_quarter_of_its_interval() -> None:
    assert next_beat_delay_ms(ttl_ms=1_000, last_success_ms=0, now_ms=500, failures=1) == 125


class ScriptedStore(MemoryStateStore):
    """Renewals answer from a script: True, False, or an exception to raise."""

    def __init__(self, clock: ManualClock, script: list[object]) -> None:
        super().__init__(clock=clock)
        self.script = script
        self.calls: list[int] = []

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        self.calls.append(self.clock.now_ms())
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, bool)
        return answer


def test_the_beat_loop_follows_the_schedule_through_errors_until_refused() -> None:
    clock = ManualClock(start_ms=0)
    outage = StoreUnavailableError("state: 503")
    store = ScriptedStore(clock, [True, outage, outage, True, False])
    waits: list[float] = []

    def wait(seconds: float) -> bool:  # an injected timer: time passes, nobody stops us
        waits.append(seconds)
        clock.advance(int(seconds * 1000))
        return False

    lost: list[str] = []
    warnings: list[str] = []
    claim = Claim(store, "deploy", "tok", 1, 60_000, on_lost=lambda c: lost.append(c.key),
                  warn=warnings.append, clock=clock, wait=wait)  # fmt: skip
    claim.beat()  # no loop attached: callbacks run inline
    assert waits == [30.0, 30.0, 1.0, 2.0, 30.0]
    assert store.calls == [30_000, 60_000, 61_000, 63_000, 93_000]
    assert lost == ["deploy"] and claim.lost.is_set()
    assert len(warnings) == 2 and all("renewing deploy failed" in w for w in warnings)


def test_a_stopped_claim_ignores_a_refusal_that_lands_after_its_release() -> None:
    clock = ManualClock(start_ms=0)
    lost: list[str] = []

    class ReleasedMeanwhile(MemoryStateStore):
        def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
            asyncio.run(claim.stop())  # the owner released while this renewal was in flight
            return False

    claim = Claim(ReleasedMeanwhile(clock=clock), "k", "tok", 1, 1_000,
                  on_lost=lambda c: lost.append(c.key), warn=lambda m: None, clock=clock,
                  wait=lambda seconds: False)  # fmt: skip
    claim.beat()
    assert lost == [] and not claim.lost.is_set()


def test_renewals_go_on_while_the_default_executor_is_saturated() -> None:
    store = MemoryStateStore()
    taken = store.acquire_lock("lease", HOLDER, 300)
    assert isinstance(taken, LockAcquired)
    unblock = threading.Event()

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
        # Every default-executor thread is busy (slow acquisitions, store calls)...
        blockers = [loop.run_in_executor(None, unblock.wait, 30) for _ in range(12)]
        claim = Claim(store, "lease", taken.token, taken.fence, 300,
                      on_lost=lambda c: None, warn=lambda m: None).start()  # fmt: skip
        deadline = loop.time() + 20
        while claim.renewals < 3:  # ...and the heartbeat still renews, on its own thread
            assert loop.time() < deadline, "the heartbeat was starved"
            await asyncio.sleep(0.02)
        renewals = claim.renewals
        await claim.stop()
        unblock.set()
        await asyncio.gather(*blockers)
        return renewals

    assert asyncio.run(scenario()) >= 3


@pytest.mark.parametrize("ttl_ms", [100, 1_000, 60_000])
def test_the_first_retry_never_waits_longer_than_a_quarter_interval(ttl_ms: int) -> None:
    interval = max(100, ttl_ms // 2)
    first = next_beat_delay_ms(ttl_ms=ttl_ms, last_success_ms=0, now_ms=interval, failures=1)
    assert 0 < first <= interval // 4
