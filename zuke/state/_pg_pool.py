"""psycopg2 connections as the Postgres store uses them, and the pool that lends them.

The store talks to Postgres through one driver, psycopg2 (a C extension over
libpq: ~25 ms to import, where psycopg 3 takes ~120 ms, most of a
``zuke runs list`` budget of 120 ms; see ``docs/benchmarks.md``).

:class:`PgConn` is a psycopg2 connection in asynchronous mode (autocommit, always)
with the two calls the store's SQL modules make of it: ``execute`` (the cursor, to fetch from)
and ``transaction`` (an explicit ``BEGIN`` … ``COMMIT``, rolled back on any
exception).

:class:`Pool` lends them to threads. psycopg2's own pools never wait (an
exhausted one raises at once) and cannot drop the idle connections a restart
broke, so this one is written here, small: at most ``size`` connections, a
borrower waits up to ``timeout_s`` for one, the most recently returned is
lent first (it is the warmest), and :meth:`Pool.drop_idle` closes every idle
connection once one of them is found broken (a restart breaks them all; one
more connect each is cheaper than meeting them one by one). A connection
returned in the middle of a transaction or of a statement (a wait cut by
Ctrl-C), or broken, is closed, never lent again; :meth:`Pool.close` closes the
idle ones at once and each lent one as it comes back — never under a statement
that runs.
"""

from __future__ import annotations

import math
import select
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg2.extensions import connection, cursor

#: statement parameters: positional (``%s``) or named (``%(name)s``)
Params = Sequence[Any] | Mapping[str, Any] | None


class PgConn:
    """One psycopg2 connection (asynchronous mode: autocommit) with ``execute``, which waits
    for the answer (:func:`wait`), and ``transaction``. Asynchronous, so that the run's
    writer can send an append on it and read the answer later (:mod:`._pg_send`)."""

    __slots__ = ("prepared", "raw")

    def __init__(self, raw: connection) -> None:
        self.raw = raw
        #: the statements ``PREPARE``d on this connection; ``None``: it keeps none (a
        #: transaction pooler lent another server connection to the next statement)
        self.prepared: set[str] | None = set()

    def execute(self, sql: str | bytes, params: Params = None) -> cursor:
        """Run one statement; its cursor (``fetchone``, ``fetchall``, ``rowcount``, iterable)."""
        cur = self.raw.cursor()
        cur.execute(sql, params)
        wait(self.raw)
        return cur

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """An explicit transaction: committed at the end, rolled back on any exception."""
        self.execute("BEGIN")
        try:
            yield
        except BaseException:
            if not self.raw.closed:
                import psycopg2

                with suppress(psycopg2.Error):
                    self.execute("ROLLBACK")
            raise
        self.execute("COMMIT")

    @property
    def broken(self) -> bool:
        """Closed, or ended by the server or the network (psycopg2 knows without a round trip)."""
        return bool(self.raw.closed)

    @property
    def idle(self) -> bool:
        """Open, no statement under way and outside any transaction: fit to lend again.

        A statement is under way when its wait was cut (Ctrl-C in :func:`wait`): its answer
        would be the next borrower's first, so the connection is closed instead."""
        import psycopg2.extensions as ext

        raw = self.raw
        return (
            not raw.closed
            and not raw.isexecuting()
            and raw.get_transaction_status() == ext.TRANSACTION_STATUS_IDLE
        )

    def backend_pid(self) -> int:
        return int(self.raw.get_backend_pid())

    def close(self) -> None:
        with suppress(Exception):
            self.raw.close()


#: psycopg2's ``POLL_OK`` and ``POLL_READ`` (``psycopg2.extensions``; fixed by its API),
#: here so that a statement's wait imports nothing
POLL_OK, POLL_READ = 0, 1


class WaitExpired(Exception):
    """:func:`wait`'s deadline came before what was under way on the connection was done."""


def wait(raw: connection, deadline: float | None = None) -> None:
    """Until what is under way on ``raw`` (asynchronous mode) is done: ``poll``, sleeping on
    its socket; psycopg2 raises what the server or the connection said. ``deadline`` (a
    ``time.monotonic()`` instant; ``None`` for a statement, as libpq's own blocking calls
    have none): :class:`WaitExpired` when it comes first — a connect's bound, which libpq
    does not enforce in this mode (:mod:`._pg_connect`).

    The socket is asked for on every turn: during a connect libpq may close one and open
    another (the next address of a host), "do not assume that the socket remains the same
    across PQconnectPoll calls" (libpq-connect).
    """
    while True:
        state = raw.poll()
        if state == POLL_OK:
            return
        timeout_ms = None
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitExpired
            timeout_ms = math.ceil(remaining * 1000)
        # poll(2), not select(2): a process with many files open has descriptors past 1024
        poller = select.poll()
        poller.register(raw.fileno(), select.POLLIN if state == POLL_READ else select.POLLOUT)
        poller.poll(timeout_ms)


class PoolBusy(Exception):
    """Every connection stayed lent for the pool's whole timeout."""


class PoolClosed(Exception):
    """The pool was closed."""


class Pool:
    """At most ``size`` connections made by ``connect(deadline)``, lent one per borrower."""

    def __init__(self, connect: Callable[[float], PgConn], *, size: int, timeout_s: float) -> None:
        self._connect = connect
        self.size = max(1, size)
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._idle: list[PgConn] = []
        self._count = 0  # idle + lent + being connected
        self._closed = False

    def give_first(self, conn: PgConn) -> None:
        """Keep a connection made outside (the first one, which migrated the schema)."""
        with self._cond:
            self._count += 1
        self.give(conn)

    def take(self) -> PgConn:
        """A connection: an idle one, a new one while under ``size``, else the first returned
        within the timeout (:class:`PoolBusy` after it). A failed connect raises psycopg2's
        error, after waiting for a server that is coming up (``connect``'s to judge)."""
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            while True:
                if self._closed:
                    raise PoolClosed
                if self._idle:
                    return self._idle.pop()
                if self._count < self.size:
                    self._count += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PoolBusy
                self._cond.wait(remaining)
        try:
            return self._connect(deadline)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def take_idle(self) -> PgConn | None:
        """An idle connection if there is one now (``None``: none, and none is made)."""
        with self._cond:
            return self._idle.pop() if self._idle and not self._closed else None

    def give(self, conn: PgConn) -> None:
        """Return a lent connection: kept if it is fit to lend again, else closed."""
        with self._cond:
            keep = not self._closed and conn.idle
            if keep:
                self._idle.append(conn)
            else:
                self._count -= 1
            self._cond.notify()
        if not keep:
            conn.close()

    def drop_idle(self) -> None:
        """Close every idle connection (one was found broken: a restart broke them all)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            conn.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> tuple[int, int]:
        """``(connections open or opening, idle)``."""
        with self._cond:
            return self._count, len(self._idle)

    def close(self) -> None:
        """Close the idle connections now and each lent one as it is returned."""
        with self._cond:
            self._closed = True
        self.drop_idle()


__all__ = ["Params", "PgConn", "Pool", "PoolBusy", "PoolClosed"]
