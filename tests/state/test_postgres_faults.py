"""The Postgres store when connections break: answers lost, requests lost, refusals explained.

A TCP proxy in front of the session's cluster loses, once, either the answer
to the statement that carries a marker (the server committed it: the client
only never hears) or the statement itself (the server never sees it), by
closing both ends. The store must tell the two apart — a write is applied
exactly once either way — and go on on a fresh connection. Connections
killed by the server (``pg_terminate_backend``, what a restart does to every
one of them) are replaced without failing the call. A store that gets no
connection says why in one line, naming the host and database, never the
password, and what to check.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.conftest import CliRunner
from tests.pg_support import LosingProxy, Mode, PgCluster, connected
from tests.state.pg_rows import run_rows
from zuke._errors import StateError, StoreUnavailableError
from zuke.state._pg_conn import PgDatabase
from zuke.state._pg_pool import PgConn
from zuke.state._protocol import Conflict, LockAcquired, LockHeld, Written
from zuke.state.postgres import PostgresStateStore, pool_size
from zuke.state.records import RunDelta, RunEvent
from zuke.testing.store_contract import fresh, sample_holder, sample_record

SECRET = "pw-" + uuid.uuid4().hex[:10]


# no test here is about migrating a database: each test's comes at the schema
pytestmark = pytest.mark.pg_migrated


@pytest.fixture
def store(pg_url: str, pg_cluster: PgCluster, proxy: LosingProxy) -> Iterator[PostgresStateStore]:
    s = PostgresStateStore(pg_url.replace(f":{pg_cluster.port}/", f":{proxy.port}/"))
    yield s
    s.close()


def _event(detail: str) -> RunEvent:
    return RunEvent(at="2026-01-02T03:04:05.000Z", tool="test", actor="tester", detail=detail)


# ------------------------------------------------------------------ lost answers, lost requests


@pytest.mark.parametrize("mode", ["answer", "request"])
def test_an_append_whose_connection_broke_is_applied_exactly_once(
    store: PostgresStateStore, proxy: LosingProxy, mode: Mode
) -> None:
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    marker = f"marker-{uuid.uuid4().hex}"
    proxy.arm(marker, mode)
    delta = RunDelta(updated_at="2026-01-02T03:04:05.000Z", events=(_event(marker),))
    result = store.append_run(record.id, delta, expected_version=created.version)
    assert proxy.tripped.is_set()
    assert isinstance(result, Written)
    stored = store.get_run(record.id)
    assert stored is not None and stored.version == result.version
    assert [e.detail for e in stored.record.events].count(marker) == 1
    assert run_rows(store, "zuke_run_deltas", record.id) == 1
    # The version it answered is the one to write against next: the CAS chain is unbroken.
    again = store.append_run(record.id, delta, expected_version=result.version)
    assert isinstance(again, Written)
    assert store.append_run(record.id, delta, expected_version=result.version) == Conflict()


@pytest.mark.parametrize("mode", ["answer", "request"])
def test_a_create_and_a_put_whose_connection_broke_land_once(
    store: PostgresStateStore, proxy: LosingProxy, mode: Mode
) -> None:
    record = sample_record(fresh())
    proxy.arm(record.id, mode)
    created = store.create_run(record)
    assert proxy.tripped.is_set()
    assert isinstance(created, Written), created  # not "already exists": it was ours
    marker = f"marker-{uuid.uuid4().hex}"
    changed = replace(record, actor=marker)
    proxy.arm(marker, mode)
    put = store.put_run(changed, expected_version=created.version)
    assert proxy.tripped.is_set()
    assert isinstance(put, Written)
    stored = store.get_run(record.id)
    assert stored is not None and (stored.record, stored.version) == (changed, put.version)


def _sent_twice(pg_url: str, resent: object, looks: list[object]) -> object:
    """``PgDatabase.call`` of a write whose first connection breaks mid-call; sent again it
    answers ``resent``; ``landed`` answers ``looks`` in turn."""
    import psycopg2

    database, sent = PgDatabase(pg_url), []

    def work(conn: PgConn) -> object:
        sent.append(conn)
        if len(sent) == 1:
            conn.close()  # the link broke: the server may or may not have applied it
            raise psycopg2.OperationalError("server closed the connection unexpectedly")
        return resent

    try:
        return database.call(work, landed=lambda conn: looks.pop(0))
    finally:
        database.close()
        assert len(sent) == 2 and looks == []


def test_a_write_sent_again_that_met_its_own_first_sending_is_written(pg_url: str) -> None:
    # The first sending's backend had not yet seen its client go: it committed after the
    # look, and the second sending met the row it moved: its conflict was its own write.
    assert _sent_twice(pg_url, Conflict(), [None, Written(version="7")]) == Written(version="7")


def test_a_write_sent_again_keeps_its_answer_when_a_third_writer_moved_on(pg_url: str) -> None:
    # Sent again it landed; another writer moved the run on before the second look.
    assert _sent_twice(pg_url, Written(version="7"), [None, Conflict()]) == Written(version="7")
    assert _sent_twice(pg_url, Conflict(), [None, Conflict()]) == Conflict()


def test_a_write_overtaken_while_its_answer_was_lost_is_a_conflict(
    store: PostgresStateStore, proxy: LosingProxy, pg_url: str
) -> None:
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    other = PostgresStateStore(pg_url)  # not through the proxy
    try:
        # The request is lost; before the store looks, another writer moves the run on.
        marker = f"marker-{uuid.uuid4().hex}"
        proxy.arm(marker, "request")
        original = store.database.call

        def call_after_another_write(work, **kwargs):
            landed = kwargs.get("landed")
            if landed is not None:

                def overtaken(conn):
                    moved = RunDelta(updated_at="2026-01-02T03:04:06.000Z")
                    other.append_run(record.id, moved, expected_version=created.version)
                    return landed(conn)

                kwargs["landed"] = overtaken
            return original(work, **kwargs)

        store.database.call = call_after_another_write  # type: ignore[method-assign]
        delta = RunDelta(updated_at="2026-01-02T03:04:05.000Z", events=(_event(marker),))
        assert store.append_run(record.id, delta, expected_version=created.version) == Conflict()
        assert proxy.tripped.is_set()
        stored = store.get_run(record.id)
        assert stored is not None and marker not in [e.detail for e in stored.record.events]
    finally:
        other.close()


def test_an_acquisition_whose_answer_was_lost_is_held_with_its_token(
    store: PostgresStateStore, proxy: LosingProxy
) -> None:
    key = fresh("lock")
    proxy.arm(key, "answer")
    taken = store.acquire_lock(key, sample_holder("a"), 60_000)
    assert proxy.tripped.is_set()
    assert isinstance(taken, LockAcquired)  # not LockHeld by itself
    assert store.acquire_lock(key, sample_holder("b"), 60_000) == LockHeld(sample_holder("a"))
    assert store.renew_lock(key, taken.token, 60_000) is True
    store.release_lock(key, taken.token)
    assert isinstance(store.acquire_lock(key, sample_holder("b"), 60_000), LockAcquired)


def test_a_break_whose_answer_was_lost_says_it_may_have_landed(
    store: PostgresStateStore, proxy: LosingProxy
) -> None:
    key = fresh("lock")
    assert isinstance(store.acquire_lock(key, sample_holder("a"), 60_000), LockAcquired)
    proxy.arm(key, "answer")
    with pytest.raises(StoreUnavailableError, match="may or may not have been applied"):
        store.break_lock(key)
    assert store.list_locks() == []  # it did land; the store did not say "not held"


def _kill_idle(store: PostgresStateStore, pg_url: str) -> int:
    """Terminate every idle connection of the store's pool, as a restart does; how many."""
    pool = store.database._pool
    assert pool is not None
    size = pool.stats()[1]
    conns = [pool.take() for _ in range(size)]
    pids = [c.backend_pid() for c in conns]
    for conn in conns:
        pool.give(conn)
    killer = PostgresStateStore(pg_url)
    with killer.database.connection() as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    killer.close()
    return len(pids)


def test_connections_the_server_killed_are_replaced_without_failing_a_call(
    pg_url: str,
) -> None:
    store = PostgresStateStore(PgDatabase(pg_url, max_connections=4))
    try:
        record = sample_record(fresh())
        created = store.create_run(record)
        assert isinstance(created, Written)
        assert _kill_idle(store, pg_url) >= 1
        assert [s.id for s in store.list_runs()] == [record.id]  # a read, run again
        assert _kill_idle(store, pg_url) >= 1
        delta = RunDelta(updated_at="2026-01-02T03:04:05.000Z", events=(_event("after"),))
        result = store.append_run(record.id, delta, expected_version=created.version)
        assert isinstance(result, Written)  # a write, looked up, then sent again: once
        assert run_rows(store, "zuke_run_deltas", record.id) == 1
        assert _kill_idle(store, pg_url) >= 1
        assert isinstance(store.acquire_lock(fresh("lock"), sample_holder("a"), 1000), LockAcquired)
    finally:
        store.close()


def test_a_reconnect_reset_while_the_server_stops_is_made_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart breaks the pool's connections; the first reconnect meets the old server's
    listening socket as it closes (its TCP connect reset): the pool asks again, the call
    does not fail."""
    store = PostgresStateStore(PgDatabase(pg_url, max_connections=2))
    try:
        record = sample_record(fresh())
        assert isinstance(store.create_run(record), Written)
        assert _kill_idle(store, pg_url) >= 1
        tried = _refusing_first(monkeypatch, 2, RESET)
        assert [s.id for s in store.list_runs()] == [record.id]
        assert len(tried) >= 3  # reset twice, then the one that answered
    finally:
        store.close()


def test_a_reconnect_refused_for_good_says_so_without_claiming_a_wait(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused for a reason no wait mends: said at once, and not "within 30s" (the
    restart flake's reset was said so, and taken for a 30 s wait)."""
    store = PostgresStateStore(PgDatabase(pg_url, max_connections=2))
    try:
        assert store.list_runs() == []
        assert _kill_idle(store, pg_url) >= 1
        said = 'FATAL:  password authentication failed for user "zuke"'
        tried = _refusing_first(monkeypatch, 10_000, said)
        with pytest.raises(StoreUnavailableError) as caught:
            store.list_runs()
        message = str(caught.value)
        assert message.startswith(f"state: no connection to Postgres at {store.database.shown}: ")
        assert "within" not in message and "check the user and password" in message
        assert len(tried) == 1
    finally:
        store.close()


def test_a_first_connection_ended_before_the_schema_check_is_made_again(
    pg_url: str, pg_cluster: PgCluster, proxy: LosingProxy
) -> None:
    """A restart between a process's first connection and its schema check ended that
    connection ("server closed the connection unexpectedly"): the store connects again and
    goes on, as the pool does after a restart — the first call no longer fails for it
    (``zuke.execute()`` under the chaos test: 1 run in 200)."""
    PostgresStateStore(pg_url).close()  # the schema exists: the check is one statement
    proxy.arm("zuke_schema_version", "request")  # the server never sees it: the link drops
    store = PostgresStateStore(pg_url.replace(f":{pg_cluster.port}/", f":{proxy.port}/"))
    try:
        assert store.list_runs() == []
        assert proxy.tripped.is_set()
    finally:
        store.close()


# ------------------------------------------------------------------ no connection: one line


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.psycopg
def test_a_port_nobody_listens_on_says_to_check_the_server_there(cli: CliRunner) -> None:
    port = _closed_port()
    url = f"postgresql://zuke:{SECRET}@127.0.0.1:{port}/releases"
    result = cli("runs", "list", env={"ZUKE_STATE": url, "ZUKE_PG_LIGHT": "0"})
    assert result.code != 0
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("zuke: "), result.err
    assert f"postgresql://zuke@127.0.0.1:{port}/releases" in lines[0]
    assert f"check that the server is up and listening at 127.0.0.1:{port}" in lines[0]
    assert SECRET not in result.text


STARTING = "connection failed: FATAL:  the database system is starting up"


def _refusing_first(monkeypatch: pytest.MonkeyPatch, times: int, said: str) -> list[str]:
    """``psycopg2.connect`` answers as a server coming up would, ``times`` times."""
    import psycopg2

    real, tried = psycopg2.connect, []

    def connect(*args: object, **kwargs: object) -> object:
        tried.append("connect")
        if len(tried) <= times:
            raise psycopg2.OperationalError(said)
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(psycopg2, "connect", connect)
    return tried


SHUTTING = "connection failed: FATAL:  the database system is shutting down"


CUT = (
    "connection failed: server closed the connection unexpectedly\n\tThis probably means "
    "the server terminated abnormally\n\tbefore or while processing the request."
)


#: libpq (asynchronous connect) when the TCP connect met the old postmaster's listening
#: socket closing under ``pg_ctl restart -m immediate`` (the restart test, 1 run in ~10 loaded)
RESET = (
    "Connection reset by peer\n\tIs the server running on that host and accepting TCP/IP "
    "connections?\n"
)


@pytest.mark.parametrize(
    "said",
    [STARTING, SHUTTING, CUT, RESET],
    ids=["starting-up", "shutting-down", "cut-while-starting", "reset-while-stopping"],
)
def test_a_server_still_starting_is_waited_for_before_the_first_call(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, said: str
) -> None:
    # A restart, or a crash's recovery: the server refuses with 57P03 for a moment (the
    # pool's own reconnections wait it out; the first connection must too). A restart's
    # first half says "shutting down" (CI's chaos run met it at a starter's first call).
    tried = _refusing_first(monkeypatch, 3, said)
    store = PostgresStateStore(PgDatabase(pg_url))
    try:
        record = sample_record(fresh("starting"))
        assert isinstance(store.create_run(record), Written)
        assert len(tried) >= 4  # three refusals, then the one that answered
    finally:
        store.close()


@pytest.mark.parametrize(
    "said",
    [STARTING, "connection failed: FATAL:  the database system is not yet accepting "
     "connections; DETAIL:  Consistent recovery state has not been yet reached."],
    ids=["starting-up", "recovering"],
)  # fmt: skip
def test_a_server_that_stays_starting_is_one_line_after_the_pool_timeout(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, said: str
) -> None:
    tried = _refusing_first(monkeypatch, 10_000, said)
    store = PostgresStateStore(PgDatabase(pg_url, pool_timeout_s=0.5))
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            store.get_run("some-run")
        message = str(caught.value)
        assert message.startswith(f"state: cannot use Postgres at {store.database.shown}: ")
        assert "retry in a moment" in message and "\n" not in message
        assert 2 <= len(tried) < 10_000  # asked again, then gave up at the timeout
    finally:
        store.close()


def test_a_server_that_refuses_otherwise_is_not_asked_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried = _refusing_first(monkeypatch, 10_000, 'FATAL:  database "nope" does not exist')
    store = PostgresStateStore(PgDatabase(pg_url))
    try:
        with pytest.raises(StoreUnavailableError, match="create the database"):
            store.get_run("some-run")
        assert tried == ["connect"]
    finally:
        store.close()


@pytest.fixture(scope="module")
def password_role(pg_cluster: PgCluster) -> str:
    role = f"zuke_pw_{uuid.uuid4().hex[:8]}"
    pg_cluster.password_role(role, SECRET)
    return role


def test_a_wrong_password_is_one_line_saying_to_check_it(
    cli: CliRunner, pg_cluster: PgCluster, password_role: str
) -> None:
    url = f"postgresql://{password_role}:not-{SECRET}@127.0.0.1:{pg_cluster.port}/postgres"
    result = cli("runs", "list", env={"ZUKE_STATE": url})
    assert result.code != 0
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("zuke: "), result.err
    assert f"{password_role}@127.0.0.1:{pg_cluster.port}/postgres" in lines[0]
    assert "password authentication failed" in lines[0]
    assert "check the user and password in ZUKE_STATE" in lines[0]
    assert SECRET not in result.text
    # The role works with its password: the refusal was the password's.
    with connected(url.replace(f"not-{SECRET}", SECRET)) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (password_role,)


def test_a_pool_held_by_another_thread_names_its_size_and_max_connections(pg_url: str) -> None:
    store = PostgresStateStore(PgDatabase(pg_url, max_connections=1, pool_timeout_s=0.2))
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.database.connection():
            held.set()
            done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        with pytest.raises(StoreUnavailableError) as caught:
            store.get_run("some-run")
        message = str(caught.value)
        assert message.startswith("state: all 1 connections of this process's pool")
        assert store.database.shown in message
        assert "ZUKE_PG_POOL_SIZE (now 1)" in message and "max_connections" in message
    finally:
        done.set()
        holder.join(30)
        store.close()


@pytest.mark.parametrize("raw", ["0", "-3", "ten", "1001", "1e3"])
def test_a_bad_pool_size_is_refused(raw: str) -> None:
    with pytest.raises(StateError, match=r"ZUKE_PG_POOL_SIZE must be a whole number from 1"):
        pool_size({"ZUKE_PG_POOL_SIZE": raw})


def test_the_pool_size_comes_from_the_environment(cli: CliRunner, pg_url: str) -> None:
    assert pool_size({}) == 10 and pool_size({"ZUKE_PG_POOL_SIZE": "3"}) == 3
    result = cli("runs", "list", env={"ZUKE_STATE": pg_url, "ZUKE_PG_POOL_SIZE": "zero"})
    assert result.code != 0
    assert result.err.strip().splitlines() == [
        "zuke: state: ZUKE_PG_POOL_SIZE must be a whole number from 1 to 1000, not 'zero'"
    ]
