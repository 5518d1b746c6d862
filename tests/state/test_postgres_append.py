"""The append on Postgres (schema 4): one function call, one round trip a transition.

A transition of a run is one append (``update_run`` → ``append_run_known``);
on Postgres it is one call of ``zuke_append``, which updates the run, stores
the delta and its witness in one transaction. The journal and the witnesses
have no foreign key any more (its check cost each append a look-up of the row
it had just updated), so a run's deletion removes them itself — also while
another process appends to the run — and a schema-3 database is migrated with
its journal kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.state.pg_store_support import schema_versions
from zuke.state import _pg_append, _pg_pool, _pg_runs, _pg_schema
from zuke.state._pg_runs import dumps
from zuke.state._protocol import Conflict, Written
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, RunEvent, RunRecord, TargetRecord, apply_delta
from zuke.state.update import GaveUp, Updated, update_run
from zuke.state.wire import delta_to_json, record_to_json
from zuke.testing.store_contract import fresh, sample_record

AT = "2026-01-02T03:04:05.000Z"


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStateStore]:
    s = PostgresStateStore(pg_url)
    yield s
    s.close()


class Statements:
    """The statements the store's connections send (``PgConn.execute``), up to a parenthesis."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        original = _pg_pool.PgConn.execute

        def execute(conn: _pg_pool.PgConn, sql: str | bytes, params: Any = None) -> Any:
            text = sql if isinstance(sql, str) else sql.decode()
            self.sent.append(text.split("(")[0])
            return original(conn, sql, params)

        monkeypatch.setattr(_pg_pool.PgConn, "execute", execute)


def _owned_rows(store: PostgresStateStore, run_id: str) -> tuple[int, int]:
    """(deltas, witnesses) the database keeps for ``run_id``: an append's witness rides in
    its delta's row (schema 4), any other write's is a row of ``zuke_run_writes``."""
    with store.database.connection() as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM zuke_run_deltas WHERE run_id = %(id)s),"
            " (SELECT count(*) FROM zuke_run_writes WHERE run_id = %(id)s)"
            " + (SELECT count(*) FROM zuke_run_deltas WHERE run_id = %(id)s"
            " AND write_key IS NOT NULL)",
            {"id": run_id},
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _step(i: int) -> RunDelta:
    return RunDelta(updated_at=AT, targets={f"t{i:04d}": TargetRecord(status="running",
                                                                      started_at=AT)})  # fmt: skip


def _stepper(i: int) -> Callable[[RunRecord], RunDelta]:
    return lambda record: _step(i)


def test_a_transition_is_one_statement_one_round_trip(
    store: PostgresStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    statements = Statements(monkeypatch)
    version = created.version
    for i in range(20):
        written = store.append_run(record.id, _step(i), expected_version=version)
        assert isinstance(written, Written)
        version = written.version
    # the versions come 128 to a round trip, drawn with the create: nothing but the appends,
    # the statement prepared once on the connection
    assert statements.sent == [f"PREPARE {_pg_append.NAME} "] + [f"EXECUTE {_pg_append.NAME} "] * 20
    stored = store.get_run(record.id)
    assert stored is not None and stored.version == version
    assert sorted(stored.record.targets) == sorted(
        {*record.targets, *(f"t{i:04d}" for i in range(20))}
    )
    assert _owned_rows(store, record.id) == (20, 21)  # each write's witness, the create's too


def test_a_connection_that_cannot_keep_a_prepared_statement_calls_the_function(
    store: PostgresStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a transaction pooler the next statement may go to another server connection,
    which answers "prepared statement does not exist" before running anything (here: the
    server forgets it, ``DEALLOCATE ALL``): the append is made by ``zuke_append`` instead, once,
    and the connection stops preparing."""
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    first = store.append_run(record.id, _step(0), expected_version=created.version)
    assert isinstance(first, Written)
    with store.database.connection() as conn:  # the pool's one connection
        conn.execute("DEALLOCATE ALL")
    statements = Statements(monkeypatch)
    version = first.version
    for i in range(1, 4):
        written = store.append_run(record.id, _step(i), expected_version=version)
        assert isinstance(written, Written)
        version = written.version
    assert statements.sent == [f"EXECUTE {_pg_append.NAME} "] + ["SELECT zuke_append"] * 3
    stored = store.get_run(record.id)
    assert stored is not None and stored.version == version
    assert {f"t{i:04d}" for i in range(4)} <= set(stored.record.targets)
    assert _owned_rows(store, record.id) == (4, 5)  # each append once


def test_an_append_that_parks_or_renames_still_sets_the_listed_columns(
    store: PostgresStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    statements = Statements(monkeypatch)
    parked = store.append_run(record.id, RunDelta(updated_at=AT, status="suspended", actor="bob"),
                              expected_version=created.version)  # fmt: skip
    assert isinstance(parked, Written)
    # the parking trigger's column: its own prepared statement, prepared when first needed
    assert statements.sent == [f"PREPARE {_pg_append.STATUS_NAME} ",
                               f"EXECUTE {_pg_append.STATUS_NAME} "]  # fmt: skip
    [summary] = [s for s in store.list_runs() if s.id == record.id]
    assert (summary.status, summary.actor, summary.updated_at) == ("suspended", "bob", AT)
    stale = store.append_run(record.id, _step(1), expected_version=created.version)
    assert stale == Conflict()
    assert _owned_rows(store, record.id) == (1, 2)  # the conflict stored nothing


@pytest.mark.parametrize("known", [True, False], ids=["from-the-record", "folded-here"])
def test_a_compaction_keeps_the_appends_witnesses(store: PostgresStateStore, known: bool) -> None:
    """The witnesses ride in the delta rows a compaction deletes: they are moved to
    ``zuke_run_writes`` in the same transaction, so a lost answer is still decided."""
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    first = store.append_run(record.id, _step(0), expected_version=created.version)
    assert isinstance(first, Written)
    big = RunDelta(updated_at=AT, events=(RunEvent(at=AT, tool="t", actor="a",
                                                   detail="x" * 70_000),))  # fmt: skip
    after = apply_delta(apply_delta(record, _step(0)), big)
    folded = (
        store.append_run_known(record.id, big, expected_version=first.version, after=after)
        if known
        else store.append_run(record.id, big, expected_version=first.version)
    )
    assert isinstance(folded, Written)
    assert _owned_rows(store, record.id) == (0, 3)  # the journal folded, no witness lost
    with store.database.connection() as conn:
        for written in (first, folded):
            made, now = _pg_runs.witnessed(conn, "", record.id, f"v:{written.version}")
            assert (made, now) == (int(written.version), int(folded.version))
    stored = store.get_run(record.id)
    assert stored is not None and stored.record == after


def test_a_whole_record_written_over_the_journal_keeps_its_witnesses(
    store: PostgresStateStore,
) -> None:
    """``put_run`` replaces the record and drops its journal; the appends' witnesses, which
    rode in the journal's rows, move to ``zuke_run_writes`` in the same statement."""
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    first = store.append_run(record.id, _step(0), expected_version=created.version)
    assert isinstance(first, Written)
    put = store.put_run(replace(record, actor="bob"), expected_version=first.version)
    assert isinstance(put, Written)
    assert _owned_rows(store, record.id) == (0, 3)
    with store.database.connection() as conn:
        made, now = _pg_runs.witnessed(conn, "", record.id, f"v:{first.version}")
    assert (made, now) == (int(first.version), int(put.version))


def test_deleting_a_run_removes_its_journal_and_witnesses(store: PostgresStateStore) -> None:
    record = sample_record(fresh())
    assert isinstance(store.create_run(record), Written)
    for i in range(3):
        assert isinstance(update_run(store, record.id, _stepper(i)), Updated)
    assert _owned_rows(store, record.id) == (3, 4)
    store.delete_run(record.id)
    assert _owned_rows(store, record.id) == (0, 0)
    again = store.create_run(record)  # the same id again: nothing of the old run is found
    assert isinstance(again, Written)
    stored = store.get_run(record.id)
    assert stored is not None and stored.record == record


def _delete_while_appending(pg_url: str, store: PostgresStateStore, run_id: str) -> list[object]:
    """Delete ``run_id`` while another store appends to it as fast as it can; what each of
    its appends came to."""
    appender = PostgresStateStore(pg_url)
    started, stop = threading.Event(), threading.Event()
    outcomes: list[object] = []

    def append() -> None:
        i = 0
        while not stop.is_set():
            try:
                outcomes.append(update_run(appender, run_id, _stepper(i), attempts=1))
            except Exception as exc:  # the run is gone: RunNotFoundError
                outcomes.append(exc)
                return
            i += 1
            started.set()

    thread = threading.Thread(target=append)
    thread.start()
    try:
        assert started.wait(30)
        store.delete_run(run_id)
    finally:
        stop.set()
        thread.join(30)
        appender.close()
    return outcomes


def test_a_run_deleted_while_another_process_appends_leaves_nothing_behind(
    pg_url: str, store: PostgresStateStore
) -> None:
    """The deletion's row ``DELETE`` waits for an append in flight and its later statements
    see it; an append after it finds no row. Whatever the interleaving, nothing is left."""
    for _ in range(5):
        record = sample_record(fresh())
        assert isinstance(store.create_run(record), Written)
        outcomes = _delete_while_appending(pg_url, store, record.id)
        assert store.get_run(record.id) is None
        assert _owned_rows(store, record.id) == (0, 0)
        assert any(isinstance(o, Updated) for o in outcomes)
        assert all(isinstance(o, Updated | GaveUp | Exception) for o in outcomes)


def test_a_schema_3_database_is_migrated_with_its_journal(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = sample_record(fresh())
    delta = RunDelta(updated_at=AT, events=(RunEvent(at=AT, tool="t", actor="a"),))
    with monkeypatch.context() as m:
        m.setattr(_pg_schema, "SCHEMA_VERSION", 3)
        old = PostgresStateStore(pg_url)
        assert isinstance(old.create_run(record), Written)
        with old.database.connection() as conn:  # an append as a zuke of schema 3 made it
            conn.execute(
                "WITH u AS (UPDATE zuke_runs SET version = version + 1000, last_seq = 1"
                " WHERE ns = '' AND id = %(id)s RETURNING ns, id, version),"
                " d AS (INSERT INTO zuke_run_deltas (ns, run_id, seq, delta)"
                " SELECT ns, id, 1, %(delta)s FROM u)"
                " INSERT INTO zuke_run_writes (ns, run_id, write_key, version)"
                " SELECT ns, id, 'k:old', version FROM u",
                {"id": record.id, "delta": dumps(delta_to_json(delta))},
            )
            keys = conn.execute(
                "SELECT count(*) FROM pg_constraint WHERE contype = 'f'"
                " AND conrelid IN ('zuke_run_deltas'::regclass, 'zuke_run_writes'::regclass)"
            ).fetchone()
        assert keys == (2,)
        assert schema_versions(old) == [1, 2, 3]
        old.close()
    store = PostgresStateStore(pg_url)
    try:
        stored = store.get_run(record.id)  # the first use migrates
        assert schema_versions(store) == list(range(1, _pg_schema.SCHEMA_VERSION + 1))
        assert stored is not None and stored.record.events == delta.events
        with store.database.connection() as conn:
            keys = conn.execute(
                "SELECT count(*) FROM pg_constraint WHERE contype = 'f'"
                " AND conrelid IN ('zuke_run_deltas'::regclass, 'zuke_run_writes'::regclass)"
            ).fetchone()
        assert keys == (0,)
        done = replace(stored.record, status="succeeded")
        written = store.append_run(record.id, RunDelta(updated_at=AT, status="succeeded"),
                                   expected_version=stored.version)  # fmt: skip
        assert isinstance(written, Written)
        again = store.get_run(record.id)
        assert again is not None and again.record.status == done.status
        assert dumps(record_to_json(again.record)) == dumps(record_to_json(replace(
            done, updated_at=AT)))  # fmt: skip
        store.delete_run(record.id)
        assert _owned_rows(store, record.id) == (0, 0)
    finally:
        store.close()
