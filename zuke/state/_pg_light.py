"""A light read path to Postgres: libpq through :mod:`ctypes`, without psycopg.

``import psycopg`` and its pool cost 0.14 to 0.16 s here: more than all of ``zuke
runs list`` may take (under 100 ms, issue 18). So the store ``ZUKE_STATE``
names reads runs, one run and the locks through libpq itself until something
needs the full store (a write, a lock, a migration), and only then imports
psycopg. A listing command, or a sweep with nothing due, never does.

It answers only what it can answer exactly, and leaves everything else to the
full store, which then says what the store says (its messages, with the
password scrubbed):

* **the same connection**: the URL goes to libpq unchanged (``PQconnectdbParams``
  with ``expand_dbname``; zuke's ``connect_timeout`` and ``application_name``
  come before it, so the URL's own win, as in :mod:`._pg_conn`), so every libpq
  parameter (``sslmode``, …) and ``PG*`` variable means what it means there;
* **the same statements**: the store's own read-only SQL (:func:`._pg_runs.listing_sql`,
  :data:`._pg_runs.ROW_SQL`, :func:`._pg_locks.listing_sql`), its rows turned
  into values by the store's own functions;
* **or none**: no libpq (psycopg-binary's bundled one, else the system's
  ``libpq.so.5``), a connection that fails, a schema at another version (or
  none yet: the full store migrates it), a ``client_encoding`` other than
  UTF8, any failed statement — from then on this process uses the full store.

``ZUKE_PG_LIGHT=0`` turns it off (every call through psycopg).
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypeVar, cast

from zuke._errors import StateError
from zuke.state import _pg_locks, _pg_runs
from zuke.state._ids import check_id
from zuke.state._pg_conn import CONNECT_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS
from zuke.state._pg_libpq import LibpqConnection, LibpqFailed, LibpqLost, declare, text_array
from zuke.state._pg_schema import SCHEMA_VERSION
from zuke.state._protocol import LockEntry, RunQuery, StoredRun
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunSummary

if TYPE_CHECKING:
    from zuke.state._pg_conn import Conn

T = TypeVar("T")

_EVERY_RUN: Final = RunQuery()
_CONNECTION_OK = 0
_PGRES_TUPLES_OK = 2
#: what a row holds: text, or ``None`` for SQL NULL
Row = tuple[str | None, ...]


def find_libpq() -> list[str]:
    """Where libpq may be, best first, found without importing psycopg: psycopg-binary's own
    (the one psycopg uses here), then the dynamic loader's."""
    found = []
    for entry in sys.path:
        libs = os.path.join(entry or ".", "psycopg_binary.libs")
        try:
            names = sorted(os.listdir(libs))
        except OSError:
            continue
        found += [os.path.join(libs, n) for n in names if n.startswith("libpq") and ".so" in n]
    return [*found, "libpq.so.5", "libpq.5.dylib"]


def _prepared(path: str) -> ctypes.CDLL:
    """libpq at ``path``, the few functions the reader calls given their C types."""
    lib = ctypes.CDLL(path)
    p, s, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    strings = ctypes.POINTER(ctypes.c_char_p)
    for name, args, result in (
        ("PQconnectdbParams", [strings, strings, i], p),
        ("PQstatus", [p], i),
        ("PQparameterStatus", [p, s], s),
        ("PQfinish", [p], None),
        ("PQexecParams", [p, s, i, p, strings, p, p, i], p),
        ("PQresultStatus", [p], i),
        ("PQntuples", [p], i),
        ("PQnfields", [p], i),
        ("PQgetvalue", [p, i, i], p),
        ("PQgetlength", [p, i, i], i),
        ("PQgetisnull", [p, i, i], i),
        ("PQclear", [p], None),
    ):
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    declare(lib)
    return lib


def _load(candidates: Sequence[str]) -> ctypes.CDLL | None:
    for path in candidates:
        try:
            return _prepared(path)
        except (OSError, AttributeError):  # absent, or not a libpq we can call
            continue
    return None


def _strings(values: Sequence[bytes]) -> ctypes.Array[ctypes.c_char_p]:
    return (ctypes.c_char_p * (len(values) + 1))(*values, None)


_PLACEHOLDER = re.compile(rb"%[s%]")


def numbered(sql: bytes) -> bytes:
    """psycopg's ``%s`` placeholders as libpq's ``$1, $2, …`` (``%%`` is a ``%``)."""
    count = 0

    def number(match: re.Match[bytes]) -> bytes:
        nonlocal count
        if match.group() == b"%%":
            return b"%"
        count += 1
        return b"$%d" % count

    return _PLACEHOLDER.sub(number, sql)


class LightUnavailable(Exception):
    """The light path cannot answer; ``sent``: a statement went out and may have landed (the
    full store checks before it sends a write again)."""

    def __init__(self, *, sent: bool, reason: str = "the light path cannot answer") -> None:
        super().__init__(reason)
        self.sent = sent
        self.reason = reason


class LightReader:
    """One libpq connection for reads, opened on first use; ``None`` answers mean "ask the
    full store". Thread-safe (one statement at a time)."""

    def __init__(self, url: str, libpq: Sequence[str] | None = None) -> None:
        self._url = url
        self._candidates = find_libpq() if libpq is None else libpq
        self._lib: ctypes.CDLL | None = None
        self._conn: int | None = None
        self._finalizer: weakref.finalize[..., LightReader] | None = None
        self._lock = threading.Lock()
        #: the connection's statements run once (``None``) or prepared (their name)
        self._statements: dict[tuple[bytes, tuple[int, ...]], bytes | None] = {}
        #: ``False`` once anything failed: the full store answers from then on
        self.usable = True

    def run(self, work: Callable[[LibpqConnection], T]) -> T:
        """``work`` on this path's connection (the store's own statements, psycopg's calls
        answered by :class:`~._pg_libpq.LibpqConnection`).

        Raises :class:`LightUnavailable` when this path cannot answer — it was given
        up, cannot connect, or the call failed (the path is given up then) — saying
        whether a statement may have landed; anything else ``work`` raises (a record
        that does not parse) is the store's answer, as through psycopg.
        """
        with self._lock:
            if not self.usable:
                raise LightUnavailable(sent=False)
            try:
                connected = self._connected()
            except UnicodeError:  # a URL UTF-8 cannot carry: the store's to judge
                connected = False
            if not connected:
                self._give_up()
                raise LightUnavailable(sent=False)
            assert self._lib is not None and self._conn is not None
            conn = LibpqConnection(self._lib, self._conn, self._statements)
            try:
                return work(conn)
            except LibpqFailed as exc:
                # refused and rolled back — unless an earlier statement of the call landed
                self._give_up()
                raise LightUnavailable(sent=conn.sent > 1, reason=str(exc)) from None
            except LibpqLost as exc:
                self._give_up()
                raise LightUnavailable(sent=True, reason=str(exc)) from None

    def rows(self, sql: bytes, args: Sequence[str | int]) -> list[Row] | None:
        """The rows of one read-only statement, or ``None`` if this path cannot answer."""
        with self._lock:
            if not self.usable:
                return None
            try:
                found = self._execute(sql, args) if self._connected() else None
            except UnicodeError:  # a URL or a value UTF-8 cannot carry: the store's to judge
                found = None
            if found is None:
                self._give_up()
            return found

    def _connected(self) -> bool:
        if self._conn is not None:
            return True
        self._lib = _load(self._candidates)
        if self._lib is None:
            return False
        keys = _strings([b"connect_timeout", b"application_name", b"dbname"])
        values = _strings([str(CONNECT_TIMEOUT_S).encode(), b"zuke", self._url.encode()])
        conn = self._lib.PQconnectdbParams(keys, values, 1)
        if not conn:
            return False
        self._conn = conn
        self._finalizer = weakref.finalize(self, self._lib.PQfinish, conn)
        if self._lib.PQstatus(conn) != _CONNECTION_OK:
            return False
        encoding = self._lib.PQparameterStatus(conn, b"client_encoding")
        if encoding != b"UTF8":
            return False
        version = self._execute(b"SELECT max(version) FROM zuke_schema_version", ())
        return version is not None and version == [(str(SCHEMA_VERSION),)]

    def _execute(self, sql: bytes, args: Sequence[str | int]) -> list[Row] | None:
        lib, conn = self._lib, self._conn
        assert lib is not None and conn is not None
        values = _strings([str(a).encode() for a in args])
        result = lib.PQexecParams(conn, numbered(sql), len(args), None, values, None, None, 0)
        if not result:
            return None
        try:
            if lib.PQresultStatus(result) != _PGRES_TUPLES_OK:
                return None
            width = lib.PQnfields(result)
            found: list[Row] = []
            for row in range(lib.PQntuples(result)):
                found.append(
                    tuple(
                        None
                        if lib.PQgetisnull(result, row, col)
                        else ctypes.string_at(
                            lib.PQgetvalue(result, row, col),
                            lib.PQgetlength(result, row, col),
                        ).decode()
                        for col in range(width)
                    )
                )
            return found
        finally:
            lib.PQclear(result)

    def give_up(self) -> None:
        """Leave every later read to the full store (an answer this path cannot read)."""
        with self._lock:
            self._give_up()

    def _give_up(self) -> None:
        self.usable = False
        self.close_connection()

    def close_connection(self) -> None:
        self._conn = None
        self._statements.clear()
        if self._finalizer is not None:
            self._finalizer()


class LightPostgresStore(PostgresStateStore):
    """The Postgres store, whose ``list_runs``, ``get_run`` and ``list_locks`` go through
    :class:`LightReader` until the store's own pool is open (then psycopg is loaded anyway)."""

    inline_writes = True  # as the store's own writes (``store_traits.local``)

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "",
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        libpq: Sequence[str] | None = None,
    ) -> None:
        super().__init__(url, namespace=namespace, max_connections=max_connections)
        self.reader: Final = LightReader(url, libpq)

    def _light(self) -> LightReader | None:
        # the pool is PgDatabase's; once it is open, psycopg is paid for and the store reads
        opened = getattr(self.database, "_pool", None) is not None
        return None if opened or not self.reader.usable else self.reader

    def _call(
        self,
        work: Callable[[Conn], T],
        *,
        landed: Callable[[Conn], T | None] | None = None,
        resend: bool = True,
    ) -> T:
        """``work`` on the light path's connection; if it cannot answer, on the pool's, which
        first checks whether a write that went out landed (``landed``), as after any broken
        connection — so a write is applied once, whichever path carried it."""
        reader = self._light()
        if reader is None:
            return self.database.call(work, landed=landed, resend=resend)
        try:
            return reader.run(cast("Callable[[LibpqConnection], T]", work))
        except LightUnavailable as unavailable:
            if unavailable.sent and not resend:  # it cannot tell, and must not send it again
                raise self.database.unsure(unavailable.reason) from None
            return self.database.call(work, landed=landed, resend=resend, unsure=unavailable.sent)

    def list_runs(self, query: RunQuery = _EVERY_RUN) -> list[RunSummary]:
        reader = self._light()
        rows = None if reader is None else reader.rows(*_pg_runs.listing_sql(self.namespace, query))
        return super().list_runs(query) if rows is None else _pg_runs.summaries(rows)

    def get_run(self, run_id: str) -> StoredRun | None:
        check_id(run_id)
        reader = self._light()
        rows = (
            None
            if reader is None
            else reader.rows(_pg_runs.ROW_SQL.encode(), (self.namespace, run_id))
        )
        if rows is None:
            return super().get_run(run_id)
        if not rows:
            return None
        text, version, deltas = rows[0]
        try:
            journal = None if deltas is None else text_array(deltas)
        except ValueError:
            journal = None
        if text is None or version is None or journal is None:  # not what the SQL returns
            self.reader.give_up()
            return super().get_run(run_id)
        return _pg_runs.stored(run_id, (text, version, journal))

    def list_locks(self, *, run_id: str | None = None) -> list[LockEntry]:
        reader = self._light()
        rows = (
            None if reader is None else reader.rows(*_pg_locks.listing_sql(self.namespace, run_id))
        )
        return super().list_locks(run_id=run_id) if rows is None else _pg_locks.entries(rows)

    def close(self) -> None:
        self.reader.close_connection()
        super().close()


def from_url(spec: str, env: Mapping[str, str]) -> PostgresStateStore:
    """The store ``ZUKE_STATE=postgresql://…`` names (light reads); refused without
    ``zuke[postgres]``, as :func:`zuke.state.postgres.from_url` refuses, without importing it."""
    from importlib.util import find_spec

    if find_spec("psycopg") is None or find_spec("psycopg_pool") is None:
        raise StateError(
            "state: ZUKE_STATE names a Postgres database, but psycopg is not installed: "
            "pip install 'zuke[postgres]'"
        )
    from zuke.state import postgres

    if env.get("ZUKE_PG_LIGHT", "") == "0":  # the operator's way out: psycopg for every call
        return postgres.from_url(spec, env)
    return LightPostgresStore(spec, max_connections=postgres.pool_size(env))


__all__ = [
    "LightPostgresStore", "LightReader", "LightUnavailable", "find_libpq", "from_url", "numbered",
    "text_array",
]  # fmt: skip
