"""``PostgresStateStore``: run records and locks in a Postgres database (``zuke[postgres]``).

``ZUKE_STATE=postgresql://USER@HOST:PORT/DB?sslmode=require`` (or
``postgres://``) names it. Many processes on many hosts may share one
database: every compare-and-swap, append and lock decision is one statement
(or one short transaction) decided by Postgres' row locks, and every expiry
by the database's clock (``clock_timestamp()``), never a client's.

The SQL lives beside it: :mod:`._pg_runs` (records, the journal, listing),
:mod:`._pg_locks` (lease rows with fences), :mod:`._pg_schema` (the versioned
schema and its migration), :mod:`._pg_conn` (the URL, the pool, errors
without the password). psycopg is imported on first use, never by ``import
zuke``.

A ``namespace`` keeps several independent stores in one set of tables (what
``zuke serve --db postgresql://`` will map its URL prefixes to); the store
``ZUKE_STATE`` names uses the empty one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from zuke._errors import StateError
from zuke.state import _pg_listen, _pg_locks, _pg_runs
from zuke.state._ids import check_id, check_ttl
from zuke.state._pg_conn import DEFAULT_MAX_CONNECTIONS, PgDatabase
from zuke.state._protocol import (
    Conflict,
    LockAcquired,
    LockEntry,
    LockHeld,
    LockHolder,
    RunQuery,
    StoredRun,
    Written,
)
from zuke.state.records import RunDelta, RunRecord, RunSummary

SCHEMES = ("postgresql", "postgres")
_EVERY_RUN: Final = RunQuery()


class PostgresStateStore:
    """A :class:`~zuke.state.JournalingStateStore` with ``list_locks`` and ``break_lock``."""

    def __init__(
        self,
        database: str | PgDatabase,
        *,
        namespace: str = "",
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        if isinstance(database, str):
            database = PgDatabase(database, max_connections=max_connections)
        self.database: Final = database
        self.namespace: Final = namespace
        self._floor_ready = False

    def __repr__(self) -> str:
        ns = f", namespace={self.namespace!r}" if self.namespace else ""
        return f"PostgresStateStore({self.database.shown}{ns})"

    def close(self) -> None:
        """Close the pool (the database object's: stores sharing it are closed too)."""
        self.database.close()

    def listen(self, wake: _pg_listen.Wake) -> _pg_listen.Listener:
        """Call ``wake`` when a run parks or a signal lands (LISTEN/NOTIFY on a connection of
        its own) until the listener is closed: what ``zuke resume --check --watch`` looks for."""
        return _pg_listen.listen(self.database, self.namespace, wake)

    # ------------------------------------------------------------------ runs

    def get_run(self, run_id: str) -> StoredRun | None:
        check_id(run_id)
        with self.database.connection() as conn:
            return _pg_runs.get(conn, self.namespace, run_id)

    def create_run(self, record: RunRecord) -> Written | Conflict:
        check_id(record.id)
        with self.database.connection() as conn:
            return _pg_runs.create(conn, self.namespace, record)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        check_id(record.id)
        expected = _pg_runs.parse_version(expected_version)
        if expected is None:
            return Conflict()
        with self.database.connection() as conn:
            return _pg_runs.put(conn, self.namespace, record, expected)

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        check_id(run_id)
        expected = _pg_runs.parse_version(expected_version)
        if expected is None:
            return Conflict()
        with self.database.connection() as conn:
            return _pg_runs.append(conn, self.namespace, run_id, delta, expected)

    def delete_run(self, run_id: str) -> None:
        check_id(run_id)
        with self.database.connection() as conn:
            self._ensure_floor(conn)
            with conn.transaction():
                _pg_locks.forget_lease(conn, self.namespace, run_id)
                _pg_runs.delete(conn, self.namespace, run_id)

    def list_runs(self, query: RunQuery = _EVERY_RUN) -> list[RunSummary]:
        with self.database.connection() as conn:
            return _pg_runs.listing(conn, self.namespace, query)

    # ------------------------------------------------------------------ locks

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        with self.database.connection() as conn:
            self._ensure_floor(conn)
            return _pg_locks.acquire(conn, self.namespace, key, holder, ttl_ms)

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        with self.database.connection() as conn:
            return _pg_locks.renew(conn, self.namespace, key, token, ttl_ms)

    def release_lock(self, key: str, token: str) -> None:
        check_id(key, "lock key")
        with self.database.connection() as conn:
            _pg_locks.release(conn, self.namespace, key, token)

    def break_lock(self, key: str) -> LockHolder | None:
        check_id(key, "lock key")
        with self.database.connection() as conn:
            return _pg_locks.break_claim(conn, self.namespace, key)

    def list_locks(self, *, run_id: str | None = None) -> list[LockEntry]:
        with self.database.connection() as conn:
            return _pg_locks.listing(conn, self.namespace, run_id)

    def _ensure_floor(self, conn: object) -> None:
        if not self._floor_ready:
            _pg_locks.ensure_floor(conn, self.namespace)  # type: ignore[arg-type]
            self._floor_ready = True


def from_url(spec: str, env: Mapping[str, str]) -> PostgresStateStore:
    """The store ``ZUKE_STATE=postgresql://…`` names; refused without ``zuke[postgres]``."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise StateError(
            "state: ZUKE_STATE names a Postgres database, but psycopg is not installed: "
            "pip install 'zuke[postgres]'"
        ) from None
    return PostgresStateStore(spec)


__all__ = ["SCHEMES", "PostgresStateStore", "from_url"]
