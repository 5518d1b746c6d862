"""Making one Postgres connection: each attempt bounded, a server coming up asked again.

The store's connections are psycopg2's asynchronous kind (``async_=1``: libpq's
``PQconnectStart`` and a ``PQconnectPoll`` loop, :mod:`._pg_pool`), and libpq does not
enforce ``connect_timeout`` there: "The connect_timeout connection parameter is ignored
when using PQconnectPoll; it is the application's responsibility to decide whether an
excessive amount of time has elapsed"
(https://www.postgresql.org/docs/current/libpq-connect.html, ``PQconnectStartParams``).
So this module does: a server that takes the TCP connection and never answers (a
stalled server, a half-open path, a proxy that holds it) would otherwise hang the
connect for ever, past every deadline of the store's.

**The bound.** Each attempt lasts at most ``connect_timeout`` as libpq resolves it (the
URL's, else ``PGCONNECT_TIMEOUT``, else zuke's 10 s, :mod:`._pg_url`), read the way libpq
reads it for its blocking connect — whole seconds, 1 taken as 2 (libpq's minimum) — and
never past the caller's ``deadline``. ``0`` (or a negative value) is libpq's "wait
indefinitely": here it lifts the per-attempt bound only; the caller's deadline (the
pool's timeout, 30 s) still ends the wait. On expiry the half-made connection is closed
(its socket with it) and psycopg2's ``OperationalError`` is raised saying ``timeout
expired`` — libpq's own words for its blocking connect, which the store's message
advice already answers — so the caller handles it as any refusal.

A server that is stopping, starting or recovering — or, once ``waiting`` (a connection
broke: a restart), not listening yet or not answering within ``connect_timeout`` — is
asked again until the deadline. Not answering is one of a restart's states: a
Postgres 15 postmaster that is shutting down stops accepting while it waits for its
last children (``PM_WAIT_DEAD_END``), so a connection made then sits unanswered in its
listen queue until it exits. A first connection that times out fails at once: nothing
says the server is on its way.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import TYPE_CHECKING

from zuke.state import _pg_driver
from zuke.state._pg_pool import PgConn, WaitExpired, wait

if TYPE_CHECKING:
    from psycopg2.extensions import connection

#: what a server says while it stops, starts or recovers (a restart, a crash): it answers
#: soon — and one that was only stopped is said as such once the pool's timeout is out
_COMING_UP = ("starting up", "not yet accepting connections", "in recovery", "shutting down")
#: what libpq says of a server that took the connection, then dropped it before it was
#: ready (a restart, or a backend terminated mid-start): it was there, and answers again.
#: "reset by peer": the TCP connect itself reset — the kernel had taken it for a
#: postmaster whose listening socket then closed (``pg_ctl restart -m immediate``): libpq
#: words it as a failed connect, "Connection reset by peer / Is the server running on that
#: host and accepting TCP/IP connections?" (the restart test's flake: not asked again, a
#: writer failed at once with "no connection … within 30s", which pytest cut to "Co…")
_CUT = ("closed the connection unexpectedly", "terminating connection", "connection reset by peer")
#: what libpq says while a restart stops the server and before it listens again
_REFUSED = ("connection refused", "could not connect to server", "no such file or directory",
            "shutting down", "closed the connection unexpectedly")  # fmt: skip
#: pauses between connections to a server coming up, the last one repeated
_COMING_UP_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
#: the longest pause before asking again: a connect that gave up at its deadline did so
#: within this of it (what "no connection within 30s" may claim, :mod:`._pg_conn`)
LONGEST_PAUSE_S = max(_COMING_UP_BACKOFF_S)
#: libpq's words for a connect that timed out (its blocking connect's), kept so the
#: store's advice (:mod:`._pg_url`) and callers know the case
TIMED_OUT = "timeout expired"
#: libpq's smallest ``connect_timeout``: "a value of 1 is interpreted as 2" (libpq-connect)
_MIN_TIMEOUT_S = 2


def attempt_timeout(raw: connection) -> float | None:
    """The ``connect_timeout`` libpq resolved for ``raw`` (URL, ``PGCONNECT_TIMEOUT``, the
    default zuke put in the URL), in seconds as libpq's blocking connect reads it; ``None``:
    none (0, negative, unset or unreadable)."""
    try:
        given = raw.get_dsn_parameters().get("connect_timeout", "")
        seconds = int(str(given).strip())
    except Exception:  # libpq parsed it already (a bad value failed the connect); unreadable
        return None
    return float(max(seconds, _MIN_TIMEOUT_S)) if seconds > 0 else None


def connect_once(dsn: str, deadline: float) -> PgConn:
    """One attempt, bounded by ``connect_timeout`` and ``deadline``; closed on any failure."""
    import psycopg2

    raw = psycopg2.connect(dsn, async_=1)
    try:
        bound = attempt_timeout(raw)
        ends = math.inf if bound is None else time.monotonic() + bound
        wait(raw, min(ends, deadline))
    except WaitExpired:
        host, port = raw.info.host, raw.info.port
        raw.close()
        waited = f"{bound:g}s (connect_timeout)" if ends <= deadline else "the call's time left"
        raise psycopg2.OperationalError(
            f'connection to server at "{host}", port {port} failed: {TIMED_OUT}: the server '
            f"did not finish the connection within {waited}"
        ) from None
    except BaseException:  # its error, or Ctrl-C: no socket left open
        raw.close()
        raise
    return PgConn(raw)


def connect(dsn: str, deadline: float, *, waiting: bool) -> PgConn:
    """A new autocommit connection; a server that is stopping, starting, recovering — or, once
    ``waiting`` (a connection broke: a restart), not listening yet — is asked again
    until ``deadline``. Raises psycopg2's last error (``timeout expired``: an attempt's
    time was out)."""
    _pg_driver.load()  # without Python's ssl (libpq has its own TLS), if it is the first
    import psycopg2

    for attempt in itertools.count():
        try:
            return connect_once(dsn, deadline)
        except psycopg2.OperationalError as exc:
            said = str(exc).lower()
            transient = any(c in said for c in (*_COMING_UP, *_CUT)) or (
                waiting and any(c in said for c in (*_REFUSED, TIMED_OUT))
            )
            pause = _COMING_UP_BACKOFF_S[min(attempt, len(_COMING_UP_BACKOFF_S) - 1)]
            if not transient or time.monotonic() + pause >= deadline:
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")


__all__ = [
    "LONGEST_PAUSE_S",
    "TIMED_OUT",
    "attempt_timeout",
    "connect",
    "connect_once",
]
