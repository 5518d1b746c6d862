"""The run-state writer: coalescing, conflict re-application, degraded records, outages."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from zuke import StoreUnavailableError
from zuke._clock import ManualClock
from zuke._engine.observer import Transition
from zuke.state._protocol import Conflict, Written
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunRecord, TargetRecord
from zuke.state.writer import MAX_ATTEMPTS, RunStateWriter

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
    """A memory store whose appends can be made to fail or conflict."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.conflicts_left = 0
        self.before_conflict: Callable[[], None] = lambda: None
        self.appends = 0

    def append_run(self, run_id: str, delta: RunDelta, *, expected_version: str):
        if self.down:
            raise StoreUnavailableError("state: the store is down")
        if self.conflicts_left:
            self.conflicts_left -= 1
            self.before_conflict()
            return Conflict()
        self.appends += 1
        return super().append_run(run_id, delta, expected_version=expected_version)


async def open_writer(store: FlakyStore, warnings: list[str]) -> RunStateWriter:
    writer = RunStateWriter(store, record(), version=None, clock=CLOCK, warn=warnings.append)
    await writer.create()
    return writer


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
        assert warnings == ["state: could not record run run-1: state: the store is down"]
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
