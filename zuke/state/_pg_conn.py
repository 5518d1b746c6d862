"""The Postgres store's connections: the URL, the pool, and errors that never show a password.

A ``postgresql://`` (or ``postgres://``) URL is handed to libpq as it is, so
every libpq parameter (``sslmode``, ``sslrootcert``, ``options``, ``target_session_attrs``
…) and the ``PG*`` environment variables work; zuke adds ``connect_timeout``
and ``application_name`` only when the URL does not set them.

Messages name the database as ``postgresql://USER@HOST:PORT/DB``, never with
its password, and every error text from libpq is scrubbed of the password
(however the URL spelled it) before it is shown, on one line.

Connections come from a ``psycopg_pool`` pool in autocommit mode: the store's
statements are single statements or explicit short transactions, and no
session state (no advisory lock, no ``SET``) outlives one, so the store works
behind a transaction pooler (PgBouncer) too. The first connection is made
directly, to say why it failed (a refused connection, a bad password) rather
than the pool's "timed out", and to migrate the schema.

**A connection that breaks** (a server restart or failover, a dropped link)
is not a failed call: :meth:`PgDatabase.call` drops the pool's idle
connections that broke with it (``pool.check()``) and runs the call again on a
fresh one, which the pool waits for while the server comes back (up to its
timeout). Checking every connection as it leaves the pool would cost a round
trip per statement; a broken one is found by its first statement instead, at
no cost until it happens. A *write* whose connection broke may have been
committed with only its answer lost: it is never simply sent again. Its
``landed`` check reads, on the fresh connection, whether it was applied — a
compare-and-swap carries a version drawn beforehand from the database's
sequence (:meth:`PgDatabase.version`), which no other write can carry, and an
acquisition its own token — so a write is applied once, whatever was lost.

When no connection comes, the message says why and what to check: the
server's own refusal (not running, a bad password, a missing database,
``max_connections`` reached) from a direct attempt, or a pool whose
connections all stayed busy (its size: ``ZUKE_PG_POOL_SIZE``).
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from zuke._errors import StateError, StoreUnavailableError
from zuke.state._protocol import Conflict

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    Conn = psycopg.Connection[tuple[Any, ...]]

T = TypeVar("T")

CONNECT_TIMEOUT_S = 10
POOL_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 10
#: the environment variable that sizes a zuke process's pool (``ZUKE_STATE=postgresql://``)
POOL_SIZE_ENV = "ZUKE_PG_POOL_SIZE"
#: fresh connections one call tries after its connection broke (a restart breaks them all)
RECONNECTS = 3
#: versions drawn from the sequence in one round trip, for the writes that follow
VERSION_BLOCK = 128
CHECK = (
    "check that the server is up and reachable, and the user, password and database in ZUKE_STATE"
)
#: SQLSTATEs that end a connection the server will take again: admin/crash shutdown, starting up
_GONE_STATES = frozenset({"57P01", "57P02", "57P03"})
#: what a server says while it starts or recovers (a restart, a crash): it answers soon
_COMING_UP = ("starting up", "not yet accepting connections", "in recovery")
#: pauses between first connections to a server coming up, the last one repeated
_COMING_UP_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
#: (what libpq said, what to check) — the first that matches a refusal names its advice
_ADVICE: tuple[tuple[str, str], ...] = (
    ("password authentication failed", "check the user and password in {setting} (or "
     "PGPASSWORD, ~/.pgpass)"),
    ("no password supplied", "give the password in {setting} (or PGPASSWORD, ~/.pgpass)"),
    ("does not exist", "check the user and database names in {setting}, or create the database"),
    ("too many clients", "the server's max_connections is reached: lower {pool} (now {size}) "
     "in each zuke process, or raise max_connections on the server"),
    ("remaining connection slots", "the server's max_connections is reached: lower {pool} "
     "(now {size}) in each zuke process, or raise max_connections on the server"),
    ("starting up", "the server is starting: retry in a moment"),
    ("shutting down", "the server is shutting down: check why, and start it"),
    ("recovery", "the server is recovering: retry in a moment"),
    ("connection refused", "check that the server is up and listening at {where} "
     "(pg_isready -h {host} -p {port}), and the host and port in {setting}"),
    ("timeout expired", "check that the server is up and reachable from here at {where} (a "
     "firewall?), and the host and port in {setting}"),
)  # fmt: skip


def lost_connection(exc: BaseException, conn: object | None) -> bool:
    """Whether ``exc`` ended the connection (a restart, a dropped link), not the statement."""
    if conn is not None and (getattr(conn, "broken", False) or getattr(conn, "closed", False)):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return state in _GONE_STATES or state.startswith("08")


def _secrets_of(url: str) -> list[str]:
    """Every spelling of the URL's password(s), to scrub from messages."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
        raw = parts.netloc.rpartition("@")[0].partition(":")[2] if "@" in parts.netloc else ""
        found += [raw, unquote(raw)]
        found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k == "password"]
        found += re.findall(r"password=([^&\s]+)", url)
    except ValueError:
        pass
    return sorted({s for s in found if s}, key=len, reverse=True)


def shown_url(url: str) -> str:
    """``postgresql://USER@HOST:PORT/DB``, from what the URL says (no password, no query)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        user = f"{unquote(parts.username)}@" if parts.username else ""
    except ValueError:
        return "postgresql://(a URL that does not parse)"
    return f"postgresql://{user}{host}{port}{parts.path}"


class PgDatabase:
    """One Postgres database: a pool opened on first use, the schema migrated then."""

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool_timeout_s: float = POOL_TIMEOUT_S,
        setting: str = "ZUKE_STATE",
        pool_setting: str = POOL_SIZE_ENV,
    ) -> None:
        self.shown = shown_url(url)
        #: where the URL came from, for messages (``zuke serve`` says ``--db``)
        self.setting = setting
        #: what sizes the pool, for messages
        self.pool_setting = pool_setting
        self._secrets = _secrets_of(url)
        self._url = url
        self._max = max_connections
        self._pool_timeout_s = pool_timeout_s
        self._pool: ConnectionPool[Conn] | None = None
        self._finalizer: weakref.finalize[[], PgDatabase] | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._versions: list[int] = []
        self._versions_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PgDatabase({self.shown})"

    @property
    def _check(self) -> str:
        return CHECK.replace("ZUKE_STATE", self.setting)

    def advice(self, said: str) -> str:
        """What to check after the server (or libpq) said ``said``."""
        lowered = said.lower()
        try:
            parts = urlsplit(self._url)
            host, port = parts.hostname or "localhost", str(parts.port or 5432)
        except ValueError:
            host, port = "HOST", "PORT"
        for clue, advice in _ADVICE:
            if clue in lowered:
                return advice.format(
                    setting=self.setting, pool=self.pool_setting, size=self._max,
                    where=f"{host}:{port}", host=host, port=port,
                )  # fmt: skip
        return self._check

    def scrub(self, text: str) -> str:
        """``text`` on one line, without the password."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return "; ".join(line.strip() for line in text.splitlines() if line.strip())

    def _conninfo(self) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        try:
            given = conninfo_to_dict(self._url)
        except Exception as exc:  # psycopg.ProgrammingError: libpq could not parse it
            raise StateError(
                f"state: {self.setting} is not a Postgres URL libpq accepts "
                f"({self.scrub(str(exc))})"
            ) from None
        extra: dict[str, str | int] = {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": "zuke",
        }
        return make_conninfo(self._url, **{k: v for k, v in extra.items() if k not in given})

    def _open(self) -> ConnectionPool[Conn]:
        with self._lock:
            if self._closed:
                raise StoreUnavailableError(f"state: the Postgres store {self.shown} is closed")
            if self._pool is not None:
                return self._pool
            from psycopg_pool import ConnectionPool

            conninfo = self._conninfo()
            self._prepare_first(conninfo)
            # psycopg_pool logs reconnections as warnings; keep them off a bare stderr.
            logging.getLogger("psycopg").addHandler(logging.NullHandler())
            self._pool = ConnectionPool(
                conninfo,
                kwargs={"autocommit": True},
                min_size=1,
                max_size=max(1, self._max),
                timeout=self._pool_timeout_s,
                name="zuke-state",
                open=True,
            )
            # Closed when this object goes (a command that never calls close()) or at exit,
            # from this side: left to itself, the pool may be collected on one of its own
            # worker threads, whose __del__ then fails to join that very thread.
            self._finalizer = weakref.finalize(self, self._pool.close)
            return self._pool

    def _prepare_first(self, conninfo: str) -> None:
        """Connect once and migrate the schema; a server that is starting or recovering (a
        restart, a crash) is waited for, up to the pool's timeout, as the pool waits later."""
        import psycopg

        from zuke.state._pg_schema import prepare

        deadline = time.monotonic() + self._pool_timeout_s
        for attempt in itertools.count():
            try:
                with psycopg.connect(conninfo, autocommit=True) as first:
                    prepare(first, self.shown)
                return
            except psycopg.Error as exc:
                said = self.scrub(str(exc))
                pause = _COMING_UP_BACKOFF_S[min(attempt, len(_COMING_UP_BACKOFF_S) - 1)]
                if any(c in said for c in _COMING_UP) and time.monotonic() + pause < deadline:
                    time.sleep(pause)
                    continue
                raise StoreUnavailableError(
                    f"state: cannot use Postgres at {self.shown}: {said}; {self.advice(said)}"
                ) from None

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """A pooled autocommit connection; psycopg's errors become one redacted ``zuke:`` line.

        Used as it is, nothing is retried: the store's calls go through :meth:`call`.
        """
        import psycopg
        from psycopg_pool import PoolTimeout

        pool = self._open()
        try:
            with pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise self._no_connection(pool) from None
        except psycopg.Error as exc:
            raise self._failed(exc) from None

    def call(
        self,
        work: Callable[[Conn], T],
        *,
        landed: Callable[[Conn], T | None] | None = None,
        resend: bool = True,
        unsure: bool = False,
    ) -> T:
        """``work(conn)`` on a pooled connection, again on a fresh one if the connection broke.

        ``landed(conn)``, for a write: after a broken connection, whether the
        write was applied (its outcome) or not (``None``: ``work`` runs again).
        ``resend=False``: a write that cannot tell is not sent again; the
        error says it may have landed. ``unsure``: the write went out already, on
        another connection that broke (the light path's): ``landed`` is asked first.

        A write sent again is followed by ``landed`` once more: the first sending
        may still be running on the server when it is asked (its backend has not
        yet seen its client go), and commit after it, before the second one; the
        second then meets a row that moved and answers a conflict that was its own.
        Only a "landed" is taken from that look (a conflict seen then may be a third
        writer's, after the second sending's own write).
        """
        import psycopg
        from psycopg_pool import PoolTimeout

        pool = self._open()
        # a write was sent on a connection that broke: did it land?
        for attempt in range(RECONNECTS + 1):
            conn: Conn | None = None
            try:
                with pool.connection() as conn:
                    if not (unsure and landed is not None):
                        return work(conn)
                    outcome = landed(conn)
                    if outcome is not None:
                        return outcome
                    unsure = False
                    outcome = work(conn)  # sent again: whichever sending landed, it is ours
                    after = landed(conn)
                    return outcome if after is None or isinstance(after, Conflict) else after
            except PoolTimeout:
                raise self._no_connection(pool) from None
            except psycopg.Error as exc:
                if not lost_connection(exc, conn):
                    raise self._failed(exc) from None
                if not resend or attempt == RECONNECTS:
                    raise self._failed(exc, lost=attempt + 1, unsure=not resend) from None
                unsure = True
                pool.check()  # its other idle connections broke too (a restart)
        raise AssertionError("unreachable")

    def version(self, call: Callable[[Callable[[Conn], Any]], Any] | None = None) -> int:
        """A version no other write carries: drawn from the database's sequence, in blocks
        (through ``call``, :meth:`call` unless given: the light path's)."""
        with self._versions_lock:
            if not self._versions:
                rows = (call or self.call)(lambda conn: conn.execute(
                    "SELECT nextval('zuke_run_versions') FROM generate_series(1, %s)",
                    (VERSION_BLOCK,),
                ).fetchall())  # fmt: skip
                self._versions = sorted((int(v) for (v,) in rows), reverse=True)
            return self._versions.pop()

    def unsure(self, said: str) -> StoreUnavailableError:
        """A write that went out on a connection that broke, which cannot tell whether it
        landed and must not be sent again (the light path's, :meth:`call`'s ``resend=False``)."""
        return self._failed(Exception(said), lost=1, unsure=True)

    def _failed(
        self, exc: BaseException, *, lost: int = 0, unsure: bool = False
    ) -> StoreUnavailableError:
        said = self.scrub(str(exc))
        if not lost:
            return StoreUnavailableError(f"state: Postgres at {self.shown} failed: {said}")
        if unsure:
            return StoreUnavailableError(
                f"state: the connection to Postgres at {self.shown} broke mid-call ({said}); "
                "the change may or may not have been applied: look before you retry"
            )
        return StoreUnavailableError(
            f"state: the connection to Postgres at {self.shown} broke {lost} times in a row "
            f"({said}); {self._check}"
        )

    def _no_connection(self, pool: ConnectionPool[Conn]) -> StoreUnavailableError:
        """Why the pool gave no connection in time: every one busy, or the server's refusal."""
        stats = pool.get_stats()
        waited = f"{self._pool_timeout_s:g}s"
        if stats.get("pool_size", 0) >= self._max and not stats.get("pool_available", 0):
            return StoreUnavailableError(
                f"state: all {self._max} connections of this process's pool to Postgres at "
                f"{self.shown} stayed in use for {waited}; raise {self.pool_setting} (now "
                f"{self._max}), keeping every process's together under the server's "
                "max_connections"
            )
        import psycopg

        try:  # the pool keeps the server's refusal to itself: ask once more, directly
            with psycopg.connect(self._conninfo(), autocommit=True):
                said = "the server accepted a connection only now"
        except psycopg.Error as exc:
            said = self.scrub(str(exc))
        return StoreUnavailableError(
            f"state: no connection to Postgres at {self.shown} within {waited}: {said}; "
            f"{self.advice(said)}"
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._pool, finalizer = None, self._finalizer
        if finalizer is not None:
            finalizer()


__all__ = ["POOL_SIZE_ENV", "PgDatabase", "lost_connection", "shown_url"]
