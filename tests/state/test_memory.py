"""MemoryStateStore specifics beyond the shared contract: isolation, versions, expiry edges."""

from __future__ import annotations

import pytest

from zuke._clock import ManualClock
from zuke.state._protocol import Conflict, JournalingStateStore, LockAcquired, LockHeld, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, TargetRecord
from zuke.testing.store_contract import sample_holder, sample_record


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> MemoryStateStore:
    return MemoryStateStore(clock=clock)


def test_it_is_a_journaling_store() -> None:
    assert isinstance(MemoryStateStore(), JournalingStateStore)
    assert isinstance(FileSystemStateStore("unused"), JournalingStateStore)


def test_mutating_a_record_after_create_does_not_change_the_stored_one(
    store: MemoryStateStore,
) -> None:
    record = sample_record("run-1")
    assert isinstance(store.create_run(record), Written)
    record.targets["build"] = TargetRecord(status="failed")  # type: ignore[index]
    stored = store.get_run("run-1")
    assert stored is not None
    assert stored.record.targets["build"].status == "pending"


def test_mutating_a_returned_record_does_not_change_the_store(store: MemoryStateStore) -> None:
    store.create_run(sample_record("run-1"))
    first = store.get_run("run-1")
    assert first is not None
    first.record.params["injected"] = "yes"  # type: ignore[index]
    second = store.get_run("run-1")
    assert second is not None
    assert second.record.params == {}


def test_a_record_that_cannot_be_serialised_is_refused(store: MemoryStateStore) -> None:
    record = sample_record("run-1")
    bad = sample_record("run-1")
    bad.targets["build"] = TargetRecord(meta={"when": object()})  # type: ignore[index]
    with pytest.raises(TypeError):
        store.create_run(bad)
    assert store.get_run(record.id) is None


def test_versions_are_never_reused_even_after_delete(store: MemoryStateStore) -> None:
    seen = set()
    for _ in range(3):
        created = store.create_run(sample_record("run-1"))
        assert isinstance(created, Written)
        appended = store.append_run(
            "run-1", RunDelta(updated_at="x"), expected_version=created.version
        )
        assert isinstance(appended, Written)
        seen |= {created.version, appended.version}
        store.delete_run("run-1")
    assert len(seen) == 6


def test_a_lock_is_live_until_its_expiry_instant_and_free_from_it(
    store: MemoryStateStore, clock: ManualClock
) -> None:
    acquired = store.acquire_lock("k", sample_holder("a"), 1000)
    assert isinstance(acquired, LockAcquired)
    clock.advance(999)
    assert isinstance(store.acquire_lock("k", sample_holder("b"), 1000), LockHeld)
    clock.advance(1)  # now == expiresAt: expired
    assert isinstance(store.acquire_lock("k", sample_holder("b"), 1000), LockAcquired)


def test_a_renewal_counts_from_the_renewal_time(
    store: MemoryStateStore, clock: ManualClock
) -> None:
    acquired = store.acquire_lock("k", sample_holder("a"), 1000)
    assert isinstance(acquired, LockAcquired)
    clock.advance(900)
    assert store.renew_lock("k", acquired.token, 1000)
    clock.advance(999)
    assert isinstance(store.acquire_lock("k", sample_holder("b"), 1000), LockHeld)
    clock.advance(1)
    assert isinstance(store.acquire_lock("k", sample_holder("b"), 1000), LockAcquired)


def test_a_put_to_a_deleted_run_conflicts(store: MemoryStateStore) -> None:
    created = store.create_run(sample_record("run-1"))
    assert isinstance(created, Written)
    store.delete_run("run-1")
    result = store.put_run(sample_record("run-1"), expected_version=created.version)
    assert isinstance(result, Conflict)
