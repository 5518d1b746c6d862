"""What ``PostgresStateStore`` promises beyond the contract suite.

The database's clock decides expiry; the schema is versioned and migrated
once; a password never shows; libpq parameters pass through; values Postgres
``text`` refuses round-trip; the journal is compacted; no token is stored;
``import zuke`` does not import psycopg.
"""

from __future__ import annotations

import gc
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import CliRunner
from tests.pg_support import PgCluster
from tests.state.pg_store_support import open_at_once, schema_versions
from zuke._errors import StateError, StoreUnavailableError
from zuke.state import _pg_runs, _pg_schema
from zuke.state._pg_conn import PgDatabase
from zuke.state._pg_schema import from_db, to_db
from zuke.state._protocol import LockAcquired, LockHeld, RunQuery, Written
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, TargetRecord, apply_delta
from zuke.state.resolve import configured_store
from zuke.testing.store_contract import fresh, sample_holder, sample_record

SECRET = "s3cr3t-Pa55word"
DEADLINE_S = 15.0


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStateStore]:
    s = PostgresStateStore(pg_url)
    yield s
    s.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------ the database's clock


def test_expiry_is_judged_by_the_databases_clock_not_the_clients(
    store: PostgresStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = fresh("lock")
    assert isinstance(store.acquire_lock(key, sample_holder("a"), 60_000), LockAcquired)
    # A client whose clock is a year ahead still sees the claim live: it is not asked.
    year = 366 * 24 * 3600.0
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + year)
    monkeypatch.setattr(time, "time_ns", lambda: int((real_time() + year) * 1e9))
    assert store.acquire_lock(key, sample_holder("b"), 60_000) == LockHeld(sample_holder("a"))
    with store.database.connection() as conn:
        row = conn.execute("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)").fetchone()
    assert row is not None
    (entry,) = [e for e in store.list_locks() if e.key == key]
    assert 59_000 <= entry.expires_at - int(row[0]) <= 60_000


def test_a_lock_expires_when_the_databases_time_passes(store: PostgresStateStore) -> None:
    key = fresh("lock")
    first = store.acquire_lock(key, sample_holder("a"), 1)
    assert isinstance(first, LockAcquired)
    deadline = time.monotonic() + DEADLINE_S
    while not isinstance(
        taken := store.acquire_lock(key, sample_holder("b"), 60_000), LockAcquired
    ):
        assert time.monotonic() < deadline, "a 1 ms lock never expired"
    assert taken.fence > first.fence
    assert store.renew_lock(key, first.token, 1000) is False


def test_the_database_holds_no_token(store: PostgresStateStore) -> None:
    key = fresh("lock")
    acquired = store.acquire_lock(key, sample_holder("a"), 60_000)
    assert isinstance(acquired, LockAcquired)
    with store.database.connection() as conn:
        rows = conn.execute("SELECT row_to_json(l)::text FROM zuke_locks l").fetchall()
    assert rows
    spellings = (acquired.token, acquired.token.encode().hex())
    assert all(t not in text for (text,) in rows for t in spellings)


# ------------------------------------------------------------------ schema versions


def test_one_database_opened_by_many_processes_at_once_is_migrated_once(pg_url: str) -> None:
    stores = [PostgresStateStore(pg_url) for _ in range(6)]
    errors = open_at_once(stores, 30)
    try:
        assert errors == []
        assert schema_versions(stores[0]) == list(range(1, _pg_schema.SCHEMA_VERSION + 1))
    finally:
        for s in stores:
            s.close()


def test_a_database_of_an_older_zuke_is_migrated_on_first_use(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = PostgresStateStore(pg_url)
    record = sample_record(fresh())
    assert isinstance(old.create_run(record), Written)
    old.close()
    step = "ALTER TABLE zuke_runs ADD COLUMN note text; CREATE INDEX zuke_note ON zuke_runs (note)"
    newer = _pg_schema.SCHEMA_VERSION + 1
    monkeypatch.setattr(_pg_schema, "SCHEMA_VERSION", newer)
    monkeypatch.setitem(_pg_schema.MIGRATIONS, newer, step)
    new = PostgresStateStore(pg_url)
    try:
        assert new.get_run(record.id) is not None
        assert schema_versions(new) == list(range(1, newer + 1))
        with new.database.connection() as conn:
            assert conn.execute("SELECT note FROM zuke_runs").fetchall() == [(None,)]
    finally:
        new.close()


def test_a_database_of_a_newer_zuke_is_refused(pg_url: str) -> None:
    first = PostgresStateStore(pg_url)
    first.list_runs()
    with first.database.connection() as conn:
        conn.execute("INSERT INTO zuke_schema_version (version) VALUES (99)")
    first.close()
    later = PostgresStateStore(pg_url)
    with pytest.raises(StateError, match=r"newer zuke \(schema 99"):
        later.list_runs()
    later.close()


# ------------------------------------------------------------------ URLs and credentials


@pytest.mark.psycopg
@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://zuke:{SECRET}@127.0.0.1:{{port}}/db",
        f"postgres://zuke@127.0.0.1:{{port}}/db?password={SECRET}",
        f"postgresql://zuke:{SECRET.replace('-', '%2D')}@127.0.0.1:{{port}}/db?sslmode=disable",
    ],
)
def test_a_refused_connection_names_the_host_and_never_the_password(url: str) -> None:
    port = _closed_port()
    store = PostgresStateStore(url.format(port=port))
    with pytest.raises(StoreUnavailableError) as caught:
        store.list_runs()
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message
    assert "check that the server is up" in message
    assert "\n" not in message
    for shown in (message, repr(store), repr(caught.value.__cause__)):
        assert SECRET not in shown and "%2D" not in shown


@pytest.mark.psycopg
def test_a_url_libpq_cannot_parse_is_refused_without_its_password() -> None:
    # libpq quotes the offending token, here the password itself (a bad %-escape).
    store = PostgresStateStore(f"postgresql://zuke:{SECRET}%zz@127.0.0.1:{_closed_port()}/db")
    with pytest.raises(StateError) as caught:
        store.list_runs()
    assert "not a Postgres URL" in str(caught.value)
    assert SECRET not in str(caught.value) and SECRET not in repr(store)


@pytest.mark.psycopg
def test_the_cli_says_one_line_without_the_password(cli: CliRunner) -> None:
    url = f"postgresql://zuke:{SECRET}@127.0.0.1:{_closed_port()}/db"
    result = cli("runs", "list", env={"ZUKE_STATE": url})
    assert result.code != 0
    assert SECRET not in result.text
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("zuke: "), result.err
    assert "127.0.0.1" in lines[0]


def test_a_missing_database_is_one_line_naming_it(pg_cluster: PgCluster) -> None:
    store = PostgresStateStore(pg_cluster.url("no_such_db"))
    with pytest.raises(StoreUnavailableError) as caught:
        store.list_runs()
    message = str(caught.value)
    assert f"127.0.0.1:{pg_cluster.port}/no_such_db" in message
    assert 'database "no_such_db" does not exist' in message and "\n" not in message


def test_an_exhausted_pool_says_how_many_connections_were_in_use(pg_url: str) -> None:
    store = PostgresStateStore(PgDatabase(pg_url, max_connections=1, pool_timeout_s=0.2))
    try:
        with store.database.connection(), pytest.raises(StoreUnavailableError) as caught:
            store.list_runs()  # the only connection is the one held here
        message = str(caught.value)
        assert "all 1 connections of this process's pool to Postgres at" in message
        assert store.database.shown in message and "raise ZUKE_PG_POOL_SIZE (now 1)" in message
        assert "max_connections" in message and "\n" not in message
        assert store.list_runs(RunQuery(limit=1)) == []  # given back: usable again
    finally:
        store.close()


def test_a_store_dropped_without_close_closes_its_pool(pg_url: str) -> None:
    # What every zuke command does: it never closes its store. Left to itself, the pool
    # could be collected on one of its own worker threads, and fail to join that thread.
    store = PostgresStateStore(pg_url)
    store.list_runs()
    pool = store.database._pool
    assert pool is not None and not pool.closed
    del store
    gc.collect()
    assert pool.closed


def test_libpq_parameters_pass_through(pg_cluster: PgCluster, pg_url: str) -> None:
    named = PostgresStateStore(pg_url + "?application_name=zuke-test&sslmode=disable")
    with named.database.connection() as conn:
        row = conn.execute("SELECT current_setting('application_name')").fetchone()
    named.close()
    assert row == ("zuke-test",)
    strict = PostgresStateStore(pg_url + "?sslmode=require")  # the test cluster has no TLS
    with pytest.raises(StoreUnavailableError, match="SSL"):
        strict.list_runs()
    strict.close()


def test_zuke_state_names_the_store_by_either_scheme(pg_url: str) -> None:
    for url in (pg_url, pg_url.replace("postgresql://", "postgres://", 1)):
        store = configured_store({"ZUKE_STATE": url})
        assert isinstance(store, PostgresStateStore)
        assert store.list_runs(RunQuery(limit=1)) == []
        store.close()


def test_import_zuke_and_naming_the_store_do_not_import_psycopg(tmp_path: Path) -> None:
    code = (
        "import sys, zuke\n"
        "from zuke.state.resolve import configured_store\n"
        "import zuke.state.postgres\n"
        "assert not any(m.startswith('psycopg') for m in sys.modules), sorted(sys.modules)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert child.returncode == 0, child.stderr


# ------------------------------------------------------------------ values and the journal


def test_strings_postgres_text_refuses_round_trip_and_filter() -> None:
    odd = ["a\x00b", "x\ud800y", "\uf8ff", "\uf8ff0", "plain", "ünï", "\udfff\x00\uf8ff1"]
    assert [from_db(to_db(s)) for s in odd] == odd
    assert len({to_db(s) for s in odd}) == len(odd)
    assert all("\x00" not in to_db(s) for s in odd)
    assert to_db("plain") == "plain"


def test_a_record_with_such_strings_round_trips_and_lists(store: PostgresStateStore) -> None:
    target = "t\x00\ud800"
    record = replace(
        sample_record(fresh(), targets=("a", target)), actor="bob\x00\ud800", build="B\uf8ff1"
    )
    assert isinstance(store.create_run(record), Written)
    assert store.get_run(record.id) is not None
    stored = store.get_run(record.id)
    assert stored is not None and stored.record == record
    assert store.list_runs(RunQuery(target=target, build="B\uf8ff1")) == [record.summary()]
    holder = replace(sample_holder("r\x00"), actor="\ud800")
    key = fresh("lock")
    assert isinstance(store.acquire_lock(key, holder, 60_000), LockAcquired)
    assert [e.holder for e in store.list_locks(run_id="r\x00")] == [holder]


def test_the_journal_is_folded_into_the_record_once_it_outweighs_it(
    store: PostgresStateStore,
) -> None:
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    version, expected = created.version, record
    big = "x" * 4096
    for i in range(20):  # 80 KiB of deltas: past the 64 KiB floor
        delta = RunDelta(
            updated_at=f"2026-01-02T03:05:{i:02d}.000Z",
            targets={"build": TargetRecord(status="running", meta={"blob": big, "i": i})},
        )
        result = store.append_run(record.id, delta, expected_version=version)
        assert isinstance(result, Written)
        version = result.version
        expected = apply_delta(expected, delta)
    with store.database.connection() as conn:
        (deltas,) = conn.execute("SELECT count(*) FROM zuke_run_deltas").fetchone() or (0,)
        (journal,) = conn.execute("SELECT journal_bytes FROM zuke_runs").fetchone() or (0,)
    assert deltas < 20 and journal < _pg_runs.COMPACT_MIN_BYTES
    stored = store.get_run(record.id)
    assert stored is not None
    assert (stored.record, stored.version) == (expected, version)
    assert json.loads(json.dumps(stored.record.targets["build"].meta))["i"] == 19
