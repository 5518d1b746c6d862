"""Schema 5 (issue 28 §2): a run's target names without a foreign key, the record in lz4.

The target names' foreign key cost a run's creation a look-up per graph node;
without it a run's deletion removes its names itself, in the transaction that
removes its row. A schema-4 database is migrated with its names kept, and the
``target`` filter still finds exactly the runs that are there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.state.pg_rows import run_rows
from tests.state.pg_store_support import schema_versions
from zuke.state import _pg_schema
from zuke.state._protocol import RunQuery, Written
from zuke.state.postgres import PostgresStateStore
from zuke.testing.store_contract import fresh, sample_record


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStateStore]:
    s = PostgresStateStore(pg_url)
    yield s
    s.close()


def _foreign_keys(store: PostgresStateStore) -> int:
    with store.database.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f'"
            " AND conrelid = 'zuke_run_targets'::regclass"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_deleted_runs_target_names_go_with_it(store: PostgresStateStore) -> None:
    kept, gone = sample_record(fresh(), targets=("lint", "ship")), sample_record(fresh())
    for record in (kept, gone):
        assert isinstance(store.create_run(record), Written)
    assert _foreign_keys(store) == 0  # what made each creation check every name
    assert run_rows(store, "zuke_run_targets", gone.id) == 2
    store.delete_run(gone.id)
    assert run_rows(store, "zuke_run_targets", gone.id) == 0
    assert run_rows(store, "zuke_run_targets", kept.id) == 2
    assert [s.id for s in store.list_runs(RunQuery(target="ship"))] == [kept.id]
    assert gone.id not in [s.id for s in store.list_runs(RunQuery(target="build"))]


def test_the_record_is_compressed_with_lz4_where_the_server_can(
    store: PostgresStateStore,
) -> None:
    record = sample_record(fresh(), targets=tuple(f"t{i:04d}" for i in range(400)))
    assert isinstance(store.create_run(record), Written)
    with store.database.connection() as conn:
        version = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        if version is None or version[0] < 140000:
            pytest.skip("a server before 14 has one compression (pglz) and no way to ask")
        lz4 = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression'"
            " AND 'lz4' = ANY(enumvals))"
        ).fetchone()
        used = conn.execute(
            "SELECT pg_column_compression(record) FROM zuke_runs WHERE id = %s", (record.id,)
        ).fetchone()
    assert lz4 is not None and used is not None
    assert used[0] == ("lz4" if lz4[0] else "pglz")
    stored = store.get_run(record.id)
    assert stored is not None and stored.record == record


def test_a_schema_4_database_is_migrated_with_its_names(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = sample_record(fresh(), targets=("lint", "ship"))
    with monkeypatch.context() as m:
        m.setattr(_pg_schema, "SCHEMA_VERSION", 4)
        old = PostgresStateStore(pg_url)
        assert isinstance(old.create_run(record), Written)
        assert schema_versions(old) == [1, 2, 3, 4]
        assert _foreign_keys(old) == 1
        old.close()
    store = PostgresStateStore(pg_url)
    try:
        assert [s.id for s in store.list_runs(RunQuery(target="lint"))] == [record.id]
        assert schema_versions(store) == [1, 2, 3, 4, 5]
        assert _foreign_keys(store) == 0
        store.delete_run(record.id)
        assert run_rows(store, "zuke_run_targets", record.id) == 0
        assert store.list_runs(RunQuery(target="lint")) == []
    finally:
        store.close()
