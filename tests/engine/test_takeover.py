"""Nothing external happens unrecorded: after a takeover, the old owner makes no call.

Another process takes the run over mid-run (breaks its lease, takes it, names itself in
the record, as a resumer does). The old owner's next intent — an effect's ``pending`` row,
a trigger's ``ctx.persist()`` — finds the record naming another holder: it must raise,
never report the write as landed, so the effect's body or the dispatch is not made (the
new owner makes it, once).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.engine.test_writer import FlakyStore, Sleeps
from zuke import Build, LockAcquired, LockHolder, NotYet, StateError, WaitContext, WaitTrigger
from zuke._clock import ManualClock, iso
from zuke._engine.run import RunOptions, execute_async
from zuke._engine.writer import RunStateWriter, RunTakenOverError
from zuke._target import TargetBuilder, target
from zuke.state._protocol import lease_key
from zuke.state.memory import MemoryStateStore
from zuke.state.records import EffectRecord, RunDelta, RunRecord, TargetRecord
from zuke.state.update import MAX_ATTEMPTS, update_run


def take_over(store: MemoryStateStore, run_id: str, clock: ManualClock) -> str:
    """What another process does once it may own the run: the lease, then the record."""
    key = lease_key(run_id)
    store.break_lock(key)
    taken = store.acquire_lock(key, LockHolder("other", run_id, iso(clock.now_ms())), 60_000)
    assert isinstance(taken, LockAcquired)
    update_run(
        store, run_id, lambda fresh: RunDelta(updated_at=fresh.updated_at, locks={key: taken.token})
    )
    return taken.token


def run(build: type[Build], clock: ManualClock, targets: list[str]) -> Any:
    options = RunOptions(targets=targets, env={}, clock=clock, on_warning=lambda line: None)
    return asyncio.run(execute_async(build, options))


def test_an_effect_of_a_run_taken_over_mid_body_is_not_run_and_not_recorded() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[str] = []
    tokens: list[str] = []

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            calls.append("deploy")
            tokens.append(take_over(store, ctx.run_id, clock))

        return t.executes(body).effect("notify", lambda: calls.append("notify"))

    build = type("Ship", (Build,), {"deploy": target(deploy), "state_store": lambda self: store})
    result = run(build, clock, ["deploy"])
    assert calls == ["deploy"]  # the effect's body never ran
    assert result.status == "failed"
    error = result.outcomes["deploy"].error or ""
    assert error.startswith("effect 'notify' was not run: ") and "taken over" in error
    found = store.get_run(result.run_id)
    assert found is not None
    # The new owner's record: no intent of the old owner's, the lease named as the new one's.
    assert found.record.targets["deploy"].effects == {}
    assert found.record.locks[lease_key(result.run_id)] == tokens[0]


class Dispatching(WaitTrigger):
    """A trigger that persists a marker, then makes its external call (the zuke_gh shape);
    another process takes the run over just before."""

    def __init__(self, store: MemoryStateStore, clock: ManualClock) -> None:
        self.store, self.clock = store, clock
        self.dispatched: list[str] = []

    @property
    def descriptor(self) -> str:
        return "dispatch:e2e"

    async def check(self, ctx: WaitContext) -> NotYet:
        take_over(self.store, ctx.run_id, self.clock)
        ctx.state.set({"marker": "m-1"})
        await ctx.persist()
        self.dispatched.append("m-1")
        return NotYet("dispatched")


def test_a_trigger_of_a_run_taken_over_raises_at_persist_and_never_dispatches() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    trigger = Dispatching(store, clock)

    def gate(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.waits_for(lambda s: s.on(trigger))

    build = type("Gated", (Build,), {"gate": target(gate), "state_store": lambda self: store})
    result = run(build, clock, ["gate"])
    assert trigger.dispatched == []
    assert result.status == "failed"
    error = result.outcomes["gate"].error or ""
    assert error.startswith("gate 'gate' was not checked further: ") and "taken over" in error
    found = store.get_run(result.run_id)
    assert found is not None
    assert found.record.targets["gate"].meta == {}  # the old owner wrote nothing more


# -- the writer itself ---------------------------------------------------------------------


def _record() -> RunRecord:
    stamp = iso(ManualClock().now_ms())
    return RunRecord(
        id="run-1", build="B", root_target="a", status="running", actor="me",
        created_at=stamp, updated_at=stamp, targets={"a": TargetRecord()},
        locks={lease_key("run-1"): "mine"},
    )  # fmt: skip


async def _writer(store: FlakyStore) -> RunStateWriter:
    writer = RunStateWriter(store, _record(), version=None, clock=ManualClock(), sleep=Sleeps(),
                            backoff_s=(0.1,))  # fmt: skip
    await writer.create()
    writer.lease = (lease_key("run-1"), "mine")
    return writer


INTENT = EffectRecord("pending", intent_at="2026-01-01T00:00:00.000Z", attempts=1)


def _effects(store: FlakyStore) -> dict[str, EffectRecord]:
    found = store.get_run("run-1")
    assert found is not None
    return dict(found.record.targets["a"].effects)


def test_a_write_that_finds_another_holder_is_never_reported_as_landed() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await _writer(store)
        update_run(store, "run-1", lambda fresh: RunDelta(
            updated_at=fresh.updated_at, locks={lease_key("run-1"): "theirs"}))  # fmt: skip
        writer.set_effect("a", "notify", INTENT)
        with pytest.raises(RunTakenOverError, match="taken over by another process"):
            await writer.persist_intent()
        writer.set_effect("a", "tag", INTENT)
        assert await writer.persist() is not None  # the plain flush says so too
        assert _effects(store) == {}

    asyncio.run(go())


def test_a_run_that_lost_its_lease_raises_before_writing_its_intent() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await _writer(store)
        writer.holds_lease = lambda: False  # a renewal was refused (or could not be proved)
        writer.set_effect("a", "notify", INTENT)
        with pytest.raises(RunTakenOverError):
            await writer.persist_intent()
        assert store.appends == 0

    asyncio.run(go())


def test_a_run_settled_by_another_process_raises_naming_its_status() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await _writer(store)
        update_run(store, "run-1", lambda fresh: RunDelta(updated_at=fresh.updated_at,
                                                          status="cancelled"))  # fmt: skip
        writer.set_effect("a", "notify", INTENT)
        with pytest.raises(RunTakenOverError, match="another process settled it cancelled"):
            await writer.persist_intent()

    asyncio.run(go())


def test_a_store_failure_is_a_state_error_not_a_takeover() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await _writer(store)
        store.down = True
        writer.set_effect("a", "notify", INTENT)
        with pytest.raises(StateError) as caught:
            await writer.persist_intent()
        assert not isinstance(caught.value, RunTakenOverError)
        assert "the store is down" in str(caught.value)

    asyncio.run(go())


def test_an_intent_lost_to_conflicts_in_an_earlier_write_lands_before_the_call() -> None:
    async def go() -> None:
        store = FlakyStore()
        writer = await _writer(store)
        writer.set_effect("a", "notify", INTENT)
        store.conflicts_left = MAX_ATTEMPTS
        await writer.flush()  # a background flush took the intent along, and lost it
        assert _effects(store) == {}
        await writer.persist_intent()  # nothing new is queued: the rows go again
        assert _effects(store) == {"notify": INTENT}

    asyncio.run(go())
