"""``delete_run`` forgetting a run's lease against an ``acquire`` of that key, step by step.

The argument of ``_pg_locks``' docstring, checked on two connections with one
held mid-transaction (no timing): a deletion holds the namespace's fence-floor
row ``FOR UPDATE`` while it drops the lease row and raises the floor to its
fence; an acquisition reads the floor ``FOR KEY SHARE``. So

* an acquisition that comes while a deletion is between its steps waits for
  it, then reads the raised floor: its fence is above the forgotten one (an
  ``UPDATE`` alone takes a ``FOR NO KEY UPDATE`` lock, which ``FOR KEY SHARE``
  does not wait for: it would read the old floor and issue a fence that went
  back);
* a deletion that comes while an acquisition is uncommitted waits for it,
  then sees the claim live and keeps the row: the new holder's claim stands.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.pg_support import PgCluster
from zuke.state import _pg_locks, _pg_runs
from zuke.state._protocol import RUN_LEASE_PREFIX, LockAcquired, LockHeld, Written
from zuke.state.postgres import PostgresStateStore
from zuke.testing.store_contract import fresh, sample_holder, sample_record

DEADLINE_S = 30.0


@pytest.fixture
def store(pg_cluster: PgCluster) -> Iterator[PostgresStateStore]:
    s = PostgresStateStore(pg_cluster.create_database(), namespace=f"race-{uuid.uuid4().hex}")
    yield s
    s.close()


def _released_lease(store: PostgresStateStore) -> tuple[str, str, int]:
    """A run whose lease was taken and given back: its id, key and the key's fence."""
    record = sample_record(fresh())
    assert isinstance(store.create_run(record), Written)
    key = RUN_LEASE_PREFIX + record.id
    taken = store.acquire_lock(key, sample_holder("first"), 60_000)
    assert isinstance(taken, LockAcquired)
    store.release_lock(key, taken.token)
    return record.id, key, taken.fence


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    return thread, out


def _wait_until_blocked(store: PostgresStateStore, thread: threading.Thread) -> None:
    """Poll until some backend of the database waits for a lock (the other side's)."""
    deadline = time.monotonic() + DEADLINE_S
    with store.database.connection() as conn:
        while not conn.execute(
            "SELECT count(*) > 0 FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]:  # type: ignore[index]
            assert thread.is_alive(), "it did not wait: it ran through"
            assert time.monotonic() < deadline, "it never waited for the lock"
            time.sleep(0.01)


def test_an_acquisition_during_a_deletion_waits_and_its_fence_is_above_the_forgotten_one(
    store: PostgresStateStore, pg_cluster: PgCluster
) -> None:
    run_id, key, fence = _released_lease(store)
    racer = PostgresStateStore(store.database._url, namespace=store.namespace)
    try:
        # Its pool opened and its floor row ensured: what waits below is the acquisition itself.
        assert isinstance(racer.acquire_lock(fresh("lock"), sample_holder("x"), 1000), LockAcquired)
        with store.database.connection() as conn, conn.transaction():
            # The deletion, up to its last step: the row is gone, the floor raised, no commit.
            _pg_locks.forget_lease(conn, store.namespace, run_id)
            _pg_runs.delete(conn, store.namespace, run_id)
            thread, out = _in_thread(
                lambda: racer.acquire_lock(key, sample_holder("second"), 60_000)
            )
            _wait_until_blocked(store, thread)
        thread.join(DEADLINE_S)
        (taken,) = out
        assert isinstance(taken, LockAcquired)
        assert taken.fence > fence  # never back below a fence the key once had
        assert store.get_run(run_id) is None
    finally:
        racer.close()


def test_a_deletion_during_an_acquisition_waits_and_keeps_the_new_claim(
    store: PostgresStateStore,
) -> None:
    run_id, key, fence = _released_lease(store)
    deleter = PostgresStateStore(store.database._url, namespace=store.namespace)
    try:
        deleter.list_runs()  # its pool opened, its floor row there: the wait is the race's
        with store.database.connection() as conn, conn.transaction():
            taken = _pg_locks.acquire(conn, store.namespace, key, sample_holder("second"), 60_000)
            assert isinstance(taken, LockAcquired) and taken.fence > fence
            thread, _ = _in_thread(lambda: deleter.delete_run(run_id))
            _wait_until_blocked(store, thread)
        thread.join(DEADLINE_S)
        assert not thread.is_alive()
        assert store.get_run(run_id) is None
        (entry,) = store.list_locks()
        assert (entry.key, entry.fence, entry.holder) == (key, taken.fence, sample_holder("second"))
        assert store.acquire_lock(key, sample_holder("third"), 60_000) == LockHeld(
            sample_holder("second")
        )
        assert store.renew_lock(key, taken.token, 60_000) is True
    finally:
        deleter.close()
