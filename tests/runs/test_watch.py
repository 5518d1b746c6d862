"""The watcher loop (``zuke resume --check --watch``): interval, backoff, wakes, stop.

Time is a :class:`ManualClock` and waiting a :class:`FakeWaiter` that moves it,
so every test runs the real loop without sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.runs.support import FakeWaiter, Harness, approval, release_build
from zuke import resume_when
from zuke._clock import ManualClock
from zuke._errors import StoreUnavailableError
from zuke.runs.continuation import ResumeOptions
from zuke.runs.sweep_report import SweepEntry, SweepReport
from zuke.runs.watch import (
    NotChecked,
    PipeWaiter,
    Watcher,
    WatchObserver,
    WatchSettings,
    watch,
)
from zuke.state.memory import MemoryStateStore

MIN = 60_000
EVERY = 5 * MIN


class Seen(WatchObserver):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def sweeping(self, why: str) -> None:
        self.events.append(("sweeping", why))

    def swept(self, report: SweepReport, at_ms: int, next_ms: int) -> None:
        self.events.append(("swept", len(report.entries), next_ms - at_ms))

    def failed(self, message: str, at_ms: int, next_ms: int) -> None:
        self.events.append(("failed", message, next_ms - at_ms))

    def note(self, message: str) -> None:
        self.events.append(("note", message))

    def unchecked(self, report: SweepReport, reason: str, at_ms: int, next_ms: int) -> None:
        self.events.append(("unchecked", reason, report.count("not-checked"), next_ms - at_ms))

    def whys(self) -> list[str]:
        return [e[1] for e in self.events if e[0] == "sweeping"]


def loop(
    sweep: Callable[[Callable[[], bool]], SweepReport] | None = None,
    **settings: int,
) -> tuple[Watcher, FakeWaiter, ManualClock, Seen, list[int]]:
    """A watcher over ``sweep`` (default: an empty report), recording each sweep's time."""
    clock = ManualClock()
    waiter = FakeWaiter(clock)
    seen = Seen()
    starts: list[int] = []

    def recorded(stop: Callable[[], bool]) -> SweepReport:
        starts.append(clock.now_ms())
        return sweep(stop) if sweep is not None else SweepReport()

    values = {"every_ms": EVERY, **settings}
    watcher = Watcher(recorded, settings=WatchSettings(**values), clock=clock, waiter=waiter,
                      observer=seen)  # fmt: skip
    return watcher, waiter, clock, seen, starts


def stop_after(watcher: Watcher, waiter: FakeWaiter, waits: int) -> None:
    previous = waiter.on_wait

    def on_wait(n: int) -> None:
        previous(n)
        if n == waits:
            watcher.stop()

    waiter.on_wait = on_wait


def test_it_sweeps_at_once_and_then_every_interval() -> None:
    watcher, waiter, clock, seen, starts = loop()
    t0 = clock.now_ms()
    stop_after(watcher, waiter, 4)
    assert watcher.run() == 4
    assert starts == [t0, t0 + EVERY, t0 + 2 * EVERY, t0 + 3 * EVERY]
    assert seen.whys() == ["start", "interval", "interval", "interval"]
    assert waiter.waits == [EVERY] * 4


def test_a_failed_sweep_is_reported_and_retried_with_a_doubling_backoff_up_to_the_interval() -> (
    None
):
    failures = iter(range(5))

    def flaky(stop: Callable[[], bool]) -> SweepReport:
        if next(failures, None) is not None:
            raise StoreUnavailableError("state: cannot reach the store")
        return SweepReport()

    watcher, waiter, _clock, seen, _starts = loop(flaky, every_ms=30_000, backoff_ms=5_000)
    stop_after(watcher, waiter, 7)
    assert watcher.run() == 2  # it never exits for a failed sweep
    assert waiter.waits == [5_000, 10_000, 20_000, 30_000, 30_000, 30_000, 30_000]
    failed = [e for e in seen.events if e[0] == "failed"]
    assert [e[2] for e in failed] == [5_000, 10_000, 20_000, 30_000, 30_000]
    assert all(e[1] == "state: cannot reach the store" for e in failed)
    assert seen.whys()[1:6] == ["retry"] * 5
    assert seen.whys()[6] == "interval"  # back to the interval once a sweep succeeds


def test_a_burst_of_wakes_is_one_sweep_after_it_settles() -> None:
    watcher, waiter, clock, seen, starts = loop(settle_ms=200, min_gap_ms=0)
    t0 = clock.now_ms()

    def on_wait(n: int) -> None:
        if n == 1:
            clock.advance(MIN)
            for _ in range(5):
                watcher.wake("notify", "r1")
        if n == 2:  # the settle wait: more of the burst lands in it (and pokes it)
            watcher.wake("notify", "r2")
        if n == 4:
            watcher.stop()

    waiter.on_wait = on_wait
    assert watcher.run() == 2
    assert starts == [t0, t0 + MIN + 200]  # woken, settled, one sweep: not seven
    assert seen.whys() == ["start", "wake"]
    assert waiter.waits[1:] == [200, 200, EVERY]  # the settle, again, then the interval


def test_a_wake_soon_after_a_sweep_waits_the_least_gap_between_sweeps() -> None:
    watcher, waiter, clock, _seen, starts = loop(settle_ms=100, min_gap_ms=1_000)
    t0 = clock.now_ms()

    def on_wait(n: int) -> None:
        if n == 1:
            watcher.wake("notify")
        if n == 3:
            watcher.stop()

    waiter.on_wait = on_wait
    watcher.run()
    assert starts == [t0, t0 + 1_000]


def test_a_wake_during_a_sweep_is_one_more_sweep_after_it() -> None:
    holder: list[Watcher] = []

    def sweep(stop: Callable[[], bool]) -> SweepReport:
        if len(starts) == 1:
            holder[0].wake("notify", "r1")  # a signal lands while the sweep runs
        return SweepReport()

    watcher, waiter, clock, seen, starts = loop(sweep, settle_ms=200, min_gap_ms=0)
    holder.append(watcher)
    t0 = clock.now_ms()
    stop_after(watcher, waiter, 3)  # the wake's poke, its settle, then the interval
    watcher.run()
    assert starts == [t0, t0 + 200]
    assert seen.whys() == ["start", "wake"]


def test_a_reconnected_listener_is_one_sweep_and_a_lost_one_only_a_note() -> None:
    watcher, waiter, _clock, seen, starts = loop(settle_ms=0, min_gap_ms=0)

    def on_wait(n: int) -> None:
        if n == 1:
            watcher.wake("lost", "the listen connection dropped")  # from the listen thread
        if n == 3:
            watcher.wake("reconnected")
        if n == 4:
            watcher.stop()

    waiter.on_wait = on_wait
    assert watcher.run() == 3
    assert seen.whys() == ["start", "interval", "reconnected"]
    note = seen.events.index(("note", "the listen connection dropped"))
    assert note < seen.events.index(("sweeping", "interval"))  # told while it waited
    assert starts[1] == starts[0] + EVERY  # the lost note woke nothing: the interval passed
    assert starts[2] == starts[1]  # the reconnection swept at once


def test_stop_while_idle_returns_without_another_sweep() -> None:
    watcher, waiter, _clock, _seen, starts = loop()
    stop_after(watcher, waiter, 1)
    assert watcher.run() == 1
    assert len(starts) == 1 and len(waiter.waits) == 1


def test_stop_during_a_sweep_returns_after_it_without_waiting() -> None:
    holder: list[Watcher] = []

    def sweep(stop: Callable[[], bool]) -> SweepReport:
        holder[0].stop()
        assert stop()  # the sweep is told, between its runs
        return SweepReport()

    watcher, waiter, _clock, _seen, _starts = loop(sweep)
    holder.append(watcher)
    assert watcher.run() == 1
    assert waiter.waits == []


def test_the_listen_hook_is_opened_and_closed_and_its_wakes_sweep() -> None:
    clock = ManualClock()
    waiter = FakeWaiter(clock)
    closed: list[bool] = []
    given: list[Callable[[str, str | None], None]] = []

    class Listening:
        def close(self) -> None:
            closed.append(True)

    def listen(wake: Callable[[str, str | None], None]) -> Listening:
        given.append(wake)
        wake("listening", None)  # in place at once (the first sweep waits for it)
        return Listening()

    starts: list[int] = []

    def sweep(stop: Callable[[], bool]) -> SweepReport:
        starts.append(clock.now_ms())
        return SweepReport()

    watcher = Watcher(sweep, clock=clock, waiter=waiter, listen=listen,
                      settings=WatchSettings(settle_ms=0, min_gap_ms=0))  # fmt: skip

    def on_wait(n: int) -> None:
        if n == 1:
            given[0]("notify", "r1")
        else:
            watcher.stop()

    waiter.on_wait = on_wait
    assert watcher.run() == 2
    assert closed == [True]
    assert starts[1] == starts[0]  # woken at once, not after the interval


def test_a_sweep_that_cannot_use_the_build_is_said_and_the_watcher_sweeps_on_at_the_interval() -> (
    None
):
    """A bad merge: no backoff, no exit; each sweep says its runs were not checked."""
    broken = iter(range(2))
    reason = "loading build.py failed (line 3): SyntaxError: invalid syntax"

    def sweep(stop: Callable[[], bool]) -> SweepReport:
        if next(broken, None) is not None:
            report = SweepReport([SweepEntry("r1", "App", "not-checked", "suspended")])
            raise NotChecked(reason, report)
        return SweepReport([SweepEntry("r1", "App", "still-waiting", "suspended")])

    watcher, waiter, clock, seen, starts = loop(sweep)
    t0 = clock.now_ms()
    stop_after(watcher, waiter, 3)
    assert watcher.run() == 3  # each broken sweep is a sweep: it reported
    assert starts == [t0, t0 + EVERY, t0 + 2 * EVERY]
    assert seen.whys() == ["start", "interval", "interval"]
    assert [e for e in seen.events if e[0] != "sweeping"] == [
        ("unchecked", reason, 1, EVERY),
        ("unchecked", reason, 1, EVERY),
        ("swept", 1, EVERY),
    ]


def test_listen_to_moves_the_wakes_to_another_store() -> None:
    """A build that loads late may name its own store: its wakes count, the old one's stop."""
    clock = ManualClock()
    waiter = FakeWaiter(clock)
    opened: list[str] = []
    closed: list[str] = []
    wakes: dict[str, Callable[[str, str | None], None]] = {}

    def listener(name: str) -> Callable[[Callable[[str, str | None], None]], Any]:
        class Listening:
            def close(self) -> None:
                closed.append(name)

        def listen(wake: Callable[[str, str | None], None]) -> Listening:
            opened.append(name)
            wakes[name] = wake
            if name == "environment's":
                wake("listening", None)  # in place at once (the first sweep waits for it)
            return Listening()

        return listen

    starts: list[int] = []
    watcher: Watcher

    def sweep(stop: Callable[[], bool]) -> SweepReport:
        starts.append(clock.now_ms())
        if len(starts) == 1:
            watcher.listen_to(listener("build's"))
        return SweepReport()

    watcher = Watcher(sweep, clock=clock, waiter=waiter, listen=listener("environment's"),
                      settings=WatchSettings(settle_ms=0, min_gap_ms=0))  # fmt: skip

    def on_wait(n: int) -> None:
        if n == 1:
            wakes["build's"]("notify", "r1")
        else:
            watcher.stop()

    waiter.on_wait = on_wait
    assert watcher.run() == 2
    assert starts[1] == starts[0]  # the new store's wake swept at once
    assert opened == ["environment's", "build's"]
    assert closed == ["environment's", "build's"]  # each closed once


# ------------------------------------------------------------------ with the real sweep


class Gate:
    """A predicate whose answer the test sets; ``on_ask`` runs when it is asked."""

    def __init__(self) -> None:
        self.value = False
        self.asked = 0
        self.on_ask: Callable[[], None] = lambda: None

    def __call__(self) -> bool:
        self.asked += 1
        self.on_ask()
        return self.value


def gated() -> tuple[Harness, Gate, list[Any]]:
    """A release whose approval is a :class:`Gate`, on a memory store and a manual clock;
    the harness, the gate, and the calls the build records."""
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    gate = Gate()
    calls: list[Any] = []
    h = Harness(release_build(store, calls, gate=approval(resume_when(gate), timeout=None)),
                store, clock)  # fmt: skip
    return h, gate, calls


def test_watch_resumes_a_run_whose_gate_passes_at_a_later_interval() -> None:
    h, gate, calls = gated()
    clock, store = h.clock, h.store
    run_id = h.start().run_id
    assert h.record(run_id).status == "suspended"
    waiter = FakeWaiter(clock)
    watcher = watch(h.build, store, resume=ResumeOptions(), run=h.options(), waiter=waiter)

    def on_wait(n: int) -> None:
        if n == 1:
            gate.value = True  # approved while the watcher waits
        if n == 2:
            watcher.stop()

    waiter.on_wait = on_wait
    assert watcher.run() == 2
    assert h.record(run_id).status == "succeeded"
    assert [c[0] for c in calls if isinstance(c, tuple)] == ["promote"]


def test_stop_in_a_gate_check_finishes_that_run_and_leaves_the_next_alone() -> None:
    h, gate, calls = gated()
    clock, store = h.clock, h.store
    first, second = h.start().run_id, h.start().run_id
    asked_before = gate.asked
    waiter = FakeWaiter(clock)
    watcher = watch(h.build, store, resume=ResumeOptions(), run=h.options(), waiter=waiter)
    gate.value = True
    gate.on_ask = watcher.stop  # SIGTERM while the sweep is inside a gate check
    assert watcher.run() == 1
    statuses = sorted(h.record(r).status for r in (first, second))
    assert statuses == ["succeeded", "suspended"]  # the run in hand finished; the next untouched
    assert gate.asked == asked_before + 1
    assert [c[0] for c in calls if isinstance(c, tuple)] == ["promote"]
    assert waiter.waits == []


def test_the_pipe_waiter_returns_on_a_poke_made_before_the_wait() -> None:
    waiter = PipeWaiter()
    try:
        waiter.poke()
        waiter.poke()
        waiter.wait(3_600_000)  # returns at once: the poke is remembered
        waiter.poke()
        waiter.wait(3_600_000)
    finally:
        waiter.close()


@pytest.mark.parametrize("every", [1_000, 60_000])
def test_the_backoff_never_exceeds_the_interval(every: int) -> None:
    def down(stop: Callable[[], bool]) -> SweepReport:
        raise StoreUnavailableError("down")

    watcher, waiter, _clock, _seen, _starts = loop(down, every_ms=every, backoff_ms=5_000)
    stop_after(watcher, waiter, 6)
    assert watcher.run() == 0
    assert max(waiter.waits) <= every
    assert waiter.waits[-1] == every


@pytest.mark.parametrize(
    ("when", "sweeps"), [("at-once", 1), ("while-the-first-sweep-waits", 1), ("too-late", 2)]
)
def test_the_watcher_sweeps_once_at_start_and_again_only_for_a_listen_that_came_late(
    when: str, sweeps: int
) -> None:
    """The double sweep at start: the first sweep waits for the store's first listen (up
    to ``listen_wait_ms``), so the ``listening`` wake is covered by it; a listen slower than
    that may have missed a write the first sweep did not see, and sweeps again."""
    clock = ManualClock()
    begun = clock.now_ms()
    given: list[Callable[[str, str | None], None]] = []
    started: list[int] = []

    def on_wait(n: int) -> None:
        if n == 1 and when == "while-the-first-sweep-waits":
            given[0]("listening", None)

    waiter = FakeWaiter(clock, on_wait)

    class StopWhenIdle(WatchObserver):
        def idle(self, next_ms: int) -> None:
            if not watcher.wake_pending:  # nothing more to sweep for until the interval
                watcher.stop()

    class Listening:
        def close(self) -> None:
            pass

    def listen(wake: Callable[[str, str | None], None]) -> Listening:
        given.append(wake)
        if when == "at-once":
            wake("listening", None)
        return Listening()

    def sweep(stop: Callable[[], bool]) -> SweepReport:
        started.append(clock.now_ms())
        if when == "too-late" and len(started) == 1:
            given[0]("listening", None)  # after listen_wait_ms: a write may have been missed
        return SweepReport()

    watcher = Watcher(sweep, clock=clock, waiter=waiter, listen=listen, observer=StopWhenIdle(),
                      settings=WatchSettings(settle_ms=0, min_gap_ms=0,
                                             listen_wait_ms=1_000))  # fmt: skip
    assert watcher.run() == sweeps
    if when == "too-late":  # the first sweep waited out listen_wait_ms, then went ahead
        assert started[0] - begun == 1_000 and waiter.waits == [1_000]
    elif when == "at-once":
        assert started == [begun] and waiter.waits == []  # nothing to wait for
    else:
        assert started == [begun] and waiter.waits == [1_000]  # woken by the listen: no wait
