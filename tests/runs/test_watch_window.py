"""The watcher's window for wakes, with its default settings (issue 28 §3: wake-ups in tens of
milliseconds): a wake is swept 10 ms after it, a burst inside those 10 ms is one sweep, and
a sweep a wake asks for starts no sooner after the last one ended than that one took.

Time is a :class:`ManualClock` and waiting a :class:`FakeWaiter` that moves it; a sweep
"takes" time by moving the clock itself.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.runs.support import FakeWaiter
from zuke._clock import ManualClock
from zuke.runs.sweep_report import SweepReport
from zuke.runs.watch import SETTLE_MS, Watcher, WatchSettings

MIN = 60_000
EVERY = 5 * MIN


def watcher(
    took: Callable[[int], int] = lambda n: 0,
) -> tuple[Watcher, FakeWaiter, ManualClock, list[int]]:
    """A watcher at its default window; sweep ``n`` (from 1) takes ``took(n)`` ms."""
    clock = ManualClock()
    waiter = FakeWaiter(clock)
    starts: list[int] = []

    def sweep(stop: Callable[[], bool]) -> SweepReport:
        starts.append(clock.now_ms())
        clock.advance(took(len(starts)))
        return SweepReport()

    made = Watcher(sweep, settings=WatchSettings(every_ms=EVERY), clock=clock, waiter=waiter)
    return made, waiter, clock, starts


def test_a_wake_is_swept_ten_milliseconds_after_it() -> None:
    w, waiter, clock, starts = watcher()
    t0 = clock.now_ms()

    def on_wait(n: int) -> None:
        if n == 1:
            clock.advance(MIN)  # a quiet minute, then a signal lands
            w.wake("notify", "r1")
        if n == 3:
            w.stop()

    waiter.on_wait = on_wait
    assert w.run() == 2
    assert SETTLE_MS == 10
    assert starts == [t0, t0 + MIN + 10]  # was MIN + 200 (and 500 after a sweep)


def test_a_wake_soon_after_a_quick_sweep_is_not_held_back() -> None:
    """The park that woke the last sweep was 20 ms ago: the signal is swept 10 ms after it
    (the least gap of 500 ms between sweep starts held it for up to half a second)."""
    w, waiter, clock, starts = watcher(took=lambda n: 5)
    t0 = clock.now_ms()

    def on_wait(n: int) -> None:
        if n == 1:
            clock.advance(15)
            w.wake("notify", "r1")
        if n == 3:
            w.stop()

    waiter.on_wait = on_wait
    w.run()
    assert starts == [t0, t0 + 5 + 15 + 10]


def test_a_burst_inside_the_window_is_one_sweep() -> None:
    w, waiter, clock, starts = watcher()
    t0 = clock.now_ms()

    def on_wait(n: int) -> None:
        if n == 1:
            clock.advance(MIN)
            for _ in range(5):
                w.wake("notify", "r1")
        if n == 2:  # inside the window: more of the burst (each pokes the waiter)
            clock.advance(4)
            w.wake("notify", "r2")
        if n == 4:
            w.stop()

    waiter.on_wait = on_wait
    assert w.run() == 2
    assert starts == [t0, t0 + MIN + 10]


def test_a_flood_of_wakes_keeps_the_watcher_sweeping_half_its_time_at_most() -> None:
    """Every sweep takes 300 ms and a wake lands during each: the next sweep starts 300 ms
    after the last ended — never back to back, however many wakes come."""
    holder: list[Watcher] = []

    def took(n: int) -> int:
        holder[0].wake("notify", f"r{n}")  # a signal lands while the sweep runs
        return 300

    w, waiter, clock, starts = watcher(took)
    holder.append(w)
    t0 = clock.now_ms()

    def on_wait(n: int) -> None:
        if len(starts) == 5:
            w.stop()

    waiter.on_wait = on_wait
    w.run()
    assert starts == [t0 + 600 * i for i in range(5)]
