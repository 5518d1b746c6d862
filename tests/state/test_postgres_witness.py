"""A lost answer on Postgres, with a second writer landing between the loss and the look.

The proxy lets the server commit the marked statement and loses its answer;
before the store looks whether it landed, another store (not through the
proxy) writes the same run or key — a signal appended, a claim broken, the
key taken. The look must still find the write by its witness: ``Written`` (or
``LockAcquired``) with what it made, never a conflict that makes the caller
apply the change again, and never a second sending. The same holds across
calls: a write whose call failed unsure, sent again, is looked up first.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.pg_support import LosingProxy, PgCluster
from zuke.state import _pg_conn
from zuke.state._protocol import Conflict, LockAcquired, LockHeld, Written
from zuke.state._unsure import UnsureWriteError
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, RunEvent, Signal
from zuke.testing.store_contract import fresh, sample_holder, sample_record

AT = "2026-01-02T03:04:05.000Z"


# no test here is about migrating a database: each test's comes at the schema
pytestmark = pytest.mark.pg_migrated


@pytest.fixture
def store(pg_url: str, pg_cluster: PgCluster, proxy: LosingProxy) -> Iterator[PostgresStateStore]:
    s = PostgresStateStore(pg_url.replace(f":{pg_cluster.port}/", f":{proxy.port}/"))
    yield s
    s.close()


@pytest.fixture
def other(pg_url: str) -> Iterator[PostgresStateStore]:
    """The second writer: another process's store, straight to the server."""
    s = PostgresStateStore(pg_url)
    yield s
    s.close()


def _before_the_look(store: PostgresStateStore, meanwhile: Callable[[], object]) -> list[int]:
    """Make ``meanwhile`` run (once) after the answer was lost and before the store looks."""
    original, ran = store.database.call, list[int]()

    def call(work: Any, **kwargs: Any) -> Any:
        landed = kwargs.get("landed")
        if landed is not None:

            def look(conn: Any) -> Any:
                if not ran:
                    ran.append(1)
                    meanwhile()
                return landed(conn)

            kwargs["landed"] = look
        return original(work, **kwargs)

    store.database.call = call  # type: ignore[method-assign]
    return ran


def _event(detail: str) -> RunEvent:
    return RunEvent(at=AT, tool="test", actor="tester", detail=detail)


def _signal(store: PostgresStateStore, run_id: str) -> None:
    """Another process delivers a signal (it needs no lease), at whatever version is now."""
    current = store.get_run(run_id)
    assert current is not None
    delta = RunDelta(updated_at=AT, signals={"go": Signal(data={"by": "bob"}, received_at=AT)})
    assert isinstance(store.append_run(run_id, delta, expected_version=current.version), Written)


def _details(store: PostgresStateStore, run_id: str) -> list[str | None]:
    stored = store.get_run(run_id)
    assert stored is not None
    return [e.detail for e in stored.record.events]


def test_an_append_that_landed_is_written_though_a_signal_landed_before_the_look(
    store: PostgresStateStore, other: PostgresStateStore, proxy: LosingProxy
) -> None:
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    marker = f"marker-{uuid.uuid4().hex}"
    ran = _before_the_look(store, lambda: _signal(other, record.id))
    proxy.arm(marker, "answer")
    delta = RunDelta(updated_at=AT, events=(_event(marker),))
    result = store.append_run(record.id, delta, expected_version=created.version)
    assert proxy.tripped.wait(10) and ran
    assert isinstance(result, Written)  # its own write, not "another writer's conflict"
    assert _details(store, record.id).count(marker) == 1
    stored = store.get_run(record.id)
    assert stored is not None and "go" in stored.record.signals
    assert stored.version != result.version  # the signal landed after it: the CAS goes on
    assert store.append_run(record.id, delta, expected_version=result.version) == Conflict()


def test_an_append_that_landed_is_written_though_a_compaction_folded_it_before_the_look(
    store: PostgresStateStore, other: PostgresStateStore, proxy: LosingProxy
) -> None:
    """An append's witness rides in its delta's row (schema 4); another writer's append that
    folds the journal before the look moves it to ``zuke_run_writes``, where it is found."""
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    marker = f"marker-{uuid.uuid4().hex}"

    def folded() -> None:
        current = other.get_run(record.id)
        assert current is not None
        big = RunDelta(updated_at=AT, events=(_event("x" * 70_000),))  # past the 64 KiB mark
        assert isinstance(other.append_run(record.id, big, expected_version=current.version),
                          Written)  # fmt: skip
        with other.database.connection() as conn:
            left = conn.execute("SELECT count(*) FROM zuke_run_deltas WHERE run_id = %s",
                                (record.id,)).fetchone()  # fmt: skip
        assert left == (0,)  # folded: the deltas (and the witness's first home) are gone

    ran = _before_the_look(store, folded)
    proxy.arm(marker, "answer")
    delta = RunDelta(updated_at=AT, events=(_event(marker),))
    result = store.append_run(record.id, delta, expected_version=created.version)
    assert proxy.tripped.wait(10) and ran
    assert isinstance(result, Written), result
    assert _details(store, record.id).count(marker) == 1


def test_a_put_and_a_create_that_landed_are_written_though_another_write_came_between(
    store: PostgresStateStore, other: PostgresStateStore, proxy: LosingProxy
) -> None:
    record = sample_record(fresh())
    _before_the_look(store, lambda: _signal(other, record.id))
    proxy.arm(record.id, "answer")
    created = store.create_run(record)
    assert proxy.tripped.wait(10)
    assert isinstance(created, Written), created  # not "that id already exists"
    current = store.get_run(record.id)
    assert current is not None
    marker = f"marker-{uuid.uuid4().hex}"
    _before_the_look(store, lambda: _signal(other, record.id))
    proxy.arm(marker, "answer")
    put = store.put_run(replace(current.record, actor=marker), expected_version=current.version)
    assert proxy.tripped.wait(10)
    assert isinstance(put, Written), put
    stored = store.get_run(record.id)
    assert stored is not None and stored.record.actor == marker


def test_an_acquisition_that_landed_stays_acquired_though_it_was_broken_before_the_look(
    store: PostgresStateStore, other: PostgresStateStore, proxy: LosingProxy
) -> None:
    # Sent again after the break, the old look (is the token on the key now?) took the key
    # back from the operator who broke it.
    key = fresh("lock")
    _before_the_look(store, lambda: other.break_lock(key))
    proxy.arm(key, "answer")
    taken = store.acquire_lock(key, sample_holder("a"), 60_000)
    assert proxy.tripped.wait(10)
    assert isinstance(taken, LockAcquired)
    assert other.list_locks() == []  # the break stands: not taken a second time
    assert store.renew_lock(key, taken.token, 60_000) is False  # and the holder learns it


def test_an_acquisition_that_landed_is_acquired_though_another_took_the_key_before_the_look(
    store: PostgresStateStore, other: PostgresStateStore, proxy: LosingProxy
) -> None:
    key = fresh("lock")

    def taken_over() -> None:
        other.break_lock(key)
        assert isinstance(other.acquire_lock(key, sample_holder("b"), 60_000), LockAcquired)

    _before_the_look(store, taken_over)
    proxy.arm(key, "answer")
    taken = store.acquire_lock(key, sample_holder("a"), 60_000)
    assert isinstance(taken, LockAcquired)  # not LockHeld(b): its own grant landed first
    assert [e.holder for e in other.list_locks()] == [sample_holder("b")]


def test_a_release_whose_answer_was_lost_leaves_the_next_holders_claim_alone(
    store: PostgresStateStore, other: PostgresStateStore, proxy: LosingProxy
) -> None:
    key = fresh("lock")
    taken = store.acquire_lock(key, sample_holder("a"), 60_000)
    assert isinstance(taken, LockAcquired)
    pool = store.database._pool
    assert pool is not None
    original, lost = pool.drop_idle, []

    def drop_idle() -> None:  # the connection broke; before the release is sent again,
        lost.append(1)  # another process takes the key it gave back
        assert isinstance(other.acquire_lock(key, sample_holder("b"), 60_000), LockAcquired)
        original()

    pool.drop_idle = drop_idle  # type: ignore[method-assign]
    proxy.arm(taken.token[:0] + key, "answer")
    store.release_lock(key, taken.token)
    assert proxy.tripped.wait(10) and lost == [1]
    pool.drop_idle = original  # type: ignore[method-assign]
    assert store.acquire_lock(key, sample_holder("c"), 60_000) == LockHeld(sample_holder("b"))


def test_the_same_write_sent_again_after_an_unsure_failure_is_looked_up_not_applied_twice(
    store: PostgresStateStore, other: PostgresStateStore, proxy: LosingProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # The call gives up with its write out (no reconnects left); the caller — the run's
    # writer — sends the same delta against the same version again, after a signal landed.
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    marker = f"marker-{uuid.uuid4().hex}"
    delta = RunDelta(updated_at=AT, events=(_event(marker),), status="suspended")
    monkeypatch.setattr(_pg_conn, "RECONNECTS", 0)
    proxy.arm(marker, "answer")
    with pytest.raises(UnsureWriteError):
        store.append_run(record.id, delta, expected_version=created.version)
    assert proxy.tripped.wait(10)
    _signal(other, record.id)
    again = store.append_run(record.id, delta, expected_version=created.version)
    assert isinstance(again, Written)
    assert _details(store, record.id).count(marker) == 1
    # a different write at that version is not taken for it: a true conflict
    other_delta = RunDelta(updated_at=AT, events=(_event("another"),))
    assert store.append_run(record.id, other_delta, expected_version=created.version) == Conflict()


def test_the_same_acquisition_sent_again_after_an_unsure_failure_keeps_its_token(
    store: PostgresStateStore, other: PostgresStateStore, proxy: LosingProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    key = fresh("lock")
    monkeypatch.setattr(_pg_conn, "RECONNECTS", 0)
    proxy.arm(key, "answer")
    with pytest.raises(UnsureWriteError):
        store.acquire_lock(key, sample_holder("a"), 60_000)
    again = store.acquire_lock(key, sample_holder("a"), 60_000)
    assert isinstance(again, LockAcquired)  # not LockHeld by its own earlier claim
    assert [e.holder for e in other.list_locks()] == [sample_holder("a")]
    assert store.renew_lock(key, again.token, 60_000) is True
