"""Postgres wakes for the watching sweeper: schema 2's NOTIFY triggers and the store's ``listen``.

Notifications are collected until an expected one arrives (a poll with a
deadline); "nothing else was sent" is proven by a later sentinel write whose
notification is the next one heard.
"""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.state.pg_store_support import listeners, open_at_once, schema_versions
from zuke.state import _pg_schema
from zuke.state._pg_listen import APPLICATION_NAME, Listener
from zuke.state._pg_runs import dumps
from zuke.state._protocol import Written
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, Signal, TargetRecord
from zuke.state.wire import record_to_json
from zuke.testing.store_contract import fresh, sample_record

DEADLINE_S = 30.0
SECRET = "s3cr3t-value-never-notified"


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStateStore]:
    s = PostgresStateStore(pg_url)
    yield s
    s.close()


class Heard:
    """A raw ``LISTEN zuke_runs`` connection: the payloads, in order."""

    def __init__(self, url: str) -> None:
        import psycopg2

        self.conn = psycopg2.connect(url)
        self.conn.autocommit = True
        self.conn.cursor().execute("LISTEN zuke_runs")

    def next(self) -> dict[str, Any]:
        deadline = time.monotonic() + DEADLINE_S
        while not self.conn.notifies and time.monotonic() < deadline:
            select.select([self.conn], [], [], 0.5)
            self.conn.poll()
        if not self.conn.notifies:
            raise AssertionError("no notification within the deadline")
        note = self.conn.notifies.pop(0)
        assert note.channel == "zuke_runs"
        assert len(note.payload.encode()) < 8000
        parsed: dict[str, Any] = json.loads(note.payload)
        return parsed

    def close(self) -> None:
        self.conn.close()


def _suspended(store: PostgresStateStore) -> tuple[str, str]:
    """A run created running, then parked; its id and version."""
    record = sample_record(fresh())
    record = replace(record, status="running", params={"token": SECRET})
    created = store.create_run(record)
    assert isinstance(created, Written)
    parked = store.append_run(
        record.id, RunDelta(updated_at=record.updated_at, status="suspended"),
        expected_version=created.version,
    )  # fmt: skip
    assert isinstance(parked, Written)
    return record.id, parked.version


def test_a_parked_run_and_a_signal_notify_its_id_and_status_only(
    store: PostgresStateStore, pg_url: str
) -> None:
    store.list_runs()  # migrated
    heard = Heard(pg_url)
    try:
        run_id, version = _suspended(store)
        assert heard.next() == {"ns": "", "id": run_id, "status": "suspended"}
        signal = Signal(data={"token": SECRET, "blob": "x" * 20_000}, received_at="now", id="k")
        delta = RunDelta(updated_at="now", signals={"approved": signal})
        assert isinstance(store.append_run(run_id, delta, expected_version=version), Written)
        payload = heard.next()
        assert payload == {"ns": "", "id": run_id, "status": "suspended"}
        assert SECRET not in json.dumps(payload)
    finally:
        heard.close()


def test_writes_that_matter_to_no_sweep_notify_nothing(
    store: PostgresStateStore, pg_url: str
) -> None:
    store.list_runs()
    heard = Heard(pg_url)
    try:
        record = replace(sample_record(fresh()), status="running")
        created = store.create_run(record)  # created running: not parked
        assert isinstance(created, Written)
        stamp = RunDelta(updated_at="later",
                         targets={"build": TargetRecord(status="waiting")})  # fmt: skip
        stamped = store.append_run(record.id, stamp, expected_version=created.version)
        assert isinstance(stamped, Written)  # a check stamp: status unchanged, no signal
        ended = store.put_run(replace(record, status="succeeded"),
                              expected_version=stamped.version)  # fmt: skip
        assert isinstance(ended, Written)
        sentinel, _ = _suspended(store)
        assert heard.next()["id"] == sentinel  # the first notification is the sentinel's
    finally:
        heard.close()


def test_a_parked_run_in_another_namespace_names_its_namespace(pg_url: str) -> None:
    other = PostgresStateStore(pg_url, namespace="team-b")
    try:
        other.list_runs()
        heard = Heard(pg_url)
        try:
            run_id, _ = _suspended(other)
            assert heard.next() == {"ns": "team-b", "id": run_id, "status": "suspended"}
        finally:
            heard.close()
    finally:
        other.close()


def test_an_outsized_namespace_still_writes_and_notifies_an_empty_payload(pg_url: str) -> None:
    huge = PostgresStateStore(pg_url, namespace="n" * 9000)
    try:
        huge.list_runs()
        heard = Heard(pg_url)
        try:
            _suspended(huge)  # NOTIFY refuses 8000 bytes: the write must not fail for it
            assert heard.next() == {}
        finally:
            heard.close()
    finally:
        huge.close()


def test_an_older_store_is_migrated_to_the_triggers_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(_pg_schema, "SCHEMA_VERSION", 1)
        old = PostgresStateStore(pg_url)
        record = sample_record(fresh())
        with old.database.connection() as conn:  # a run as a zuke of schema 1 wrote it
            conn.execute(
                "INSERT INTO zuke_runs (ns, id, version, record, build, root_target, status,"
                " actor, created_at, updated_at, base_bytes) VALUES ('', %s, 1, %s, 'B', 'r',"
                " 'running', 'a', 'now', 'now', 2)",
                (record.id, dumps(record_to_json(record))),
            )
        assert schema_versions(old) == [1]
        old.close()
    stores = [PostgresStateStore(pg_url) for _ in range(4)]
    errors = open_at_once(stores, DEADLINE_S)
    try:
        assert errors == []
        assert schema_versions(stores[0]) == list(range(1, _pg_schema.SCHEMA_VERSION + 1))
        assert stores[0].get_run(record.id) is not None
        with stores[0].database.connection() as conn:
            triggers = conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgname LIKE 'zuke_%' ORDER BY tgname"
            ).fetchall()
        assert [t for (t,) in triggers] == [
            "zuke_runs_created_parked", "zuke_runs_parked",  # a signal: the append notifies
        ]  # fmt: skip
        heard = Heard(pg_url)
        try:
            run_id, _ = _suspended(stores[0])
            assert heard.next()["id"] == run_id
        finally:
            heard.close()
    finally:
        for s in stores:
            s.close()


class Wakes:
    """What a listener called ``wake`` with; ``wait_for`` polls with a deadline."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self._cond = threading.Condition()

    def __call__(self, kind: str, detail: str | None) -> None:
        with self._cond:
            self.seen.append((kind, detail))
            self._cond.notify_all()

    def wait_for(self, kind: str, detail: str | None = None) -> None:
        def found() -> bool:
            return any(k == kind and (detail is None or d == detail) for k, d in self.seen)

        with self._cond:
            if not self._cond.wait_for(found, timeout=DEADLINE_S):
                raise AssertionError(f"no {kind} wake ({detail}) within the deadline: {self.seen}")


def test_listen_wakes_on_a_parked_run_and_reconnects_after_its_connection_drops(
    store: PostgresStateStore, pg_url: str
) -> None:
    wakes = Wakes()
    listener = store.listen(wakes)
    try:

        def is_listening() -> bool:
            return listeners(store) == 1

        _wait(is_listening, "the listener to LISTEN")
        first, _ = _suspended(store)
        wakes.wait_for("notify", first)
        with store.database.connection() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND datname = current_database()",
                (APPLICATION_NAME,),
            )
        wakes.wait_for("lost")
        wakes.wait_for("reconnected")
        lost = next(d for k, d in wakes.seen if k == "lost")
        assert lost is not None and "postgresql://zuke@127.0.0.1" in lost
        _wait(is_listening, "the listener to LISTEN again")
        second, _ = _suspended(store)
        wakes.wait_for("notify", second)
    finally:
        listener.close()
    kinds = [k for k, _ in wakes.seen]
    assert kinds.index("lost") < kinds.index("reconnected")


def _wait(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_listener_that_cannot_connect_says_so_without_the_password() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    store = PostgresStateStore(f"postgresql://zuke:hunter2-secret@127.0.0.1:{port}/db")
    wakes = Wakes()
    listener = store.listen(wakes)
    try:
        wakes.wait_for("lost")
    finally:
        listener.close()
        store.close()
    [lost] = [d for k, d in wakes.seen if k == "lost"]  # said once, not at every retry
    assert lost is not None
    assert "hunter2" not in lost and f"postgresql://zuke@127.0.0.1:{port}/db" in lost
    assert "\n" not in lost


def _listen_backend(store: PostgresStateStore) -> int:
    with store.database.connection() as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND query LIKE 'LISTEN%%' AND datname = current_database()",
            (APPLICATION_NAME,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_frozen_listen_backend_is_noticed_said_once_and_listened_around(
    store: PostgresStateStore,
) -> None:
    # A hung peer: the backend holding our LISTEN stops (SIGSTOP) without closing anything,
    # so nothing on the socket says so; only the ping's deadline can notice.
    wakes = Wakes()
    listener = Listener(store.database, "", wakes, ping_s=0.3).start()
    frozen: int | None = None
    try:
        wakes.wait_for("listening")
        frozen = _listen_backend(store)
        os.kill(frozen, signal.SIGSTOP)
        wakes.wait_for("reconnected")
        lost = [d for k, d in wakes.seen if k == "lost"]
        assert len(lost) == 1 and lost[0] is not None and "hung peer" in lost[0], wakes.seen
        assert "postgresql://zuke@127.0.0.1" in lost[0]
        run_id, _ = _suspended(store)  # the new connection hears what the frozen one cannot
        wakes.wait_for("notify", run_id)
    finally:
        listener.close()
        if frozen is not None:
            os.kill(frozen, signal.SIGCONT)
