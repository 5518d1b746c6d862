"""Heartbeats: their schedule (with an injected clock), a thread nothing can starve, and
failing closed: a claim that cannot be renewed lapses before its TTL, not after."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from zuke import LockAcquired, LockHolder, StoreUnavailableError
from zuke._clock import ManualClock
from zuke._engine.claims import (
    Claim,
    Guarded,
    lapse_action,
    next_beat_delay_ms,
    stop_at_ms,
)
from zuke._lock_settings import safety_margin_ms
from zuke.state.memory import MemoryStateStore

HOLDER = LockHolder(actor="ann", run_id="run-1", since="2026-01-01T00:00:00.000Z")


def test_beats_come_at_half_the_ttl_less_its_margin_counted_from_the_last_success() -> None:
    # 60 s less its 6 s margin: a beat every 27 s. A renewal that took 4 s: the next is
    # due 23 s later, not 27.
    delay = next_beat_delay_ms(ttl_ms=60_000, last_success_ms=0, now_ms=4_000, failures=0)
    assert delay == 23_000


def test_the_margin_is_a_tenth_of_the_ttl_and_at_least_half_a_second() -> None:
    assert [safety_margin_ms(t) for t in (1_000, 5_000, 60_000, 3_600_000)] == [
        500, 500, 6_000, 360_000
    ]  # fmt: skip
    assert stop_at_ms(ttl_ms=60_000, since_ms=1_000) == 55_000


def test_a_failed_renewal_is_retried_soon_and_backs_off_within_half_the_interval() -> None:
    delays = [
        next_beat_delay_ms(ttl_ms=60_000, last_success_ms=0, now_ms=27_000, failures=n)
        for n in range(1, 7)
    ]
    assert delays == [1_000, 2_000, 4_000, 8_000, 13_500, 13_500]


def test_a_short_ttl_retries_within_a_quarter_of_its_interval() -> None:
    # 1 s less its 0.5 s margin: a beat every 250 ms, the first retry 62 ms later.
    assert next_beat_delay_ms(ttl_ms=1_000, last_success_ms=0, now_ms=250, failures=1) == 62


class ScriptedStore(MemoryStateStore):
    """Renewals answer from a script: True, False, or an exception to raise."""

    def __init__(self, clock: ManualClock, script: list[object]) -> None:
        super().__init__(clock=clock)
        self.script = script
        self.calls: list[int] = []

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        self.calls.append(self.clock.now_ms())
        answer = self.script.pop(0) if self.script else StoreUnavailableError("state: down")
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
    assert waits == [27.0, 27.0, 1.0, 2.0, 27.0]
    assert store.calls == [27_000, 54_000, 55_000, 57_000, 84_000]
    assert lost == ["deploy"] and claim.lost.is_set()
    assert claim.lapsed is None  # refused, not lapsed
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
    taken = store.acquire_lock("lease", HOLDER, 1_000)
    assert isinstance(taken, LockAcquired)
    unblock = threading.Event()

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
        # Every default-executor thread is busy (slow acquisitions, store calls)...
        blockers = [loop.run_in_executor(None, unblock.wait, 30) for _ in range(12)]
        claim = Claim(store, "lease", taken.token, taken.fence, 1_000,
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


@pytest.mark.parametrize("ttl_ms", [1_000, 2_000, 60_000])
def test_the_first_retry_never_waits_longer_than_a_quarter_interval(ttl_ms: int) -> None:
    interval = max(100, (ttl_ms - safety_margin_ms(ttl_ms)) // 2)
    first = next_beat_delay_ms(ttl_ms=ttl_ms, last_success_ms=0, now_ms=interval, failures=1)
    assert 0 < first <= interval // 4


def manual_wait(clock: ManualClock, waits: list[float] | None = None) -> Callable[[float], bool]:
    def wait(seconds: float) -> bool:  # an injected timer: time passes, nobody stops us
        if waits is not None:
            waits.append(seconds)
        clock.advance(int(seconds * 1000))
        return False

    return wait


class Guard:
    """A fake of what a claim guards: bodies that run, and an ``end`` that records its line."""

    def __init__(self, sync: int = 0, running: int = 0, stops: bool = True) -> None:
        self.counts = (sync, running)
        self.stops = stops
        self.lines: list[str] = []
        self.closed = False
        self.idle_waits: list[float] = []

    def guarded(self, note: str = "") -> Guarded:
        def close() -> tuple[int, int]:
            self.closed = True
            return self.counts

        def idle(timeout_s: float) -> bool:
            self.idle_waits.append(timeout_s)
            return self.stops

        return Guarded(close=close, idle=idle, end=self.lines.append, note=note)


def failing_claim(
    clock: ManualClock, guard: Guard | None, *, ttl_ms: int = 60_000, since_ms: int = 0
) -> tuple[Claim, ScriptedStore, list[str]]:
    store = ScriptedStore(clock, [])  # every renewal raises StoreUnavailableError
    lost: list[str] = []
    claim = Claim(store, "deploy", "tok", 1, ttl_ms, on_lost=lambda c: lost.append(c.key),
                  warn=lambda m: None, clock=clock, wait=manual_wait(clock), since_ms=since_ms,
                  guards=guard.guarded() if guard else None)  # fmt: skip
    return claim, store, lost


def test_a_claim_whose_renewals_fail_lapses_before_its_ttl_not_after() -> None:
    clock = ManualClock(start_ms=0)
    claim, store, lost = failing_claim(clock, None)
    claim.beat()
    # Retried until the stop point (60 s less the 6 s margin), then lost: the store's
    # expiry (60 s after the acquisition began) is still 6 s away.
    assert store.calls == [27_000, 28_000, 30_000, 34_000, 42_000]
    assert clock.now_ms() == 54_000 < 60_000
    assert lost == ["deploy"] and claim.lost.is_set()
    assert claim.lapsed is not None and "state: down" in claim.lapsed


def test_the_stop_point_counts_from_the_start_of_the_acquisition() -> None:
    clock = ManualClock(start_ms=10_000)
    claim, _, lost = failing_claim(clock, None, since_ms=4_000)  # acquiring took 6 s
    claim.beat()
    assert clock.now_ms() == 4_000 + 54_000 and lost == ["deploy"]


def test_a_successful_renewal_moves_the_stop_point_from_its_own_start() -> None:
    clock = ManualClock(start_ms=0)

    class SlowOnce(ScriptedStore):
        def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
            answer = super().renew_lock(key, token, ttl_ms)
            clock.advance(5_000)  # the successful renewal took 5 s
            return answer

    store = SlowOnce(clock, [True])  # then down for good
    lost: list[str] = []
    claim = Claim(store, "k", "tok", 1, 60_000, on_lost=lambda c: lost.append(c.key),
                  warn=lambda m: None, clock=clock, wait=manual_wait(clock))  # fmt: skip
    claim.beat()
    # Renewed by the attempt that started at 27 s: the store's expiry is at least 87 s.
    assert store.calls[0] == 27_000 and clock.now_ms() == 27_000 + 54_000
    assert claim.since_ms == 27_000  # what a resume adopting the lease would carry on from


def test_a_renewal_that_never_answers_counts_as_failed_at_the_stop_point() -> None:
    clock = ManualClock(start_ms=0)
    answered = threading.Event()

    class Hung(MemoryStateStore):
        def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
            answered.wait(30)  # a request that hangs (the test lets it go at the end)
            return True

    lost: list[str] = []
    claim = Claim(Hung(clock=clock), "k", "tok", 1, 1_000, on_lost=lambda c: lost.append(c.key),
                  warn=lambda m: None, clock=clock, wait=manual_wait(clock))  # fmt: skip
    try:
        claim.beat()  # each attempt is given up at the stop point, in real time
    finally:
        answered.set()
    assert lost == ["k"] and claim.lapsed is not None and "no answer within" in claim.lapsed


def test_a_lapse_with_a_sync_body_running_ends_the_process_with_one_line() -> None:
    clock = ManualClock(start_ms=0)
    guard = Guard(sync=1)
    claim, _, lost = failing_claim(clock, guard)
    claim.beat()
    assert guard.closed and lost == ["deploy"]
    (line,) = guard.lines
    assert line.startswith('lock "deploy" could not be renewed (no renewal succeeded for 54.0s')
    assert "state: down" in line and "synchronous body" in line and "(exit 3)" in line
    assert "\n" not in line


def test_a_lapse_cancels_async_bodies_and_ends_the_process_only_if_they_do_not_stop() -> None:
    clock = ManualClock(start_ms=0)
    stopping = Guard(running=2, stops=True)
    failing_claim(clock, stopping)[0].beat()
    assert stopping.lines == [] and stopping.idle_waits == [3.0]  # half the 6 s margin

    clock = ManualClock(start_ms=0)
    stubborn = Guard(running=1, stops=False)
    failing_claim(clock, stubborn)[0].beat()
    (line,) = stubborn.lines
    assert "an async body it guards did not stop when cancelled" in line


def test_a_lapse_with_nothing_running_only_loses_the_claim() -> None:
    clock = ManualClock(start_ms=0)
    guard = Guard()
    claim, _, lost = failing_claim(clock, guard)
    claim.beat()
    assert guard.closed and guard.lines == [] and guard.idle_waits == [] and lost == ["deploy"]


@pytest.mark.parametrize(
    ("sync", "running", "action"),
    [(1, 0, "end the process"), (1, 3, "end the process"), (0, 2, "cancel"),
     (0, 0, "nothing runs")],
)  # fmt: skip
def test_what_a_lapsed_claim_does_depends_on_what_still_runs(
    sync: int, running: int, action: str
) -> None:
    assert lapse_action(sync_running=sync, async_running=running) == action


def test_a_holder_that_wakes_past_its_ttl_stops_at_once_and_says_it_may_be_late() -> None:
    clock = ManualClock(start_ms=0)
    store = ScriptedStore(clock, [])
    guard = Guard(sync=1)

    def paused(seconds: float) -> bool:  # SIGSTOP for 70 s while the beat waited
        clock.advance(70_000)
        return False

    claim = Claim(store, "deploy", "tok", 1, 60_000, on_lost=lambda c: None,
                  warn=lambda m: None, clock=clock, wait=paused,
                  guards=guard.guarded())  # fmt: skip
    claim.beat()
    assert store.calls == []  # no renewal first: it cannot prove anything any more
    assert claim.late and claim.lapsed is not None and "was the process paused" in claim.lapsed
    (line,) = guard.lines
    assert "as the store may have given it to another process already" in line
