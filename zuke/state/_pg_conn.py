"""The Postgres store's connections: the pool, calls that survive a broken connection.

The URL, how messages show it and the advice a refusal gets are :mod:`._pg_url`'s
(:class:`PgDatabase` is a :class:`~._pg_url.PgAddress`).

Connections are psycopg2's (the one driver: :mod:`._pg_pool`), lent by a pool
in autocommit mode: the store's statements are single statements or explicit
short transactions, and no session state (no advisory lock, no ``SET``)
outlives one, so the store works behind a transaction pooler (PgBouncer) too —
the append's prepared statement (:mod:`._pg_append`) is an optimisation a
connection drops once it finds it not kept.
The first connection migrates the schema.

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
``max_connections`` reached), after waiting while it came up; a server that took
the connection and did not answer within ``connect_timeout`` (:mod:`._pg_connect`
bounds every attempt: libpq does not, for these asynchronous connections); or a pool
whose connections all stayed busy (its size: ``ZUKE_PG_POOL_SIZE``).
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from zuke._errors import StoreUnavailableError
from zuke.state import _pg_driver
from zuke.state._pg_connect import LONGEST_PAUSE_S, connect
from zuke.state._pg_pool import PgConn, Pool, PoolBusy, PoolClosed
from zuke.state._pg_url import CONNECT_TIMEOUT_S, PgAddress
from zuke.state._protocol import Conflict
from zuke.state._unsure import UnsureWriteError

#: a connection as the store's SQL modules use it
Conn = PgConn

T = TypeVar("T")

POOL_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 10
#: the environment variable that sizes a zuke process's pool (``ZUKE_STATE=postgresql://``)
POOL_SIZE_ENV = "ZUKE_PG_POOL_SIZE"
#: fresh connections one call tries after its connection broke (a restart breaks them all)
RECONNECTS = 3
#: versions drawn from the sequence in one round trip, for the writes that follow
VERSION_BLOCK = 128
#: SQLSTATEs that end a connection the server will take again: admin/crash shutdown, starting up
_GONE_STATES = frozenset({"57P01", "57P02", "57P03"})


def lost_connection(exc: BaseException, conn: PgConn | None) -> bool:
    """Whether ``exc`` ended the connection (a restart, a dropped link), not the statement."""
    if conn is not None and conn.broken:
        return True
    state = getattr(exc, "pgcode", None) or ""
    return state in _GONE_STATES or state.startswith("08")


class PgDatabase(PgAddress):
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
        super().__init__(url, setting=setting, pool_setting=pool_setting, size=max_connections)
        self._pool_timeout_s = pool_timeout_s
        self._pool: Pool | None = None
        self._finalizer: weakref.finalize[[], PgDatabase] | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._versions: list[int] = []
        self._versions_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PgDatabase({self.shown})"

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
        _pg_driver.load()  # the first call's: without Python's ssl
        import psycopg2

        pool = self._open()
        conn = self._take(pool)
        try:
            yield conn
        except psycopg2.Error as exc:
            raise self._failed(exc) from None
        finally:
            pool.give(conn)

    def lend_idle(self) -> tuple[Pool, PgConn] | None:
        """An idle pooled connection and its pool, to give back to it once done with it; or
        ``None``: none is idle now (none is made) or the pool is not open yet or closed."""
        pool = self._pool
        conn = None if pool is None else pool.take_idle()
        return None if pool is None or conn is None else (pool, conn)

    def _take(self, pool: Pool) -> PgConn:
        import psycopg2

        began = time.monotonic()
        try:
            return pool.take()
        except PoolBusy:
            raise self._busy() from None
        except PoolClosed:
            raise StoreUnavailableError(
                f"state: the Postgres store {self.shown} is closed"
            ) from None
        except psycopg2.Error as exc:
            raise self._no_connection(exc, time.monotonic() - began) from None

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
        _pg_driver.load()  # the first call's: without Python's ssl
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

    def _no_connection(self, exc: BaseException, waited: float) -> StoreUnavailableError:
        """No new connection: the server's refusal, after waiting while it came up. "Within
        30s" only when the pool's time ran out: a refusal not waited for (the restart flake's
        "Connection reset by peer") said so too, and was taken for a 30 s wait."""
        said = self.scrub(str(exc))
        ran_out = waited >= self._pool_timeout_s - LONGEST_PAUSE_S
        within = f" within {self._pool_timeout_s:g}s" if ran_out else ""
        return StoreUnavailableError(
            f"state: no connection to Postgres at {self.shown}{within}: {said}; {self.advice(said)}"
        )

    def close(self) -> None:
        """Close the pool: idle connections now, each lent one once its call returns."""
        with self._lock:
            self._closed = True
            self._pool, finalizer = None, self._finalizer
        if finalizer is not None:
            finalizer()


# CONNECT_TIMEOUT_S stays importable here: the listener (:mod:`._pg_listen`) takes it from here
__all__ = ["CONNECT_TIMEOUT_S", "POOL_SIZE_ENV", "Conn", "PgDatabase", "lost_connection"]
