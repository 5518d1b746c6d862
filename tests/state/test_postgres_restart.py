"""Compare-and-swap writers on the Postgres store while the server restarts under them.

A cluster of this module's own is restarted with ``pg_ctl restart -m
immediate`` (every backend killed at once, as in a crash) twice while four
threads, each with its own store and pool, append to one run in a
compare-and-swap loop. No call may fail (the store runs it again on a fresh
connection, the pool waiting for the server), and every append must be in
the record exactly once: a write whose answer was lost is read back, never
taken for a conflict and sent again, nor for a failure.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.pg_support import PgCluster
from zuke.state._protocol import Written
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, RunEvent
from zuke.testing.store_contract import fresh, sample_record

WRITERS = 4
APPENDS = 60
RESTART_AT = (40, 140)
DEADLINE_S = 120.0

# slow (a cluster of its own, initdb and two restarts: 2.2 s of CPU, 6-10 s): in the inner loop
# tests/state/test_postgres_faults.py covers what a restart does to the store — lost answers
# read back and applied once, connections the server killed replaced without failing a call
pytestmark = pytest.mark.slow


def test_appends_through_two_restarts_each_land_exactly_once(restartable: PgCluster) -> None:
    url = restartable.create_database()
    stores = [PostgresStateStore(url) for _ in range(WRITERS)]
    record = sample_record(fresh())
    assert isinstance(stores[0].create_run(record), Written)
    progress = [0] * WRITERS
    errors: list[BaseException] = []

    def write(i: int) -> None:
        store = stores[i]
        try:
            for n in range(APPENDS):
                event = RunEvent(
                    at="2026-01-02T03:04:05.000Z", tool="t", actor="a", detail=f"{i}.{n}"
                )
                delta = RunDelta(updated_at="2026-01-02T03:04:05.000Z", events=(event,))
                while True:  # the CAS loop every writer of a record runs
                    stored = store.get_run(record.id)
                    assert stored is not None
                    if isinstance(
                        store.append_run(record.id, delta, expected_version=stored.version),
                        Written,
                    ):
                        break
                progress[i] = n + 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    try:
        for at in RESTART_AT:
            deadline = time.monotonic() + DEADLINE_S
            while sum(progress) < at and not errors:
                assert time.monotonic() < deadline, f"never reached {at} appends: {progress}"
                time.sleep(0.005)
            restartable.restart()
        for thread in threads:
            thread.join(DEADLINE_S)
        # each error in full: pytest's diff cuts long ones ("… within 30s: Co…ing TCP/IP
        # connections?" hid whether a refusal or a reset had failed a writer)
        assert errors == [], f"{[str(e) for e in errors]}; restarts took {restartable.restarts} s"
        assert progress == [APPENDS] * WRITERS
        stored = stores[0].get_run(record.id)
        assert stored is not None
        details = [e.detail or "" for e in stored.record.events]
        expected = [f"{i}.{n}" for i in range(WRITERS) for n in range(APPENDS)]
        assert sorted(details) == sorted(expected)  # each once: none lost, none twice
        assert len(set(details)) == len(details)
    finally:
        for store in stores:
            store.close()
