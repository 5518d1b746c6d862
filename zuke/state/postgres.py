"""``PostgresStateStore``: run records and locks in a Postgres database (``zuke[postgres]``).

``ZUKE_STATE=postgresql://USER@HOST:PORT/DB?sslmode=require`` (or
``postgres://``) names it. Many processes on many hosts may share one
database: every compare-and-swap, append and lock decision is one statement
(or one short transaction) decided by Postgres' row locks, and every expiry
by the database's clock (``clock_timestamp()``), never a client's.

The SQL lives beside it: :mod:`._pg_runs` (records, the journal, listing),
:mod:`._pg_locks` (lease rows with fences), :mod:`._pg_schema` (the versioned
schema and its migration), :mod:`._pg_conn` (the pool, calls that survive a
broken connection) over :mod:`._pg_url` (the URL, errors without the password).
psycopg is imported on first use, never by ``import zuke``.

A ``namespace`` keeps several independent stores in one set of tables (what
``zuke serve --db postgresql://`` will map its URL prefixes to); the store
``ZUKE_STATE`` names uses the empty one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, TypeVar

from zuke._errors import StateError
from zuke.state import _pg_driver, _pg_listen, _pg_locks, _pg_runs, _pg_send
from zuke.state._ids import check_id, check_ttl
from zuke.state._pg_conn import (
    DEFAULT_MAX_CONNECTIONS,
    POOL_SIZE_ENV,
    PgDatabase,
    lost_connection,
)
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
from zuke.state._unsure import UnsureWriteError, UnsureWrites
from zuke.state.records import RunDelta, RunRecord, RunSummary

if TYPE_CHECKING:
    from zuke.state._pg_conn import Conn

SCHEMES = ("postgresql", "postgres")
#: the largest pool ``ZUKE_PG_POOL_SIZE`` may ask for
MAX_POOL_SIZE = 1000
_EVERY_RUN: Final = RunQuery()
T = TypeVar("T")


class PostgresStateStore:
    """A :class:`~zuke.state.JournalingStateStore` with ``list_locks`` and ``break_lock``."""

    #: a write is one round trip on a pooled connection, cheaper than the hop to a worker
    #: thread and back: the engine makes it on the event loop's thread while nothing else
    #: of the run needs the loop (``zuke._engine.store_traits.local``)
    inline_writes = True
    #: ``append_run_known``'s ``after`` may be a function making the record, called only when
    #: a compaction is due (``zuke._engine.store_traits.lazy_after``): the run's writer then
    #: need not apply each delta to the record it holds (a copy of every row a write)
    append_after_lazily = True

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
        #: writes (and acquisitions) that failed unsure, to be looked up if sent again
        self._unsure: UnsureWrites[int] = UnsureWrites()
        self._unsure_locks: UnsureWrites[str] = UnsureWrites()

    def __repr__(self) -> str:
        ns = f", namespace={self.namespace!r}" if self.namespace else ""
        return f"PostgresStateStore({self.database.shown}{ns})"

    @property
    def display_name(self) -> str:
        """``postgresql://USER@HOST:PORT/DB`` (never the password): the store as messages
        name it, with its namespace if it has one."""
        ns = f" (namespace {self.namespace})" if self.namespace else ""
        return f"{self.database.shown}{ns}"

    def close(self) -> None:
        """Close the pool (the database object's: stores sharing it are closed too)."""
        self.database.close()

    def listen(self, wake: _pg_listen.Wake) -> _pg_listen.Listener:
        """Call ``wake`` when a run parks or a signal lands (LISTEN/NOTIFY on a connection of
        its own) until the listener is closed: what ``zuke resume --check --watch`` looks for."""
        return _pg_listen.listen(self.database, self.namespace, wake)

    def initialize(self, *, force: bool = False) -> str:
        """``zuke state init``: connect and bring the schema to this zuke's version now.

        Every first use does the same; this lets an operator do it ahead, with a
        role allowed to create tables, and see that the URL works. ``force``
        changes nothing here: no state is ever started afresh.
        """
        from zuke.state._pg_schema import SCHEMA_VERSION

        del force
        self.database.call(lambda conn: conn.execute("SELECT 1"))
        self._floor_ready = False
        self.database.call(self._ensure_floor)
        return f"{self.database.shown} is ready (schema version {SCHEMA_VERSION})"

    # ------------------------------------------------------------------ runs
    # Every call goes through PgDatabase.call: a connection that broke (a restart) is
    # replaced; a write whose answer was lost is looked up by its drawn version or token.

    def get_run(self, run_id: str) -> StoredRun | None:
        check_id(run_id)
        return self._call(lambda conn: _pg_runs.get(conn, self.namespace, run_id))

    def create_run(self, record: RunRecord) -> Written | Conflict:
        check_id(record.id)
        ns = self.namespace

        def write(conn: Conn, version: int) -> Written | Conflict:
            return _pg_runs.create(conn, ns, record, version=version)

        return self._write(record.id, None, record, write)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        check_id(record.id)
        expected = _pg_runs.parse_version(expected_version)
        if expected is None:
            return Conflict()
        ns = self.namespace

        def write(conn: Conn, version: int) -> Written | Conflict:
            return _pg_runs.put(conn, ns, record, expected, version=version)

        return self._write(record.id, expected, record, write)

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        return self._append(run_id, delta, expected_version, None)

    def append_run_known(
        self,
        run_id: str,
        delta: RunDelta,
        *,
        expected_version: str,
        after: RunRecord | Callable[[], RunRecord],
    ) -> Written | Conflict:
        """:meth:`append_run`, given ``after``, the record the delta makes (``update_run``
        knows it), or a function making it (the run's writer), called only when a compaction
        is due: it is written instead of reading the journal back."""
        return self._append(run_id, delta, expected_version, after)

    def send_append_known(
        self,
        run_id: str,
        delta: RunDelta,
        *,
        expected_version: str,
        after: Callable[[], RunRecord],
    ) -> Callable[[], Written | Conflict] | None:
        """:meth:`append_run_known`, sent now and answered later: the function returned waits
        for the answer (what ``append_run_known`` would have returned or raised), which must
        be asked for before anything else is written. ``None``: not sent — not this delta (a
        status, an actor, a signal: another statement), nor without an idle pooled
        connection (:mod:`._pg_send`); ``append_run_known`` writes it then."""
        check_id(run_id)
        expected = _pg_runs.parse_version(expected_version)
        if expected is None or self._unsure.key(run_id, str(expected), delta) is not None:
            return None  # a write sent again after a lost answer is looked up first: _write
        if delta.status is not None or delta.actor is not None or delta.signals:
            return None  # another statement (_pg_append.append)
        version = self._version()  # before lending: drawing one may need the pool
        args = _pg_send.plain_append_args(self.namespace, run_id, delta, expected, version)
        lent = None if args is None else self.database.lend_idle()
        sent = None if lent is None or args is None else _pg_send.send(lent, args)
        if sent is None:
            return None
        return lambda: self._sent_answer(sent, run_id, delta, expected, version, after)

    def _sent_answer(
        self,
        sent: _pg_send.Sent,
        run_id: str,
        delta: RunDelta,
        expected: int,
        version: int,
        after: Callable[[], RunRecord],
    ) -> Written | Conflict:
        """A sent append's answer. One that did not come was refused before it ran (a
        pooler: sent the ordinary way), refused by the server (nothing applied: an error),
        or lost with its connection — it may have landed, so its witness is looked up before
        it is sent again the ordinary way (:meth:`_write`): applied once whatever happened."""
        try:
            made = sent.answer()
        except Exception as exc:
            import psycopg2
            from psycopg2.errors import InvalidSqlStatementName

            if isinstance(exc, InvalidSqlStatementName):
                sent.conn.prepared = None  # it keeps none: never again on this connection
                return self._append(run_id, delta, str(expected), after)
            if not isinstance(exc, psycopg2.Error):
                raise
            if not lost_connection(exc, sent.conn):
                raise self.database._failed(exc) from None
            self._unsure.note(run_id, str(expected), delta, version)
            return self._append(run_id, delta, str(expected), after)
        if made is None:
            return Conflict()
        if made < 0:  # a compaction is due: on a pooled connection, as _pg_runs.append does it
            ns = self.namespace
            return self._call(lambda conn: _pg_runs.appended(conn, ns, run_id, made, after))
        return Written(version=str(made))

    def _append(
        self,
        run_id: str,
        delta: RunDelta,
        expected_version: str,
        after: RunRecord | Callable[[], RunRecord] | None,
    ) -> Written | Conflict:
        check_id(run_id)
        expected = _pg_runs.parse_version(expected_version)
        if expected is None:
            return Conflict()
        ns = self.namespace

        def write(conn: Conn, version: int) -> Written | Conflict:
            return _pg_runs.append(conn, ns, run_id, delta, expected, version=version, after=after)

        return self._write(run_id, expected, delta, write)

    def _write(
        self,
        run_id: str,
        expected: int | None,
        payload: object,
        write: Callable[[Conn, int], Written | Conflict],
    ) -> Written | Conflict:
        """A write at ``expected`` (``None``: a create) under a version drawn for it, which is
        also its witness (``zuke_run_writes``): after a lost answer the witness says whether it
        landed — ``Written`` then, whatever landed after it — before anything is sent again.
        The same write sent again after a call that failed unsure (:mod:`._unsure`) keeps its
        version, and so is looked up first."""
        at = "" if expected is None else str(expected)
        known = self._unsure.key(run_id, at, payload)
        version = self._version() if known is None else known

        def landed(conn: Conn) -> Written | Conflict | None:
            key = _pg_runs.write_key(version)
            made, now = _pg_runs.witnessed(conn, self.namespace, run_id, key)
            if made is not None:
                return Written(version=str(made))
            still = now is None if expected is None else now == expected
            return None if still else Conflict()  # not landed: it still can, or never will

        try:
            outcome = self._call(
                lambda conn: write(conn, version), landed=landed, unsure=known is not None
            )
        except UnsureWriteError:
            self._unsure.note(run_id, at, payload, version)
            raise
        self._unsure.forget(run_id, at, payload)
        return outcome

    def delete_run(self, run_id: str) -> None:
        check_id(run_id)

        def delete(conn: Conn) -> None:
            self._ensure_floor(conn)
            with conn.transaction():
                _pg_locks.forget_lease(conn, self.namespace, run_id)
                _pg_runs.delete(conn, self.namespace, run_id)

        self._call(delete)  # twice is once: the run is gone either way

    def list_runs(self, query: RunQuery = _EVERY_RUN) -> list[RunSummary]:
        return self._call(lambda conn: _pg_runs.listing(conn, self.namespace, query))

    # ------------------------------------------------------------------ locks

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        ns, asked = self.namespace, (holder, ttl_ms)
        known = self._unsure_locks.key(key, "", asked)  # the same acquisition, sent again
        # 32 random hex digits, as uuid4().hex: without importing uuid (platform)
        token = os.urandom(16).hex() if known is None else known

        def acquire(conn: Conn) -> LockAcquired | LockHeld:
            self._ensure_floor(conn)
            return _pg_locks.acquire(conn, ns, key, holder, ttl_ms, token=token)

        try:
            taken = self._call(
                acquire,
                landed=lambda conn: _pg_locks.held_by(conn, ns, key, token),
                unsure=known is not None,
            )
        except UnsureWriteError:
            self._unsure_locks.note(key, "", asked, token)
            raise
        self._unsure_locks.forget(key, "", asked)
        return taken

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        return self._call(  # twice is once: the TTL counts from the last
            lambda conn: _pg_locks.renew(conn, self.namespace, key, token, ttl_ms)
        )

    def release_lock(self, key: str, token: str) -> None:
        check_id(key, "lock key")
        self._call(lambda conn: _pg_locks.release(conn, self.namespace, key, token))

    def break_lock(self, key: str) -> LockHolder | None:
        check_id(key, "lock key")
        # Sent again after a lost answer, it would say "not held" of a claim it broke.
        return self._call(
            lambda conn: _pg_locks.break_claim(conn, self.namespace, key), resend=False
        )

    def list_locks(self, *, run_id: str | None = None) -> list[LockEntry]:
        return self._call(lambda conn: _pg_locks.listing(conn, self.namespace, run_id))

    def _call(
        self,
        work: Callable[[Conn], T],
        *,
        landed: Callable[[Conn], T | None] | None = None,
        resend: bool = True,
        unsure: bool = False,
    ) -> T:
        """Every statement of the store's calls goes through here (:meth:`PgDatabase.call`)."""
        return self.database.call(work, landed=landed, resend=resend, unsure=unsure)

    def _version(self) -> int:
        """A version for the next write, drawn through :meth:`_call` (in blocks)."""
        return self.database.version(self._call)

    def _ensure_floor(self, conn: Conn) -> None:
        if not self._floor_ready:
            _pg_locks.ensure_floor(conn, self.namespace)
            self._floor_ready = True


def from_url(spec: str, env: Mapping[str, str]) -> PostgresStateStore:
    """The store ``ZUKE_STATE=postgresql://…`` names; refused without ``zuke[postgres]``."""
    try:
        _pg_driver.load()  # without Python's ssl: libpq has its own TLS
    except ImportError:
        raise StateError(
            "state: ZUKE_STATE names a Postgres database, but psycopg is not installed: "
            "pip install 'zuke[postgres]'"
        ) from None
    return PostgresStateStore(spec, max_connections=pool_size(env))


def pool_size(env: Mapping[str, str]) -> int:
    """``ZUKE_PG_POOL_SIZE``: the most connections one zuke process opens (10 unless set)."""
    raw = env.get(POOL_SIZE_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_CONNECTIONS
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_POOL_SIZE:
        raise StateError(
            f"state: {POOL_SIZE_ENV} must be a whole number from 1 to {MAX_POOL_SIZE}, "
            f"not {raw[:40]!r}"
        )
    return int(raw)


__all__ = ["SCHEMES", "PostgresStateStore", "from_url", "pool_size"]
