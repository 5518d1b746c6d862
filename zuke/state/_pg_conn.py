"""The Postgres store's connections: the URL, the pool, and errors that never show a password.

A ``postgresql://`` (or ``postgres://``) URL is handed to libpq as it is, so
every libpq parameter (``sslmode``, ``sslrootcert``, ``options``, ``target_session_attrs``
…) and the ``PG*`` environment variables work; zuke adds ``connect_timeout``
and ``application_name`` only when the URL does not set them.

Messages name the database as ``postgresql://USER@HOST:PORT/DB``, never with
its password, and every error text from libpq is scrubbed of the password
(however the URL spelled it) before it is shown, on one line.

Connections are psycopg2's (the one driver: :mod:`._pg_pool`), lent by a pool
in autocommit mode: the store's statements are single statements or explicit
short transactions, and no session state (no advisory lock, no ``SET``)
outlives one, so the store works behind a transaction pooler (PgBouncer) too —
the append's prepared statement (:mod:`._pg_append`) is an optimisation a
connection drops once it finds it not kept.
The client encoding is always UTF8 (``PGCLIENTENCODING`` or a URL's
``client_encoding`` would make psycopg2 decode the store's text with another
codec); the server converts to the database's own encoding. The first
connection migrates the schema.

**A connection that breaks** (a server restart or failover, a dropped link) is
not a failed call: :meth:`PgDatabase.call` drops the pool's idle connections
that broke with it (:meth:`~._pg_pool.Pool.drop_idle`) and runs the call again
on a fresh one, waiting while the server comes back (refused, starting up,
recovering: up to the pool's timeout). Checking every connection as it leaves
the pool would cost a round trip per statement; a broken one is found by its
first statement instead, at no cost until it happens. A *write* whose
connection broke may have been committed with only its answer lost: it is never
simply sent again. Its ``landed`` check reads, on the fresh connection, whether
it was applied — a compare-and-swap carries a version drawn beforehand from the
database's sequence (:meth:`PgDatabase.version`), which no other write can
carry, and an acquisition its own token — so a write is applied once, whatever
was lost.

When no connection comes, the message says why and what to check: the
server's own refusal (not running, a bad password, a missing database,
``max_connections`` reached), after waiting while it came up, or a pool whose
connections all stayed busy (its size: ``ZUKE_PG_POOL_SIZE``).
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from zuke._errors import StateError, StoreUnavailableError
from zuke.state._pg_pool import PgConn, Pool, PoolBusy, PoolClosed
from zuke.state._protocol import Conflict
from zuke.state._unsure import UnsureWriteError

#: a connection as the store's SQL modules use it
Conn = PgConn

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
#: what libpq says while a restart stops the server and before it listens again
_REFUSED = ("connection refused", "could not connect to server", "no such file or directory",
            "shutting down", "closed the connection unexpectedly")  # fmt: skip
#: pauses between connections to a server coming up, the last one repeated
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


def lost_connection(exc: BaseException, conn: PgConn | None) -> bool:
    """Whether ``exc`` ended the connection (a restart, a dropped link), not the statement."""
    if conn is not None and conn.broken:
        return True
    state = getattr(exc, "pgcode", None) or ""
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


def connect(dsn: str, deadline: float, *, waiting: bool) -> PgConn:
    """A new autocommit connection; a server that is starting, recovering — or, once
    ``waiting`` (a connection broke: a restart), not listening yet — is asked again
    until ``deadline``. Raises psycopg2's last error."""
    import psycopg2

    for attempt in itertools.count():
        try:
            raw = psycopg2.connect(dsn)
        except psycopg2.OperationalError as exc:
            said = str(exc).lower()
            transient = any(c in said for c in _COMING_UP) or (
                waiting and any(c in said for c in _REFUSED)
            )
            pause = _COMING_UP_BACKOFF_S[min(attempt, len(_COMING_UP_BACKOFF_S) - 1)]
            if not transient or time.monotonic() + pause >= deadline:
                raise
            time.sleep(pause)
            continue
        raw.autocommit = True
        return PgConn(raw)
    raise AssertionError("unreachable")


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
        self._pool: Pool | None = None
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

    def conninfo(self, defaults: Mapping[str, str | int] | None = None, **extra: str | int) -> str:
        """The URL as libpq takes it: zuke's defaults (and ``defaults``) where the URL sets
        none, the client encoding UTF8 whatever it or ``PGCLIENTENCODING`` says, and ``extra``
        over all."""
        from psycopg2.extensions import make_dsn, parse_dsn

        try:
            given = parse_dsn(self._url)
        except Exception as exc:  # psycopg2.ProgrammingError: libpq could not parse it
            raise StateError(
                f"state: {self.setting} is not a Postgres URL libpq accepts "
                f"({self.scrub(str(exc))})"
            ) from None
        wanted: dict[str, str | int] = {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": "zuke",
            **(defaults or {}),
        }
        chosen = {k: v for k, v in wanted.items() if k not in given}
        return make_dsn(self._url, **{**chosen, "client_encoding": "UTF8", **extra})

    def _open(self) -> Pool:
        with self._lock:
            if self._closed:
                raise StoreUnavailableError(f"state: the Postgres store {self.shown} is closed")
            if self._pool is not None:
                return self._pool
            from zuke.state._pg_schema import prepare

            deadline = time.monotonic() + self._pool_timeout_s
            first = self._first(deadline, prepare)
            pool = Pool(  # no reference to self: the finalizer below holds the pool
                functools.partial(connect, self.conninfo(), waiting=True),
                size=self._max,
                timeout_s=self._pool_timeout_s,
            )
            pool.give_first(first)
            self._pool = pool
            # Closed when this object goes (a command that never calls close()) or at exit.
            self._finalizer = weakref.finalize(self, pool.close)
            return pool

    def _first(self, deadline: float, prepare: Callable[[PgConn, str], None]) -> PgConn:
        """The first connection, the schema brought to this zuke's version on it. A
        connection the server ends before the schema is checked (a restart between the two)
        is made again, waiting for the server as the pool does, until ``deadline``."""
        import psycopg2

        waiting = False
        while True:
            try:
                first = connect(self.conninfo(), deadline, waiting=waiting)
            except psycopg2.Error as exc:
                said = self.scrub(str(exc))
                raise StoreUnavailableError(
                    f"state: cannot use Postgres at {self.shown}: {said}; {self.advice(said)}"
                ) from None
            try:
                prepare(first, self.shown)
                return first
            except psycopg2.Error as exc:
                lost = lost_connection(exc, first)
                first.close()
                if not lost or time.monotonic() >= deadline:
                    raise self._failed(exc) from None
                waiting = True  # it is restarting: connect again once it listens
            except BaseException:
                first.close()
                raise

    @contextmanager
    def connection(self) -> Iterator[PgConn]:
        """A pooled autocommit connection; psycopg2's errors become one redacted ``zuke:`` line.

        Used as it is, nothing is retried: the store's calls go through :meth:`call`.
        """
        import psycopg2

        pool = self._open()
        conn = self._take(pool)
        try:
            yield conn
        except psycopg2.Error as exc:
            raise self._failed(exc) from None
        finally:
            pool.give(conn)

    def _take(self, pool: Pool) -> PgConn:
        import psycopg2

        try:
            return pool.take()
        except PoolBusy:
            raise self._busy() from None
        except PoolClosed:
            raise StoreUnavailableError(
                f"state: the Postgres store {self.shown} is closed"
            ) from None
        except psycopg2.Error as exc:
            raise self._no_connection(exc) from None

    def call(
        self,
        work: Callable[[PgConn], T],
        *,
        landed: Callable[[PgConn], T | None] | None = None,
        resend: bool = True,
        unsure: bool = False,
    ) -> T:
        """``work(conn)`` on a pooled connection, again on a fresh one if the connection broke.

        ``landed(conn)``, for a write: after a broken connection, whether the
        write was applied (its outcome) or not (``None``: ``work`` runs again).
        ``resend=False``: a write that cannot tell is not sent again; the
        error says it may have landed. ``unsure``: the write went out already, on
        a connection that broke (an earlier call's): ``landed`` is asked first.

        A write sent again is followed by ``landed`` once more: the first sending
        may still be running on the server when it is asked (its backend has not
        yet seen its client go), and commit after it, before the second one; the
        second then meets a row that moved and answers a conflict that was its own.
        Only a "landed" is taken from that look (a conflict seen then may be a third
        writer's, after the second sending's own write).
        """
        import psycopg2

        pool = self._open()
        try:
            for attempt in range(RECONNECTS + 1):
                conn = self._take(pool)
                try:
                    if not (unsure and landed is not None):
                        return work(conn)
                    outcome = landed(conn)
                    if outcome is not None:
                        return outcome
                    unsure = False
                    outcome = work(conn)  # sent again: whichever sending landed, it is ours
                    after = landed(conn)
                    return outcome if after is None or isinstance(after, Conflict) else after
                except psycopg2.Error as exc:
                    if not lost_connection(exc, conn):
                        raise self._failed(exc) from None
                    unsure = True
                    if not resend or attempt == RECONNECTS:
                        raise self._failed(exc, lost=attempt + 1, unsure=not resend) from None
                    pool.drop_idle()  # its other idle connections broke too (a restart)
                finally:
                    pool.give(conn)
        except StoreUnavailableError as exc:
            if landed is not None and unsure:  # it went out, and nobody looked whether it landed
                raise UnsureWriteError(str(exc)) from None
            raise
        raise AssertionError("unreachable")

    def version(self, call: Callable[[Callable[[PgConn], Any]], Any] | None = None) -> int:
        """A version no other write carries: drawn from the database's sequence, in blocks
        (through ``call``, :meth:`call` unless given)."""
        with self._versions_lock:
            if not self._versions:
                rows = (call or self.call)(lambda conn: conn.execute(
                    "SELECT nextval('zuke_run_versions') FROM generate_series(1, %s)",
                    (VERSION_BLOCK,),
                ).fetchall())  # fmt: skip
                self._versions = sorted((int(v) for (v,) in rows), reverse=True)
            return self._versions.pop()

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

    def _busy(self) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"state: all {self._max} connections of this process's pool to Postgres at "
            f"{self.shown} stayed in use for {self._pool_timeout_s:g}s; raise "
            f"{self.pool_setting} (now {self._max}), keeping every process's together under "
            "the server's max_connections"
        )

    def _no_connection(self, exc: BaseException) -> StoreUnavailableError:
        """No new connection: the server's refusal, after waiting while it came up."""
        said = self.scrub(str(exc))
        return StoreUnavailableError(
            f"state: no connection to Postgres at {self.shown} within "
            f"{self._pool_timeout_s:g}s: {said}; {self.advice(said)}"
        )

    def close(self) -> None:
        """Close the pool: idle connections now, each lent one once its call returns."""
        with self._lock:
            self._closed = True
            self._pool, finalizer = None, self._finalizer
        if finalizer is not None:
            finalizer()


__all__ = [
    "POOL_SIZE_ENV", "Conn", "PgDatabase", "lost_connection", "shown_url",
]  # fmt: skip
