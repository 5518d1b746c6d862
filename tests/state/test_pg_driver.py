"""The one Postgres driver (psycopg2) under the store: closing mid-statement, client encodings.

A store closed while another thread's statement runs lets that statement
finish on its connection (the connection is closed once given back, never
under the statement), and refuses every later call in one line. Whatever
client encoding the environment or the URL asks for, the store talks UTF8
(its text is Unicode), so ``zuke runs list`` and ``runs show`` work under
``PGCLIENTENCODING=SQL_ASCII``, ``LATIN1`` or ``UTF8``; a database whose
own encoding cannot hold a character refuses that write in one line.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.conftest import CliRunner
from tests.pg_support import PgCluster, connected
from zuke._errors import StoreUnavailableError
from zuke.state._protocol import Written
from zuke.state.postgres import PostgresStateStore
from zuke.testing.store_contract import fresh, sample_record

DEADLINE_S = 30.0
UNICODE = "Zoë — déploiement ✓ 発行"


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStateStore]:
    s = PostgresStateStore(pg_url)
    yield s
    s.close()


def _backends(url: str, marker: str) -> int:
    with connected(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()"
            " AND datname = current_database()",  # the cluster is shared with other workers
            (f"%{marker}%",),
        ).fetchone()
    return 0 if row is None else int(row[0])


def test_closing_a_store_while_a_statement_runs_lets_it_finish_then_refuses(
    store: PostgresStateStore, pg_url: str
) -> None:
    store.list_runs()  # open
    marker = f"zuke_close_{fresh('m').replace('-', '_')}"
    answers: list[object] = []

    def slow() -> None:
        try:
            answers.append(store.database.call(lambda conn: conn.execute(
                f"SELECT '{marker}', pg_sleep(0.5)").fetchone()))  # fmt: skip
        except BaseException as exc:  # what the caller would see
            answers.append(exc)

    runner = threading.Thread(target=slow)
    runner.start()
    deadline = time.monotonic() + DEADLINE_S
    while _backends(pg_url, marker) == 0:  # the statement is running on the server
        assert time.monotonic() < deadline, "the statement never started"
        time.sleep(0.01)
    store.close()
    runner.join(DEADLINE_S)
    assert len(answers) == 1 and isinstance(answers[0], tuple), answers
    assert answers[0][0] == marker
    with pytest.raises(StoreUnavailableError, match="is closed"):
        store.list_runs()
    while _backends(pg_url, "pg_sleep(0.5)") or _pool_open(store):  # given back: closed
        assert time.monotonic() < deadline, "the connection was kept after the close"
        time.sleep(0.01)


def _pool_open(store: PostgresStateStore) -> bool:
    pool = store.database._pool
    return pool is not None and pool.stats()[0] > 0


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1", "UTF8"])
@pytest.mark.parametrize("where", ["environment", "url"])
def test_any_client_encoding_lists_and_shows_unicode_records(
    cli: CliRunner, pg_url: str, encoding: str, where: str
) -> None:
    writer = PostgresStateStore(pg_url)
    record = replace(sample_record(fresh()), actor=UNICODE, build="Release")
    try:
        assert isinstance(writer.create_run(record), Written)
    finally:
        writer.close()
    if where == "environment":
        url, env = pg_url, {"PGCLIENTENCODING": encoding}
    else:
        url, env = f"{pg_url}?client_encoding={encoding}", {}
    listed = cli("runs", "list", "--json", env={"ZUKE_STATE": url, **env})
    assert listed.code == 0, listed.text
    assert [r["actor"] for r in json.loads(listed.out)] == [UNICODE]
    shown = cli("runs", "show", record.id, "--json", env={"ZUKE_STATE": url, **env})
    assert shown.code == 0, shown.text
    assert json.loads(shown.out)["actor"] == UNICODE


def test_a_database_whose_encoding_cannot_hold_a_character_refuses_it_in_one_line(
    cli: CliRunner, pg_cluster: PgCluster
) -> None:
    name = f"zt_latin1_{fresh('db').replace('-', '_')}"
    with connected(pg_cluster.url()) as conn:
        conn.execute(
            f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
            " TEMPLATE template0"
        )
    url = pg_cluster.url(name)
    store = PostgresStateStore(url)
    try:
        latin = replace(sample_record(fresh()), actor="Zoë")  # LATIN1 holds it
        assert isinstance(store.create_run(latin), Written)
        stored = store.get_run(latin.id)
        assert stored is not None and stored.record.actor == "Zoë"
        beyond = replace(sample_record(fresh()), actor="発行")
        with pytest.raises(StoreUnavailableError) as caught:
            store.create_run(beyond)
        message = str(caught.value)
        assert "LATIN1" in message and "\n" not in message
        assert store.get_run(beyond.id) is None  # nothing half-written
    finally:
        store.close()
    listed = cli("runs", "list", "--json", env={"ZUKE_STATE": url})
    assert listed.code == 0 and [r["actor"] for r in json.loads(listed.out)] == ["Zoë"]
