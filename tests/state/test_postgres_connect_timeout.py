"""Every connect of the Postgres store is bounded, and a cut wait leaves nothing behind.

The store's connections are libpq's asynchronous kind, where libpq does not enforce
``connect_timeout`` (``zuke/state/_pg_connect.py`` says where libpq's docs say so): a
server that takes the TCP connection and never answers would hang a connect for ever.
Here real sockets play that server — a loopback listener that accepts and never
answers, one whose backlog is full (the SYN is dropped: the TCP connect itself never
completes), and the losing proxy holding every new connection in front of a live
cluster — and the store, with ``connect_timeout=1`` (libpq's minimum: 2 s), must fail
with its one redacted line before the pytest-timeout guard, its sockets closed. A
Ctrl-C while a connect or a statement waits must leave the connection closed, never
lent again.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import types
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import CliRunner
from tests.pg_support import LosingProxy, PgCluster, connected
from zuke._errors import StoreUnavailableError
from zuke.state import _pg_connect, _pg_pool
from zuke.state._pg_conn import PgDatabase
from zuke.state.postgres import PostgresStateStore

SECRET = "pw-" + uuid.uuid4().hex[:10]
#: the guard: a connect that is not bounded fails the test here, not hangs the run
GUARD_S = 60


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@contextmanager
def _stalled(held: list[socket.socket] | None = None) -> Iterator[int]:
    """A loopback listener that accepts every connection (into ``held``) and never answers;
    its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    held = [] if held is None else held

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes accept(): the thread ends
        listener.close()
        thread.join(GUARD_S)
        for sock in held:
            sock.close()


@contextmanager
def _full_backlog() -> Iterator[tuple[int, socket.socket]]:
    """A listener that never accepts, its backlog full: a new connection's SYN is dropped,
    so its TCP connect never completes. Its port and the listener (to look into)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # Linux queues backlog + 1: one connection fills it
    filler = socket.create_connection(listener.getsockname(), timeout=GUARD_S)
    try:
        yield int(listener.getsockname()[1]), listener
    finally:
        filler.close()
        listener.close()


def _url(port: int, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"postgresql://zuke:{SECRET}@127.0.0.1:{port}/db" + (f"?{query}" if query else "")


def _assert_one_redacted_line(message: str, port: int) -> None:
    assert "timeout expired" in message and "connect_timeout" in message
    assert f"127.0.0.1:{port}" in message  # the database, as the store shows it
    assert "check that the server is up and reachable" in message  # the advice
    assert "\n" not in message and SECRET not in message


@pytest.fixture(autouse=True)
def _loaded() -> None:
    """psycopg2 (and libpq) loaded before the descriptors are counted."""
    pytest.importorskip("psycopg2")


# ------------------------------------------------------------------ a server that never answers


@pytest.mark.psycopg
@pytest.mark.timeout(GUARD_S)
def test_a_server_that_accepts_and_never_answers_fails_the_connect_in_one_line() -> None:
    before = _fds()
    with _stalled() as port:
        store = PostgresStateStore(_url(port, connect_timeout="1"))
        with pytest.raises(StoreUnavailableError) as caught:
            store.list_runs()
        store.close()
    message = str(caught.value)
    assert message.startswith("state: cannot use Postgres at postgresql://zuke@127.0.0.1:")
    _assert_one_redacted_line(message, port)
    assert "2s (connect_timeout)" in message  # 1 is libpq's 2, as in its blocking connect
    assert SECRET not in repr(caught.value.__cause__) and SECRET not in repr(store)
    assert _fds() == before  # the half-made connection's socket was closed


@pytest.mark.psycopg
@pytest.mark.timeout(GUARD_S)
def test_the_cli_says_the_connect_timed_out_in_one_line_without_the_password(
    cli: CliRunner,
) -> None:
    with _stalled() as port:
        result = cli("runs", "list", env={"ZUKE_STATE": _url(port, connect_timeout="1")})
    assert result.code != 0
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("zuke: "), result.err
    _assert_one_redacted_line(lines[0], port)
    assert SECRET not in result.text


@pytest.mark.psycopg
@pytest.mark.timeout(GUARD_S)
def test_a_server_whose_backlog_is_full_fails_the_connect_in_one_line() -> None:
    before = _fds()
    with _full_backlog() as (port, listener):
        store = PostgresStateStore(_url(port, connect_timeout="1"))
        with pytest.raises(StoreUnavailableError) as caught:
            store.list_runs()
        store.close()
        listener.setblocking(False)
        listener.accept()[0].close()  # the filler
        with pytest.raises(BlockingIOError):  # the store's never got in: no TCP connection
            listener.accept()
    _assert_one_redacted_line(str(caught.value), port)
    assert _fds() == before


@pytest.mark.psycopg
@pytest.mark.timeout(GUARD_S)
def test_an_attempt_never_outlasts_the_callers_deadline() -> None:
    import psycopg2

    # zuke's 10 s default for the attempt; the caller has far less left: its deadline wins
    with (
        _stalled() as port,
        pytest.raises(psycopg2.OperationalError, match="timeout expired") as caught,
    ):
        _pg_connect.connect(_url(port), time.monotonic() + 0.2, waiting=True)
    assert "the call's time left" in str(caught.value)


@pytest.mark.psycopg
@pytest.mark.timeout(GUARD_S)
def test_connect_timeout_0_lifts_the_attempts_bound_but_not_the_callers_deadline() -> None:
    import psycopg2

    # libpq's 0 is "wait indefinitely"; the pool's deadline still ends the wait
    with _stalled() as port:
        deadline = time.monotonic() + 0.2
        with pytest.raises(psycopg2.OperationalError, match="timeout expired") as caught:
            _pg_connect.connect(_url(port, connect_timeout="0"), deadline, waiting=True)
    assert "the call's time left" in str(caught.value)


@pytest.mark.psycopg
@pytest.mark.timeout(GUARD_S)
def test_a_timed_out_attempt_is_made_again_only_while_a_restart_is_awaited() -> None:
    """The pool's reconnect after a broken connection (``waiting``) asks again until its
    deadline — a restarting Postgres 15 leaves connections unanswered in its listen queue
    while it stops — where a first connection fails after one attempt."""
    import psycopg2

    made = {}
    for waiting in (False, True):
        held: list[socket.socket] = []  # each attempt's connection, taken as it came
        with _stalled(held) as port:
            url = _url(port, connect_timeout="1")  # 2 s an attempt: a second fits in 4.5 s
            deadline = time.monotonic() + 4.5
            with pytest.raises(psycopg2.OperationalError, match="timeout expired"):
                _pg_connect.connect(url, deadline, waiting=waiting)
        made[waiting] = len(held)
    assert made[False] == 1
    assert made[True] >= 2


@pytest.mark.psycopg
@pytest.mark.parametrize(
    ("given", "env", "bound"),
    [
        ({"connect_timeout": "0"}, None, None),  # libpq: none; the caller's deadline only
        ({"connect_timeout": "-3"}, None, None),
        ({"connect_timeout": "1"}, None, 2.0),  # libpq's minimum
        ({"connect_timeout": "5"}, "7", 5.0),  # the URL's, over the environment's
        ({}, None, 10.0),  # zuke's default
        ({}, "7", 7.0),  # PGCONNECT_TIMEOUT is the user's, not overridden by zuke's 10
    ],
)
def test_each_attempt_is_bounded_by_connect_timeout_as_libpq_reads_it(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, str], env: str | None, bound: float | None
) -> None:
    import psycopg2

    if env is None:
        monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("PGCONNECT_TIMEOUT", env)
    with _stalled() as port:
        dsn = PgDatabase(_url(port, **given)).conninfo()
        raw = psycopg2.connect(dsn, async_=1)
        try:
            assert _pg_connect.attempt_timeout(raw) == bound
        finally:
            raw.close()


# ------------------------------------------------------------------ a stall after a restart


@pytest.mark.timeout(GUARD_S)
def test_a_server_that_stalls_new_connections_fails_the_pools_reconnect_in_one_line(
    pg_url: str, pg_cluster: PgCluster, proxy: LosingProxy
) -> None:
    """A failover whose new server (or a proxy before it) takes connections and never
    answers: the pool's reconnect after the broken connection asks again, each attempt
    bounded, until the pool's timeout — then one line, not a hang."""
    url = pg_url.replace(f":{pg_cluster.port}/", f":{proxy.port}/") + "?connect_timeout=1"
    store = PostgresStateStore(PgDatabase(url, pool_timeout_s=5))
    try:
        assert store.list_runs() == []
        proxy.hold()
        with connected(pg_url) as conn:  # what a failover does to the pooled connections
            conn.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(StoreUnavailableError) as caught:
            store.list_runs()
        message = str(caught.value)
        assert message.startswith(
            f"state: no connection to Postgres at {store.database.shown} within 5s:"
        )
        assert "timeout expired" in message and "\n" not in message
        assert proxy.held >= 2  # asked again while the pool's time lasted
        pool = store.database._pool
        assert pool is not None and pool.stats() == (0, 0)  # nothing counted, nothing kept
    finally:
        store.close()


# ------------------------------------------------------------------ Ctrl-C while waiting


class _Interrupting:
    """A ``select`` whose ``poll()`` objects raise :class:`KeyboardInterrupt` when waited on:
    Ctrl-C arriving while a connect or a statement waits for the server."""

    def __init__(self) -> None:
        self.waits = 0
        self.POLLIN, self.POLLOUT = 1, 4

    def poll(self) -> types.SimpleNamespace:
        def wait(*_: object) -> list[tuple[int, int]]:
            self.waits += 1
            raise KeyboardInterrupt

        return types.SimpleNamespace(register=lambda *_: None, poll=wait)


@pytest.mark.psycopg
@pytest.mark.timeout(GUARD_S)
def test_ctrl_c_during_a_connect_closes_the_half_made_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = _fds()
    interrupting = _Interrupting()
    with _stalled() as port:
        monkeypatch.setattr(_pg_pool, "select", interrupting)  # the connect waits in _pg_pool.wait
        store = PostgresStateStore(_url(port))
        with pytest.raises(KeyboardInterrupt):
            store.list_runs()
        store.close()
    assert interrupting.waits == 1
    assert _fds() == before


@pytest.mark.parametrize("in_transaction", [False, True], ids=["statement", "transaction"])
def test_ctrl_c_during_a_statement_leaves_its_connection_closed_never_lent_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, in_transaction: bool
) -> None:
    store = PostgresStateStore(pg_url)
    try:
        assert store.list_runs() == []  # the pool is open, one connection idle
        lent: list[_pg_pool.PgConn] = []
        interrupting = _Interrupting()

        def sleep(conn: _pg_pool.PgConn) -> None:
            monkeypatch.setattr(_pg_pool, "select", interrupting)
            conn.execute("SELECT pg_sleep(2)")  # its answer comes after the wait began

        def work(conn: _pg_pool.PgConn) -> None:
            lent.append(conn)
            if in_transaction:
                with conn.transaction():  # its ROLLBACK cannot run: the statement is under way
                    sleep(conn)
            else:
                sleep(conn)

        with pytest.raises(KeyboardInterrupt):
            store.database.call(work)
        monkeypatch.undo()
        assert interrupting.waits == 1
        (conn,) = lent
        assert conn.broken  # closed by the pool: its answer would be the next one's
        assert store.database.lend_idle() is None  # nothing kept
        # the next call gets a fresh connection, and its own answer
        assert store.database.call(lambda c: c.execute("SELECT 42").fetchone()) == (42,)
    finally:
        store.close()
