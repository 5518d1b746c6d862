"""The run-state writer: coalescing, conflict re-application, degraded records, outages,
retries with backoff, and a run's end that cannot be recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import pytest

from zuke import StateError, StoreUnavailableError
from zuke._clock import ManualClock, iso
from zuke._engine.observer import Observer, Observers, Transition
from zuke._engine.writer import RunStateWriter
from zuke.state._protocol import Conflict, Written
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunRecord, TargetRecord
from zuke.state.update import MAX_ATTEMPTS

CLOCK = ManualClock()


def record(run_id: str = "run-1") -> RunRecord:
    return RunRecord(
        id=run_id,
        build="B",
        root_target="a",
        status="running",
        actor="me",
        created_at="2026-01-01T00:00:00.000Z",
        updated_at="2026-01-01T00:00:00.000Z",
        targets={"a": TargetRecord(), "b": TargetRecord()},
    )


class FlakyStore(MemoryStateStore):
    """A memory store whose appends can be made to fail, raise or conflict."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.raises: list[BaseException] = []  # raised by the next appends, one each
        self.refuse: Callable[[RunDelta], BaseException | None] = lambda delta: None
        self.conflicts_left = 0
        self.before_conflict: Callable[[], None] = lambda: None
        self.appends = 0

    def append_run(self, run_id: str, delta: RunDelta, *, expected_version: str):
        if self.down:
            raise StoreUnavailableError("state: the store is down")
        if self.raises:
            raise self.raises.pop(0)
        refused = self.refuse(delta)
        if refused is not None:
            raise refused
        if self.conflicts_left:
            self.conflicts_left -= 1
            self.before_conflict()
            return Conflict()
        self.appends += 1
        return super().append_run(run_id, delta, expected_version=expected_version)


class Sleeps:
    """An injected ``sleep``: records each pause and returns at once."""

    def __init__(self) -> None:
        self.pauses: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)


async def open_writer(
    store: FlakyStore, warnings: list[str], sleeps: Sleeps | None = None
) -> RunStateWriter:
    writer = RunStateWriter(
        store, record(), version=None, clock=CLOCK, warn=warnings.append,
        backoff_s=(0.1, 0.2, 0.5), sleep=sleeps or Sleeps(),
    )  # fmt: skip
    await writer.create()
    return writer


def stored(store: FlakyStore) -> RunRecord:
    found = store.get_run("run-1")
    assert found is not None
    return found.record


def status_of(store: FlakyStore, target: str) -> str:
    found = store.get_run("run-1")
    assert found is not None
    return found.record.targets[target].status


def test_running_is_written_before_the_transition_returns() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await open_writer(store, [])
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        assert status_of(store, "a") == "running"

    asyncio.run(go())


def test_a_settlement_rides_with_the_next_running_write() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await open_writer(store, [])
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        await writer.transition(Transition("a", "succeeded", CLOCK.now_ms()))
        await writer.transition(Transition("b", "running", CLOCK.now_ms()))
        assert store.appends == 2  # a running; (a succeeded + b running)
        assert (status_of(store, "a"), status_of(store, "b")) == ("succeeded", "running")

    asyncio.run(go())


def test_a_settlement_with_no_following_write_lands_after_a_short_debounce() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await open_writer(store, [])
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        await writer.transition(Transition("a", "failed", CLOCK.now_ms(), error="boom"))
        deadline = asyncio.get_running_loop().time() + 5
        while status_of(store, "a") != "failed":
            assert asyncio.get_running_loop().time() < deadline, "the settlement never landed"
            await asyncio.sleep(0.01)

    asyncio.run(go())


def test_a_conflicting_write_is_reapplied_to_the_fresh_record() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await open_writer(store, [])

        def someone_else_writes() -> None:
            found = store.get_run("run-1")
            assert found is not None
            store.put_run(
                replace(found.record, signals={}, actor="other"),
                expected_version=found.version,
            )

        store.conflicts_left = 1
        store.before_conflict = someone_else_writes
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        found = store.get_run("run-1")
        assert found is not None
        assert found.record.actor == "other"  # their change survived
        assert found.record.targets["a"].status == "running"  # ours landed on top
        assert found.record.degraded is False

    asyncio.run(go())


def test_a_write_lost_to_conflicts_marks_the_record_degraded_on_the_next_write() -> None:
    async def go() -> None:
        store = FlakyStore()
        warnings: list[str] = []
        writer = await open_writer(store, warnings)
        store.conflicts_left = MAX_ATTEMPTS
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        assert status_of(store, "a") == "pending"
        assert warnings and "marked degraded" in warnings[0]
        await writer.transition(Transition("b", "running", CLOCK.now_ms()))
        found = store.get_run("run-1")
        assert found is not None and found.record.degraded is True

    asyncio.run(go())


def test_an_unavailable_store_is_reported_and_the_change_kept_for_later() -> None:
    async def go() -> None:
        store = FlakyStore()
        warnings: list[str] = []
        writer = await open_writer(store, warnings)
        store.down = True
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        assert warnings == [
            "state: could not record run run-1 in memory (this process only): the store is down; "
            "the change is kept and retried with the next write"
        ]
        store.down = False
        await writer.finish("succeeded")
        found = store.get_run("run-1")
        assert found is not None
        assert (found.record.status, found.record.targets["a"].status) == ("succeeded", "running")
        assert found.record.degraded is False

    asyncio.run(go())


def test_creating_a_run_whose_id_exists_is_an_error() -> None:
    async def go() -> str:
        store = FlakyStore()
        assert isinstance(store.create_run(record()), Written)
        writer = RunStateWriter(store, record(), version=None, clock=CLOCK)
        try:
            await writer.create()
        except Exception as exc:
            return str(exc)
        return "no error"

    assert "the id was reused" in asyncio.run(go())


def test_a_store_error_of_any_kind_is_retried_with_backoff_until_it_lands() -> None:
    async def go() -> None:
        store, sleeps, warnings = FlakyStore(), Sleeps(), list[str]()
        writer = await open_writer(store, warnings, sleeps)
        store.raises = [OSError(28, "No space left on device"), RuntimeError("HTTP 500")]
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        assert status_of(store, "a") == "running"  # landed on the third attempt
        assert sleeps.pauses == [0.1, 0.2]
        assert warnings == []

    asyncio.run(go())


def test_a_store_that_stays_down_is_not_retried_with_backoff_on_every_write() -> None:
    async def go() -> None:
        store, sleeps, warnings = FlakyStore(), Sleeps(), list[str]()
        writer = await open_writer(store, warnings, sleeps)
        store.down = True
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        assert sleeps.pauses == [0.1, 0.2, 0.5]
        await writer.transition(Transition("b", "running", CLOCK.now_ms()))
        assert sleeps.pauses == [0.1, 0.2, 0.5]  # the streak is known: one try, no pauses
        assert len(warnings) == 1  # reported once per streak

    asyncio.run(go())


def test_a_write_is_not_retried_once_the_run_has_lost_its_lease() -> None:
    async def go() -> None:
        store, sleeps = FlakyStore(), Sleeps()
        writer = await open_writer(store, [], sleeps)
        writer.holds_lease = lambda: False
        store.down = True
        await writer.finish("succeeded")
        assert sleeps.pauses == []

    asyncio.run(go())


def test_an_end_too_large_to_write_marks_the_record_degraded_and_never_succeeded() -> None:
    async def go() -> None:
        store, sleeps = FlakyStore(), Sleeps()
        writer = await open_writer(store, [], sleeps)
        # Like a 413: any write that carries target rows is refused, small ones land.
        store.refuse = lambda delta: StoreUnavailableError("HTTP 413") if delta.targets else None
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        await writer.transition(Transition("a", "succeeded", CLOCK.now_ms()))
        await writer.finish("succeeded")
        found = stored(store)
        assert (found.status, found.degraded) == ("failed", True)
        assert found.targets["a"].status == "pending"
        assert found.events[-1].outcome == "error"
        assert "ended succeeded, but it could not be recorded" in (found.events[-1].detail or "")
        assert writer.record_error is not None
        assert writer.record_error.startswith(
            "could not record run run-1 in memory (this process only): HTTP 413; "
            "the record is left failed and marked degraded"
        )
        assert "\n" not in writer.record_error

    asyncio.run(go())


def test_an_end_that_no_write_can_land_says_the_record_is_left_running() -> None:
    async def go() -> None:
        store, sleeps = FlakyStore(), Sleeps()
        writer = await open_writer(store, [], sleeps)
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        store.raises = [OSError(30, "Read-only file system")] * 100
        await writer.transition(Transition("a", "succeeded", CLOCK.now_ms()))
        await writer.finish("succeeded")
        found = stored(store)
        assert (found.status, found.degraded, found.targets["a"].status) == (
            "running", False, "running",
        )  # fmt: skip
        assert writer.record_error is not None
        assert "OSError: [Errno 30] Read-only file system" in writer.record_error
        assert "the record is left running and could not be marked degraded" in (
            writer.record_error
        )
        assert sleeps.pauses == [0.1, 0.2, 0.5]  # the end is retried even during a streak

    asyncio.run(go())


def test_a_change_lost_to_conflicts_is_sent_again_with_the_end() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await open_writer(store, [])
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        store.conflicts_left = MAX_ATTEMPTS
        await writer.transition(Transition("a", "succeeded", CLOCK.now_ms()))
        await writer.flush()
        assert status_of(store, "a") == "running"  # the settlement was lost
        await writer.finish("succeeded")
        found = stored(store)
        assert (found.status, found.targets["a"].status, found.degraded) == (
            "succeeded", "succeeded", True,
        )  # fmt: skip
        assert writer.record_error is None  # it all landed in the end

    asyncio.run(go())


def test_a_run_cancelled_by_another_process_is_never_written_over() -> None:
    async def go() -> None:
        store = FlakyStore()
        settled: list[str] = []
        writer = await open_writer(store, [])
        writer.on_settled_elsewhere = settled.append
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        found = store.get_run("run-1")
        assert found is not None
        store.put_run(replace(found.record, status="cancelled"), expected_version=found.version)
        await writer.finish("succeeded")
        assert stored(store).status == "cancelled"
        assert settled == ["cancelled"]
        assert writer.record_error is None

    asyncio.run(go())


def test_a_late_metadata_notice_after_the_end_is_not_taken_for_another_process() -> None:
    """A body's ``ctx.state.set`` on a worker thread reaches the loop as a notice that may run
    after the run's end was written: it must write nothing more, and never make the run say
    another process settled it (seen as "Run … was succeeded by another process")."""

    async def go() -> None:
        store = FlakyStore()
        settled: list[str] = []
        writer = await open_writer(store, [])
        writer.on_settled_elsewhere = settled.append
        await writer.transition(Transition("a", "running", CLOCK.now_ms()))
        await writer.transition(Transition("a", "succeeded", CLOCK.now_ms()))
        await writer.finish("succeeded")
        appends = store.appends
        writer._queue(RunDelta(updated_at=iso(CLOCK.now_ms()), targets={"a": writer.row("a")}))
        writer._schedule_flush()  # what the notice does when it runs on the loop, late
        await writer.flush()
        assert (settled, store.appends, stored(store).status) == ([], appends, "succeeded")

    asyncio.run(go())


def test_a_third_party_store_error_at_create_is_a_state_error() -> None:
    async def go() -> None:
        store = FlakyStore()

        def broken(record: RunRecord) -> Written:
            raise OSError(13, "Permission denied")

        store.create_run = broken  # type: ignore[method-assign]
        writer = RunStateWriter(store, record(), version=None, clock=CLOCK)
        with pytest.raises(StateError, match=r"could not create run run-1 in .*Permission denied"):
            await writer.create()

    asyncio.run(go())


def test_observers_never_drop_the_writer_but_drop_a_raising_observer() -> None:
    class Raising(Observer):
        async def transition(self, t: Transition) -> None:
            raise BrokenPipeError("console closed")

    class BuggyWriter(RunStateWriter):
        calls = 0

        async def transition(self, t: Transition) -> None:
            self.calls += 1
            if self.calls == 1:
                raise KeyError("a bug in a hook")
            await super().transition(t)

    async def go() -> None:
        store, warnings = FlakyStore(), list[str]()
        writer = BuggyWriter(store, record(), version=None, clock=CLOCK, warn=warnings.append)
        await writer.create()
        watcher = Raising()
        observers = Observers([watcher], writer=writer, warn=warnings.append)
        await observers.transition(Transition("a", "running", CLOCK.now_ms()))
        await observers.transition(Transition("b", "running", CLOCK.now_ms()))
        assert writer.calls == 2  # still there after it raised
        assert status_of(store, "b") == "running"
        assert stored(store).degraded is True  # the change its first call carried was lost
        assert any("Raising failed and was dropped" in w for w in warnings)
        assert any("a change could not be recorded (KeyError" in w for w in warnings)
        await writer.finish("succeeded")
        found = stored(store)
        assert found.targets["a"].status == "pending"  # it never heard of a's start...
        assert (found.status, found.degraded) == ("failed", True)  # ...so it never says succeeded
        assert writer.record_error is not None
        assert writer.record_error.startswith(
            "could not record run run-1 in memory (this process only): a change could not be "
            "recorded (KeyError: 'a bug in a hook'); the record is left failed and marked degraded"
        )

    asyncio.run(go())
