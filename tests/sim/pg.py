"""The simulation over Postgres (``ZUKE_SIM_STORE=postgres``): ``PostgresStateStore`` with
the server's "now" driven by the simulated clock.

The Postgres store judges every lease, lock and witness by the server's clock,
``clock_timestamp()`` (:mod:`zuke.state._pg_locks`, :mod:`zuke.state._pg_runs`, the
schema's defaults), never a client's — while the simulation's clock jumps minutes in
microseconds. So, with no change to the store, its connections name a search path
(``options=-c search_path=public,simclock,pg_catalog``, libpq's ``options`` in the URL)
on which ``clock_timestamp()`` is ``simclock.clock_timestamp()``: the time in a row of
``simclock.now``, which this module sets to the simulated clock before every store call
(on a side connection, only when the clock moved). ``pg_catalog`` is named after
``simclock`` so the override wins; ``public`` first, so the store's tables and functions
are created and found where they always are. The schema is migrated on that path too,
so its ``DEFAULT clock_timestamp()`` columns are bound to the override as well.

One database serves every process of a campaign (``ZUKE_SIM_PG_URL`` names it): each
process keeps its clock in a row of its own (``-c zuke_sim.clock=<pid>``, read with
``current_setting``), each seed run in a namespace of its own.

The store's client side reads no clock of its own for a lease decision (its
``time.monotonic`` bounds connection retries only, and runs on the simulated clock
inside an actor anyway): ``test_pg.py`` pins both facts.

Determinism: a Postgres seed replays the scheduler's moves — the schedule's hash is
the same in any process — but the answers are a real server's (its versions come from a
sequence, its tokens from ``os.urandom``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from zuke._clock import ManualClock
from zuke.state.lock_rules import ClaimState
from zuke.state.records import RunRecord
from zuke.state.wire import parse_holder, record_to_json

#: the database the simulation's Postgres stores share (any database it may create in)
URL_ENV = "ZUKE_SIM_PG_URL"
SEARCH_PATH = "public,simclock,pg_catalog"
#: the clock, one row per simulating process; ``clock_timestamp()`` reads this process's
SETUP = (
    "CREATE SCHEMA IF NOT EXISTS simclock",
    "CREATE TABLE IF NOT EXISTS simclock.now (name text PRIMARY KEY, at timestamptz NOT NULL)",
    "CREATE OR REPLACE FUNCTION simclock.clock_timestamp() RETURNS timestamptz"
    " LANGUAGE sql VOLATILE AS"
    " $$SELECT at FROM simclock.now WHERE name = current_setting('zuke_sim.clock', true)$$",
)
#: ``pg_advisory_lock`` key of the setup (two processes may set up one database at once)
SETUP_LOCK = 0x73696D63


def _with_options(url: str, options: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}options={quote(options, safe='')}"


class PgSim:
    """This process's share of the database: its clock row and the stores' one pool."""

    def __init__(self, url: str) -> None:
        import psycopg2

        from zuke.state._pg_conn import PgDatabase

        self.given = url
        self.name = str(os.getpid())
        self._side = psycopg2.connect(url)
        self._side.autocommit = True
        with self._side.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (SETUP_LOCK,))
            try:
                for sql in SETUP:
                    cur.execute(sql)
            finally:
                cur.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK,))
        self._set: int | None = None
        self._lock = threading.Lock()
        self.set_clock(0)
        self.url = _with_options(url, f"-c search_path={SEARCH_PATH} -c zuke_sim.clock={self.name}")
        self.database = PgDatabase(self.url, max_connections=4)
        from zuke.state.postgres import PostgresStateStore

        PostgresStateStore(self.database).initialize()  # migrated on the simulation's path
        self._seeds = itertools.count()

    def set_clock(self, now_ms: int) -> None:
        """``clock_timestamp()`` is ``now_ms`` from now on (a no-op if it already is)."""
        with self._lock:
            if now_ms == self._set:
                return
            with self._side.cursor() as cur:
                cur.execute(
                    "INSERT INTO simclock.now (name, at) VALUES (%s, timestamptz 'epoch'"
                    " + %s * interval '1 millisecond')"
                    " ON CONFLICT (name) DO UPDATE SET at = excluded.at",
                    (self.name, now_ms),
                )
            self._set = now_ms

    def connect(self) -> Any:
        """A connection of the view's own, on the simulation's search path."""
        import psycopg2

        from zuke.state._pg_pool import PgConn

        conn = PgConn(psycopg2.connect(self.url))
        conn.raw.autocommit = True
        return conn

    def close(self) -> None:
        """Close the side connection and the pool (another database is simulated in now)."""
        self.database.close()
        self._side.close()

    def namespace(self, seed: int) -> str:
        """A namespace no earlier seed run of this process (or any other) used."""
        return f"sim-{self.name}-{next(self._seeds)}-{seed}"


_SHARED: PgSim | None = None


def shared() -> PgSim:
    """This process's :class:`PgSim`, over ``$ZUKE_SIM_PG_URL`` (made again if it changed)."""
    global _SHARED
    url = os.environ.get(URL_ENV)
    if not url:
        raise ValueError(
            f"ZUKE_SIM_STORE=postgres needs {URL_ENV}, a Postgres database to simulate in "
            "(pytest tests/sim and python -m tests.sim start a throwaway cluster themselves)"
        )
    if _SHARED is None or _SHARED.given != url:
        if _SHARED is not None:
            _SHARED.close()
        _SHARED = PgSim(url)
    return _SHARED


def ensure_database() -> None:
    """By hand (``python -m tests.sim``, ``python -m tests.sim.mutations``): with no
    ``$ZUKE_SIM_PG_URL``, a throwaway cluster (tests.pg_support), stopped at exit, and a
    database on it — named in the environment, which the worker processes inherit."""
    if os.environ.get(URL_ENV):
        return
    from tests.pg_support import start_cluster, unavailable

    reason = unavailable()
    if reason is not None:
        raise SystemExit(f"zuke: the simulation over Postgres cannot run here: {reason}")
    os.environ[URL_ENV] = start_cluster().create_database()


class ClockedPg:
    """A ``PostgresStateStore`` whose server clock is set to the simulation's before each
    call: what the actors' :class:`~tests.sim.world.SimStore` wraps (``inner``)."""

    def __init__(self, sim: PgSim, clock: ManualClock, seed: int) -> None:
        from zuke.state.postgres import PostgresStateStore

        self.pg = sim
        self.clock = clock
        self.namespace = sim.namespace(seed)
        self.store = PostgresStateStore(sim.database, namespace=self.namespace)
        self.views: list[PgView] = []

    def __repr__(self) -> str:
        return f"ClockedPg({self.namespace})"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.pg.set_clock(self.clock.now_ms())
            return attr(*args, **kwargs)

        return call

    def view(self) -> PgView:
        """A view of this store (:mod:`tests.sim.view`), closed with the store."""
        self.views.append(PgView(self))
        return self.views[-1]


@contextlib.contextmanager
def opened(clock: ManualClock, seed: int) -> Iterator[ClockedPg]:
    """A seed's Postgres store: a fresh namespace of the shared database; its views'
    connections closed at the end (the pool stays, for the next seed)."""
    store = ClockedPg(shared(), clock, seed)
    try:
        yield store
    finally:
        for view in store.views:
            view.close()


class PgView:
    """The Postgres store's rows, read on a connection of the view's own (never the pool
    the actors use). Tokens are stored hashed: the view knows a claim's token when an
    acquisition granted it (``token_seen``, as the fault layer and the invariants see
    every grant); one it never saw stands as its hash."""

    def __init__(self, store: ClockedPg) -> None:
        self.ns = store.namespace
        self.clock = store.clock
        self._conn = store.pg.connect()
        self._lock = threading.Lock()
        self._tokens: dict[bytes, str] = {}
        #: run id -> (version, record, JSON text): a record is re-read only when it changed
        self._read: dict[str, tuple[str, RunRecord, str]] = {}

    def close(self) -> None:
        self._conn.close()

    def token_seen(self, token: str) -> None:
        from zuke.state._pg_locks import token_hash

        self._tokens[token_hash(token)] = token

    def _rows(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        with self._lock:
            return list(self._conn.execute(sql, args).fetchall())

    def _load(self, run_id: str, version: str) -> tuple[str, RunRecord, str] | None:
        cached = self._read.get(run_id)
        if cached is not None and cached[0] == version:
            return cached
        from zuke.state import _pg_runs

        with self._lock:
            stored = _pg_runs.get(self._conn, self.ns, run_id)
        if stored is None:
            return None
        text = json.dumps(record_to_json(stored.record))
        self._read[run_id] = (stored.version, stored.record, text)
        return self._read[run_id]

    def _versions(self, run_id: str | None = None) -> dict[str, str]:
        sql = "SELECT id, version FROM zuke_runs WHERE ns = %s"
        args: tuple[Any, ...] = (self.ns,)
        if run_id is not None:
            sql, args = sql + " AND id = %s", (self.ns, run_id)
        return {rid: str(version) for rid, version in self._rows(sql, args)}

    def runs(self) -> dict[str, tuple[str, str]]:
        found: dict[str, tuple[str, str]] = {}
        for run_id, version in sorted(self._versions().items()):
            loaded = self._load(run_id, version)
            if loaded is not None:
                found[run_id] = (loaded[2], loaded[0])
        return found

    def record(self, run_id: str) -> RunRecord | None:
        version = self._versions(run_id).get(run_id)
        loaded = self._load(run_id, version) if version is not None else None
        return loaded[1] if loaded is not None else None

    def _claims(self, key: str | None) -> dict[str, ClaimState]:
        sql = (
            "SELECT key, token_sha256, holder, floor(extract(epoch FROM expires_at) * 1000)"
            "::bigint, fence FROM zuke_locks WHERE ns = %s"
        )
        args: tuple[Any, ...] = (self.ns,)
        if key is not None:
            sql, args = sql + " AND key = %s", (self.ns, key)
        found: dict[str, ClaimState] = {}
        for name, sha, holder, expires, fence in self._rows(sql + " ORDER BY key", args):
            token = None if sha is None else self._tokens.get(bytes(sha), f"sha:{bytes(sha).hex()}")
            found[name] = ClaimState(
                fence=int(fence),
                holder=None if holder is None else parse_holder(json.loads(holder), where=name),
                token=token,
                expires_at=None if expires is None else int(expires),
            )
        return found

    def claim(self, key: str) -> ClaimState | None:
        return self._claims(key).get(key)

    def claims(self) -> dict[str, ClaimState]:
        return self._claims(None)
