"""The light path's writes (libpq through ctypes): what they send, that they land once
whatever is lost on the way, and that anything they cannot carry is the full store's.

The contract suite runs on the light path in ``test_pg_light_contract.py``; here are
its mechanisms: psycopg's placeholders and values as libpq's, a statement prepared on
its second run, a lost answer or request handed to the full store (which checks whether
the write landed before it sends it again), a refused statement answered by the full
store, a compaction from the record the caller knows, and the run's writes made on the
event loop's thread.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.pg_support import LosingProxy, Mode, PgCluster
from zuke import Build, execute, target
from zuke._engine.store_traits import local
from zuke._errors import StoreUnavailableError
from zuke.state import _pg_runs
from zuke.state._pg_libpq import LibpqConnection, adapt, placeholders, text_array
from zuke.state._pg_light import LightPostgresStore
from zuke.state._protocol import Conflict, LockAcquired, LockHeld, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, RunEvent, TargetRecord, apply_delta
from zuke.testing.store_contract import fresh, sample_holder, sample_record


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    url = pg_cluster.create_database()
    full = PostgresStateStore(url)
    full.initialize()  # the light path needs the schema at this zuke's version
    full.close()
    return url


@pytest.fixture
def light(pg_url: str) -> Iterator[LightPostgresStore]:
    store = LightPostgresStore(pg_url)
    yield store
    store.close()


@pytest.fixture
def proxied(pg_url: str, pg_cluster: PgCluster, proxy: LosingProxy) -> Iterator[LightPostgresStore]:
    store = LightPostgresStore(pg_url.replace(f":{pg_cluster.port}/", f":{proxy.port}/"))
    yield store
    store.close()


def _pool_opened(store: PostgresStateStore) -> bool:
    return getattr(store.database, "_pool", None) is not None


def _event(detail: str) -> RunEvent:
    return RunEvent(at="2026-01-02T03:04:05.000Z", tool="test", actor="tester", detail=detail)


# ------------------------------------------------------------------ what is sent


def test_psycopg_placeholders_become_numbered_and_a_name_keeps_its_number() -> None:
    sql, order = placeholders(b"SELECT %(a)s, %(b)s, %(a)s WHERE x LIKE 'p%%'")
    assert sql == b"SELECT $1, $2, $1 WHERE x LIKE 'p%'"
    assert order == ("a", "b")
    sql, order = placeholders(b"SELECT %s, %s")
    assert (sql, order) == (b"SELECT $1, $2", (0, 1))


def test_values_go_as_psycopg_sends_them() -> None:
    assert adapt(None) == (None, 0)
    assert adapt("t") == (b"t", 0)  # untyped: the server infers it, as for psycopg's str
    assert adapt(7) == (b"7", 20)
    assert adapt(True) == (b"t", 16)
    assert adapt(b"\x00\xff") == (b"\\x00ff", 17)
    text, oid = adapt(['a"b', "c\\d", "", "NULL"])
    assert oid == 1009 and text_array((text or b"").decode()) == ['a"b', "c\\d", "", "NULL"]


def test_typed_values_come_back_typed(light: LightPostgresStore) -> None:
    row = light.reader.run(
        lambda conn: conn.execute(
            "SELECT %s::bigint, %s::int, true, false, %s::bytea, ARRAY['x', %s], 'é', NULL",
            (2**40, 3, b"\x01\x02", 'q"'),
        ).fetchone()
    )
    assert row == (2**40, 3, True, False, b"\x01\x02", ["x", 'q"'], "é", None)


def test_a_statement_run_twice_is_prepared(light: LightPostgresStore) -> None:
    looks: list[int] = []

    def prepared(conn: LibpqConnection) -> int:  # a new text each time: never prepared itself
        looks.append(len(looks))
        sql = f"SELECT count(*) FROM pg_prepared_statements -- look {len(looks)}"
        row = conn.execute(sql).fetchone()
        assert row is not None
        return int(row[0])

    def twice(conn: LibpqConnection) -> tuple[int, int, int]:
        before = prepared(conn)
        conn.execute("SELECT %s::int + 1", (1,))
        once = prepared(conn)
        conn.execute("SELECT %s::int + 1", (2,))
        return before, once, prepared(conn)

    before, once, after = light.reader.run(twice)
    assert once == before and after == before + 1


# ------------------------------------------------------------------ the run's writes


def test_a_run_writes_through_libpq_and_never_loads_psycopg(
    light: LightPostgresStore, pg_url: str
) -> None:
    record = sample_record(fresh())
    created = light.create_run(record)
    assert isinstance(created, Written)
    delta = RunDelta(updated_at="2026-01-02T03:04:05.000Z", targets={"a": TargetRecord("running")})
    after = apply_delta(record, delta)
    written = light.append_run_known(
        record.id, delta, expected_version=created.version, after=after
    )
    assert isinstance(written, Written)
    assert light.append_run(record.id, delta, expected_version=created.version) == Conflict()
    key = fresh("lock")
    taken = light.acquire_lock(key, sample_holder(record.id), 60_000)
    assert isinstance(taken, LockAcquired)
    assert light.acquire_lock(key, sample_holder("b"), 60_000) == LockHeld(sample_holder(record.id))
    assert light.renew_lock(key, taken.token, 60_000) is True
    assert not _pool_opened(light)
    full = PostgresStateStore(pg_url)
    try:
        stored = full.get_run(record.id)
        assert stored is not None and (stored.record, stored.version) == (after, written.version)
        assert [lock.key for lock in full.list_locks()] == [key]
        light.release_lock(key, taken.token)
        assert full.list_locks() == []
    finally:
        full.close()


def test_a_compaction_due_writes_the_record_it_is_given(
    light: LightPostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pg_runs, "COMPACT_MIN_BYTES", 1)
    record = sample_record(fresh())
    created = light.create_run(record)
    assert isinstance(created, Written)
    delta = RunDelta(updated_at="2026-01-02T03:04:05.000Z", events=(_event("x" * 4096),))
    # What update_run would pass is apply_delta(record, delta); a marker shows it is used
    # as it is, never folded again from the journal.
    given = replace(apply_delta(record, delta), actor="the-record-given")
    written = light.append_run_known(
        record.id, delta, expected_version=created.version, after=given
    )
    assert isinstance(written, Written)
    stored = light.get_run(record.id)
    assert stored is not None and (stored.record, stored.version) == (given, written.version)
    count = light.reader.run(
        lambda conn: conn.execute(
            "SELECT count(*) FROM zuke_run_deltas WHERE run_id = %s", (record.id,)
        ).fetchone()
    )
    assert count == (0,)


# ------------------------------------------------------------------ faults


@pytest.mark.parametrize("mode", ["answer", "request"])
def test_an_append_lost_on_the_light_path_lands_once(
    proxied: LightPostgresStore, proxy: LosingProxy, mode: Mode
) -> None:
    record = sample_record(fresh())
    created = proxied.create_run(record)
    assert isinstance(created, Written) and not _pool_opened(proxied)
    marker = f"marker-{uuid.uuid4().hex}"
    proxy.arm(marker, mode)
    delta = RunDelta(updated_at="2026-01-02T03:04:05.000Z", events=(_event(marker),))
    result = proxied.append_run(record.id, delta, expected_version=created.version)
    assert proxy.tripped.is_set()
    assert isinstance(result, Written)  # never a Conflict with itself
    assert not proxied.reader.usable and _pool_opened(proxied)  # the full store took over
    stored = proxied.get_run(record.id)
    assert stored is not None and stored.version == result.version
    assert [e.detail for e in stored.record.events].count(marker) == 1


@pytest.mark.parametrize("mode", ["answer", "request"])
def test_a_create_and_an_acquisition_lost_on_the_light_path_land_once(
    proxied: LightPostgresStore, proxy: LosingProxy, mode: Mode
) -> None:
    record = sample_record(fresh())
    proxy.arm(record.id, mode)
    assert isinstance(proxied.create_run(record), Written)  # not "already exists"
    assert proxy.tripped.is_set()
    again = LightPostgresStore(proxied.database._url)  # a fresh light path for the lock
    try:
        key = fresh("lock")
        proxy.arm(key, mode)
        taken = again.acquire_lock(key, sample_holder("a"), 60_000)
        assert proxy.tripped.is_set()
        assert isinstance(taken, LockAcquired)  # not held by itself
        assert again.renew_lock(key, taken.token, 60_000) is True
    finally:
        again.close()


def test_a_break_lost_on_the_light_path_says_it_may_have_landed(
    proxied: LightPostgresStore, proxy: LosingProxy
) -> None:
    key = fresh("lock")
    assert isinstance(proxied.acquire_lock(key, sample_holder("a"), 60_000), LockAcquired)
    proxy.arm(key, "answer")
    with pytest.raises(StoreUnavailableError, match="may or may not have been applied"):
        proxied.break_lock(key)
    assert proxied.list_locks() == []  # it did land


def test_a_statement_the_server_refuses_is_answered_by_the_full_store(
    light: LightPostgresStore,
) -> None:
    with pytest.raises(StoreUnavailableError, match=r"failed: .*no_such_column"):
        light._call(lambda conn: conn.execute("SELECT no_such_column").fetchone())
    assert not light.reader.usable and _pool_opened(light)  # psycopg said it, as ever


# ------------------------------------------------------------------ the loop's thread


class Chain(Build):
    @target
    def one(self, t):
        return t.executes(lambda: None)

    @target
    def two(self, t):
        return t.depends_on(self.one).executes(lambda: None)


def test_a_run_writes_postgres_on_the_loops_thread(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert local(PostgresStateStore(pg_url)) and local(LightPostgresStore(pg_url))
    threads: list[bool] = []
    original = LightPostgresStore.append_run_known

    def noting(self: LightPostgresStore, *args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread() is threading.main_thread())
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LightPostgresStore, "append_run_known", noting)
    result = execute(Chain, ["two"], env={"ZUKE_STATE": pg_url})
    assert result.status == "succeeded"
    # execute()'s loop runs on this, the main thread: each target's `running` write is made
    # there (the run's only work); the end, with the lease's release beside it, is not
    assert threads[:2] == [True, True]


def test_a_store_says_itself_that_its_writes_may_block_the_loop(tmp_path: Path) -> None:
    class Faulty(MemoryStateStore):  # a subclass may stall: a worker thread, unless it says
        pass

    assert local(FileSystemStateStore(tmp_path)) and local(MemoryStateStore())
    assert not local(Faulty())
