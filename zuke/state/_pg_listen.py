"""Waking a sweeper: ``LISTEN zuke_runs`` on a connection of its own (the store's ``listen``).

Schema 2's triggers ``NOTIFY zuke_runs`` when a run parks or a signal is
appended (:mod:`._pg_schema`); :class:`Listener` holds one connection of its
own — not from the pool: a ``LISTEN`` is session state, which a pooled or
transaction-pooled connection would lose or leak — and calls ``wake`` from its
thread:

* ``wake("listening", None)`` once the first ``LISTEN`` is in place (a write
  before it woke nobody);
* ``wake("notify", run_id)`` for a notification of the store's namespace;
* ``wake("lost", message)`` when the connection drops, hangs or cannot be made
  (the message names the database, never the password) — once per outage; it
  reconnects with a backoff, and
* ``wake("reconnected", message)`` once it listens again: notifications sent
  meanwhile are lost, so the caller sweeps once.

**Every wait has a deadline.** The connection is psycopg2's asynchronous kind
(nothing blocks: each step is polled with ``select`` up to its deadline), so
a peer that stops answering — a frozen backend, a link that drops packets
without a reset — cannot hold the thread: after ``ping_s`` (:data:`PING_S`)
without a word from the server a ``SELECT 1`` is sent, and it must be
answered within ``ping_s`` more. A hung peer is thus noticed within two ping
intervals of its last word, said once, and the listener reconnects. Connecting
has the store's bound (the URL's ``connect_timeout``, :mod:`._pg_connect`; zuke's
10 s where it is 0) and the ``LISTEN`` zuke's 10 s; TCP keepalives are on as well.
"""

from __future__ import annotations

import contextlib
import json
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from zuke.state._pg_conn import CONNECT_TIMEOUT_S
from zuke.state._pg_connect import attempt_timeout
from zuke.state._pg_schema import WAKE_CHANNEL

if TYPE_CHECKING:
    from psycopg2.extensions import connection

    from zuke.state._pg_conn import PgDatabase

#: how long one wait for notifications lasts before the stop flag is looked at
POLL_S = 0.25
#: a quiet connection is pinged after this long, and the ping must be answered within it
PING_S = 30.0
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
APPLICATION_NAME = "zuke-listen"
_KEEPALIVES: dict[str, str | int] = {
    "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
}  # fmt: skip

Wake = Callable[[str, "str | None"], None]


class _Hung(Exception):
    """The server did not answer within the deadline."""


class _Stopped(Exception):
    """The listener was closed while it waited."""


class Listener:
    """One listening thread; :meth:`close` stops it and closes its connection."""

    def __init__(
        self, database: PgDatabase, namespace: str, wake: Wake, *, ping_s: float = PING_S
    ) -> None:
        self._database = database
        self._namespace = namespace
        self._wake = wake
        self._ping_s = ping_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zuke-listen", daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=POLL_S * 8 + 5)

    def _run(self) -> None:
        listened = failed = False
        delay = RETRY_FIRST_S
        while not self._stop.is_set():
            conn: connection | None = None
            try:
                with self._database.connection():
                    pass  # the schema (and its triggers) is migrated before the first LISTEN
                conn = self._connect()
                self._answered(conn, f"LISTEN {WAKE_CHANNEL}", CONNECT_TIMEOUT_S)
                if listened or failed:
                    self._wake("reconnected", f"listening to {self._database.shown} again; "
                               "sweeping once for the wakes missed meanwhile")  # fmt: skip
                else:
                    self._wake("listening", None)
                listened, failed, delay = True, False, RETRY_FIRST_S
                self._listen(conn)
            except _Stopped:
                pass
            except Exception as exc:
                # psycopg2.Error, StoreUnavailableError, a hung peer: say it once, retry
                if not failed:
                    self._wake("lost", self._lost(exc))
                failed = True
                self._stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_S)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()

    def _connect(self) -> connection:
        import psycopg2

        dsn = self._database.conninfo(_KEEPALIVES, application_name=APPLICATION_NAME)
        conn = psycopg2.connect(dsn, async_=True)
        try:
            # the URL's connect_timeout, as the pool's connects (0: none there, zuke's here)
            self._settle(conn, attempt_timeout(conn) or CONNECT_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        return conn

    def _answered(self, conn: connection, sql: str, within_s: float) -> None:
        """Send ``sql`` and wait for its answer, at most ``within_s`` (:class:`_Hung`)."""
        cursor = conn.cursor()  # kept until answered: psycopg2 polls it by a weak reference
        cursor.execute(sql)
        self._settle(conn, within_s)
        cursor.close()

    def _settle(self, conn: connection, within_s: float) -> None:
        """Poll ``conn`` until what it is doing is done; :class:`_Hung` after ``within_s``."""
        import psycopg2.extensions as ext

        deadline = time.monotonic() + within_s
        while True:
            state = conn.poll()
            if state == ext.POLL_OK:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Hung(f"the server answered nothing within {within_s:g}s")
            if self._stop.is_set():
                raise _Stopped
            wait = min(remaining, POLL_S)
            if state == ext.POLL_WRITE:
                select.select([], [conn], [], wait)
            else:
                select.select([conn], [], [], wait)

    def _listen(self, conn: connection) -> None:
        heard_at = time.monotonic()
        while not self._stop.is_set():
            readable, _, _ = select.select([conn], [], [], POLL_S)
            if readable:
                conn.poll()
                heard_at = time.monotonic()
            self._deliver(conn)
            if time.monotonic() - heard_at >= self._ping_s:
                try:
                    self._answered(conn, "SELECT 1", self._ping_s)
                except _Hung:
                    raise _Hung(
                        f"the server answered nothing for {2 * self._ping_s:g}s, a ping "
                        f"included: a hung peer"
                    ) from None
                self._deliver(conn)
                heard_at = time.monotonic()

    def _deliver(self, conn: connection) -> None:
        while conn.notifies:
            note = conn.notifies.pop(0)
            ours, run_id = self._read(note.payload)
            if ours:
                self._wake("notify", run_id)

    def _read(self, payload: str) -> tuple[bool, str | None]:
        """Whether a notification is this namespace's, and the run id it names (``None``:
        an outsized payload, which names nothing and wakes every listener)."""
        try:
            obj = json.loads(payload)
        except ValueError:
            return True, None
        if not isinstance(obj, dict):
            return True, None
        if "ns" in obj and obj["ns"] != self._namespace:
            return False, None
        run_id = obj.get("id")
        return True, run_id if isinstance(run_id, str) else None

    def _lost(self, exc: BaseException) -> str:
        return (f"the wake connection to {self._database.shown} is down "
                f"({self._database.scrub(str(exc))}); reconnecting, sweeping on the interval "
                "meanwhile")  # fmt: skip


def listen(database: PgDatabase, namespace: str, wake: Wake) -> Listener:
    """Start listening; the caller closes the returned :class:`Listener`."""
    return Listener(database, namespace, wake).start()


__all__ = ["APPLICATION_NAME", "PING_S", "Listener", "listen"]
