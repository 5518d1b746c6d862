"""The light Postgres read path (libpq through ctypes) returns exactly what the store returns.

Both read the same rows here: odd strings (NUL, lone surrogates, the escape
character, quotes and backslashes in the journal), every listing filter, a
journal folded over its record, locks with their holders. Anything the light
path cannot answer (no libpq, no schema yet, a refused connection) is left to
the full store, whose answer or message is then the one given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.pg_support import PgCluster
from zuke._errors import StoreUnavailableError
from zuke.state._pg_light import LightPostgresStore, LightReader, numbered, text_array
from zuke.state._protocol import LockAcquired, RunQuery, Written
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, Signal, TargetRecord
from zuke.state.resolve import configured_store
from zuke.testing.store_contract import fresh, sample_holder, sample_record

ODD = ["a\x00b", "x\ud800y", "\uf8ff", "\uf8ff0", 'q"u\\o{t,e}', "ünï ✓", " NULL ", ""]


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    return pg_cluster.create_database()


@pytest.fixture
def pair(pg_url: str) -> Iterator[tuple[PostgresStateStore, LightPostgresStore]]:
    full, light = PostgresStateStore(pg_url), LightPostgresStore(pg_url)
    yield full, light
    light.close()
    full.close()


def _pool_opened(store: PostgresStateStore) -> bool:
    return getattr(store.database, "_pool", None) is not None


def _fill(full: PostgresStateStore) -> list[str]:
    """Runs with odd strings, some with a journal, and locks; returns the run ids."""
    ids = []
    for i, odd in enumerate(ODD):
        record = replace(
            sample_record(
                fresh(), targets=("a", f"t{odd}"), created_at=f"2026-01-0{1 + i % 3}T00:00:0{i}Z"
            ),
            actor=f"bob{odd}",
            build=f"B{odd}" if i % 2 else "Plain",
            status="suspended" if i % 3 == 0 else "running",
        )
        assert isinstance(full.create_run(record), Written)
        stored = full.get_run(record.id)
        assert stored is not None
        delta = RunDelta(
            updated_at="2026-01-05T00:00:00Z",
            targets={f"t{odd}": TargetRecord(status="running", error=odd, meta={odd: [odd]})},
            signals={f"s{odd}": Signal(data={"by": odd, "n": [1, None]}, received_at="x")},
        )
        assert isinstance(
            full.append_run(record.id, delta, expected_version=stored.version), Written
        )
        ids.append(record.id)
        holder = replace(sample_holder(record.id), actor=f"holder{odd}")
        assert isinstance(full.acquire_lock(f"k-{i}", holder, 60_000), LockAcquired)
    return ids


def test_the_light_path_reads_exactly_what_the_store_reads(
    pair: tuple[PostgresStateStore, LightPostgresStore],
) -> None:
    full, light = pair
    ids = _fill(full)
    queries = [
        RunQuery(),
        RunQuery(limit=3),
        RunQuery(status="suspended"),
        RunQuery(build="B\ud800"),
        RunQuery(build="Bx\ud800y"),
        RunQuery(target="t\x00"),
        RunQuery(target='tq"u\\o{t,e}'),
        RunQuery(since="2026-01-02T00:00:00+00:00", limit=2),
        RunQuery(status="running", build="Plain", target="a"),
    ]
    for query in queries:
        assert light.list_runs(query) == full.list_runs(query), query
    assert light.list_runs(RunQuery(target="t\uf8ff0"))  # the filters match something
    for run_id in [*ids, "no-such-run"]:
        assert light.get_run(run_id) == full.get_run(run_id)
    assert light.list_locks() == full.list_locks()
    assert light.list_locks(run_id=ids[1]) == full.list_locks(run_id=ids[1])
    assert not _pool_opened(light)  # all of it answered without psycopg's pool


def test_a_write_goes_the_light_path_too_and_the_full_store_reads_it(
    pair: tuple[PostgresStateStore, LightPostgresStore],
) -> None:
    full, light = pair
    record = sample_record(fresh())
    assert full.list_runs() == []  # the schema is there
    assert light.list_runs() == []
    assert isinstance(light.create_run(record), Written)
    assert not _pool_opened(light)  # the write went through libpq: no psycopg pool
    assert light.list_runs() == full.list_runs() == [record.summary()]
    assert light.get_run(record.id) == full.get_run(record.id)


def test_without_libpq_the_store_answers(pg_url: str) -> None:
    full = PostgresStateStore(pg_url)
    light = LightPostgresStore(pg_url, libpq=["/no/such/libpq.so"])
    try:
        _fill(full)
        assert light.list_runs() == full.list_runs()
        assert _pool_opened(light) and not light.reader.usable
    finally:
        light.close()
        full.close()


def test_a_database_without_the_schema_is_migrated_by_the_store(pg_url: str) -> None:
    light = LightPostgresStore(pg_url)  # a fresh database: no zuke tables yet
    try:
        assert light.list_runs() == []
        assert _pool_opened(light)  # the full store answered (and created the schema)
    finally:
        light.close()
    again = LightPostgresStore(pg_url)
    try:
        assert again.list_runs() == [] and not _pool_opened(again)
    finally:
        again.close()


def test_a_refused_connection_says_what_the_store_says(pg_cluster: PgCluster) -> None:
    url = pg_cluster.url("postgres").replace(f":{pg_cluster.port}/", ":1/")
    url = url.replace("postgresql://zuke@", "postgresql://zuke:s3cr3t-Pa55word@")
    light, full = LightPostgresStore(url), PostgresStateStore(url)
    try:
        with pytest.raises(StoreUnavailableError) as light_error:
            light.list_runs()
        with pytest.raises(StoreUnavailableError) as full_error:
            full.list_runs()
    finally:
        light.close()
        full.close()
    assert str(light_error.value) == str(full_error.value)
    assert "s3cr3t" not in str(light_error.value)


def test_zuke_state_names_the_light_store(pg_url: str) -> None:
    store = configured_store({"ZUKE_STATE": pg_url, "ZUKE_PG_POOL_SIZE": "3"})
    assert isinstance(store, LightPostgresStore) and isinstance(store, PostgresStateStore)
    assert store.database._max == 3  # the pool size the store reads, read here too
    store.close()
    off = configured_store({"ZUKE_STATE": pg_url, "ZUKE_PG_LIGHT": "0"})
    assert type(off) is PostgresStateStore  # the way out: psycopg for every call
    off.close()


def test_placeholders_and_arrays_are_read_as_postgres_writes_them() -> None:
    assert numbered(b"a = %s AND b = %s LIMIT %s") == b"a = $1 AND b = $2 LIMIT $3"
    assert numbered(b"x LIKE 'a%%' AND y = %s") == b"x LIKE 'a%' AND y = $1"
    assert text_array("{}") == []
    assert text_array('{"{\\"a\\":1}","b\\\\c",plain}') == ['{"a":1}', "b\\c", "plain"]
    with pytest.raises(ValueError, match="NULL"):
        text_array("{NULL}")


GATED = """
from zuke import Build, external_signal, target


class Gated(Build):
    @target
    def deploy(self, t):
        return t.executes(lambda: None)

    @target
    def approve(self, t):
        return t.depends_on(self.deploy).waits_for(
            lambda s: s.on(external_signal("approved")).timeout("72h"))
"""


def test_a_sweep_with_nothing_due_loads_no_psycopg(pg_url: str, tmp_path: Path) -> None:
    (tmp_path / "build.py").write_text(GATED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    env["ZUKE_STATE"] = pg_url
    started = subprocess.run(
        [sys.executable, "-m", "zuke", "approve"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert started.returncode == 0 and "suspended" in started.stdout, started.stderr
    probe = (
        "import io, json, sys\n"
        "from zuke.cli import main\n"
        "out = io.StringIO()\n"
        "code = main(['resume', '--check'], out=out, err=sys.stderr)\n"
        "print(json.dumps([code, out.getvalue(), [m for m in sys.modules if 'psycopg' in m]]))\n"
    )
    swept = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=True,
    )  # fmt: skip
    code, out, loaded = json.loads(swept.stdout.splitlines()[-1])
    assert code == 0 and "1 still waiting" in out, (out, swept.stderr)
    assert loaded == []  # every read went the light way; nothing was due, nothing written


def test_what_utf8_cannot_carry_is_left_to_the_store() -> None:
    reader = LightReader("postgresql://zuke@127.0.0.1:1/db\ud800")
    assert reader.rows(b"SELECT 1", ()) is None
    assert not reader.usable  # and every later read goes to the full store
    assert reader.rows(b"SELECT 1", ()) is None
