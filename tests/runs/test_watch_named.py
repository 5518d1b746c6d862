"""A wake that names its run sweeps that run only; the watcher's sweeps share one loop.

Issue 28 §3: a signal's wake-up should not pay for a listing of every run, nor
for a fresh event loop and its worker threads. A NOTIFY names the run it is
about; such wakes (coalesced) sweep the named runs, while the start, the
interval, a retry and a wake that names nothing sweep every run, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.runs.support import FakeWaiter, Harness, approval, release_build
from zuke import resume_when
from zuke._clock import ManualClock
from zuke._errors import StoreUnavailableError
from zuke.runs.continuation import ResumeOptions
from zuke.runs.sweep import resume_check_async
from zuke.runs.sweep_report import SweepReport
from zuke.runs.watch import SweepLoop, Watcher, WatchObserver, WatchSettings, watch
from zuke.state.memory import MemoryStateStore

EVERY = 300_000


def named_loop() -> tuple[Watcher, FakeWaiter, list[frozenset[str] | None], list[str]]:
    """A watcher whose sweeps record what they were asked to sweep (``None``: every run)."""
    clock = ManualClock()
    waiter = FakeWaiter(clock)
    asked: list[frozenset[str] | None] = []
    whys: list[str] = []

    def every(stop: Callable[[], bool]) -> SweepReport:
        asked.append(None)
        return SweepReport()

    def some(stop: Callable[[], bool], runs: frozenset[str]) -> SweepReport:
        asked.append(runs)
        return SweepReport()

    class Whys(WatchObserver):
        def sweeping(self, why: str) -> None:
            whys.append(why)

    watcher = Watcher(every, sweep_runs=some, clock=clock, waiter=waiter, observer=Whys(),
                      settings=WatchSettings(every_ms=EVERY, settle_ms=10))  # fmt: skip
    return watcher, waiter, asked, whys


def test_wakes_that_name_runs_sweep_those_runs_only() -> None:
    watcher, waiter, asked, whys = named_loop()

    def on_wait(n: int) -> None:
        if n == 1:  # a burst: two signals and a park, within the window
            watcher.wake("notify", "r1")
            watcher.wake("notify", "r2")
        if n == 2:  # the window's wait: one more of the burst lands in it
            watcher.wake("notify", "r1")
        if len(asked) == 2:
            watcher.stop()

    waiter.on_wait = on_wait
    assert watcher.run() == 2
    assert asked == [None, frozenset({"r1", "r2"})]  # the start sweeps all; the burst, two
    assert whys == ["start", "wake"]


def test_a_wake_that_names_nothing_or_a_reconnection_sweeps_every_run() -> None:
    watcher, waiter, asked, whys = named_loop()

    def on_wait(n: int) -> None:
        if n == 1:
            watcher.wake("notify", "r1")
            watcher.wake("notify", None)  # an outsized payload: it names no run
        if n == 3:
            watcher.wake("notify", "r2")
            watcher.wake("reconnected")  # wakes were lost meanwhile
        if n == 5:
            watcher.wake("notify", "r3")
        if len(asked) == 4:
            watcher.stop()

    waiter.on_wait = on_wait
    assert watcher.run() == 4
    assert asked == [None, None, None, frozenset({"r3"})]
    assert whys == ["start", "wake", "reconnected", "wake"]


def test_the_interval_sweeps_every_run_even_with_a_named_wake_pending() -> None:
    watcher, waiter, asked, _whys = named_loop()
    watcher.settings = WatchSettings(every_ms=EVERY, settle_ms=EVERY * 2)  # a wake never settles

    def on_wait(n: int) -> None:
        if n == 1:
            watcher.wake("notify", "r1")
        if len(asked) == 2:
            watcher.stop()

    waiter.on_wait = on_wait
    watcher.run()
    assert asked == [None, None]  # the interval came first: a full sweep covers r1


def test_a_failed_named_sweep_is_retried_as_a_full_sweep() -> None:
    watcher, waiter, asked, whys = named_loop()
    failed: list[bool] = []

    def some(stop: Callable[[], bool], runs: frozenset[str]) -> SweepReport:
        asked.append(runs)
        failed.append(True)
        raise StoreUnavailableError("down")

    watcher._sweep_runs = some

    def on_wait(n: int) -> None:
        if n == 1:
            watcher.wake("notify", "r1")
        if len(asked) == 3:
            watcher.stop()

    waiter.on_wait = on_wait
    watcher.run()
    assert asked == [None, frozenset({"r1"}), None]
    assert whys == ["start", "wake", "retry"]
    assert failed == [True]


# ------------------------------------------------------------------ with the real sweep


def two_parked() -> tuple[Harness, list[bool], str, str]:
    """Two runs of a release parked at a gate whose answer the test sets."""
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    answer = [False]
    calls: list[Any] = []
    gate = approval(resume_when(lambda: answer[0]), timeout=None)
    h = Harness(release_build(store, calls, gate=gate), store, clock)
    first, second = h.start().run_id, h.start().run_id
    assert first is not None and second is not None
    return h, answer, first, second


def test_a_sweep_of_named_runs_checks_and_resumes_only_those() -> None:
    h, answer, first, second = two_parked()
    answer[0] = True  # both are due; only the named one is looked at
    report = asyncio.run(resume_check_async(h.build, h.store, resume=ResumeOptions(),
                                            run=h.options(), runs=[first]))  # fmt: skip
    assert [(e.run_id, e.action) for e in report.entries] == [(first, "resumed")]
    assert h.record(first).status == "succeeded"
    assert h.record(second).status == "suspended"  # the interval's full sweep takes it


def test_a_named_run_that_is_gone_or_another_builds_is_not_reported() -> None:
    h, _answer, first, _second = two_parked()
    other = release_build(h.store, [], name="Other")
    other_run = Harness(other, h.store, h.clock).start().run_id
    assert other_run is not None
    report = asyncio.run(resume_check_async(h.build, h.store, resume=ResumeOptions(),
                                            run=h.options(),
                                            runs=[other_run, "no-such-run", first]))  # fmt: skip
    assert [(e.run_id, e.action) for e in report.entries] == [(first, "still-waiting")]
    assert h.record(other_run).status == "suspended"


def test_the_watchers_sweeps_share_one_loop_closed_when_it_stops() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def which() -> SweepReport:
        loops.append(asyncio.get_running_loop())
        return SweepReport()

    sweeps = SweepLoop()
    sweeps.run(which())
    sweeps.run(which())
    assert loops[0] is loops[1]  # kept: no new loop, no new executor threads per sweep
    sweeps.close()
    assert loops[0].is_closed()
    sweeps.run(which())  # a closed one is made again on demand
    assert loops[2] is not loops[0]
    sweeps.close()


def test_watch_resumes_the_run_a_wake_names_on_its_one_loop() -> None:
    h, answer, first, second = two_parked()
    waiter = FakeWaiter(h.clock)
    watcher = watch(h.build, h.store, resume=ResumeOptions(), run=h.options(), waiter=waiter)

    def on_wait(n: int) -> None:
        if n == 1:
            answer[0] = True
            watcher.wake("notify", second)
        if watcher.sweeps == 2:
            watcher.stop()

    waiter.on_wait = on_wait
    assert watcher.run() == 2
    assert h.record(second).status == "succeeded"
    assert h.record(first).status == "suspended"  # not named: left for the interval
