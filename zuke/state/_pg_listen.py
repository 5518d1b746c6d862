"""Waking a sweeper: ``LISTEN zuke_runs`` on a connection of its own (the store's ``listen``).

Schema 2's triggers ``NOTIFY zuke_runs`` when a run parks or a signal is
appended (:mod:`._pg_schema`); :class:`Listener` holds one connection of its
own — not from the pool: a ``LISTEN`` is session state, which a pooled or
transaction-pooled connection would lose or leak — and calls ``wake`` from its
thread:

* ``wake("listening", None)`` once the first ``LISTEN`` is in place (a write
  before it woke nobody);
* ``wake("notify", run_id)`` for a notification of the store's namespace;
* ``wake("lost", message)`` when the connection drops or cannot be made (the
  message names the database, never the password); it reconnects with a
  backoff, and
* ``wake("reconnected", message)`` once it listens again: notifications sent
  meanwhile are lost, so the caller sweeps once.

The connection is checked with a ``SELECT 1`` after every quiet
:data:`PING_S`, and TCP keepalives are on, so a silently dead peer is noticed.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zuke.state._pg_schema import WAKE_CHANNEL

if TYPE_CHECKING:
    from zuke.state._pg_conn import PgDatabase

#: how long one wait for notifications lasts before the stop flag is looked at
POLL_S = 0.25
#: a quiet connection is pinged after this long
PING_S = 30.0
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
APPLICATION_NAME = "zuke-listen"
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
               "keepalives_count": 3}  # fmt: skip

Wake = Callable[[str, "str | None"], None]


class Listener:
    """One listening thread; :meth:`close` stops it and closes its connection."""

    def __init__(self, database: PgDatabase, namespace: str, wake: Wake) -> None:
        self._database = database
        self._namespace = namespace
        self._wake = wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zuke-listen", daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=POLL_S * 8 + 5)

    def _conninfo(self) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        base = self._database._conninfo()  # the URL as the pool uses it (libpq parameters)
        given = conninfo_to_dict(base)
        extra: dict[str, Any] = {k: v for k, v in _KEEPALIVES.items() if k not in given}
        extra["application_name"] = APPLICATION_NAME
        return make_conninfo(base, **extra)

    def _run(self) -> None:
        import psycopg

        listened = failed = False
        delay = RETRY_FIRST_S
        while not self._stop.is_set():
            try:
                with self._database.connection():
                    pass  # the schema (and its triggers) is migrated before the first LISTEN
                conn = psycopg.connect(self._conninfo(), autocommit=True)
            except Exception as exc:  # psycopg.Error, StoreUnavailableError: say it, retry
                if not failed:
                    self._wake("lost", self._lost(exc))
                failed = True
                self._stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            try:
                conn.execute(f"LISTEN {WAKE_CHANNEL}")
                if listened or failed:
                    self._wake("reconnected", f"listening to {self._database.shown} again; "
                               "sweeping once for the wakes missed meanwhile")  # fmt: skip
                else:
                    self._wake("listening", None)
                listened, failed, delay = True, False, RETRY_FIRST_S
                self._listen(conn)
            except psycopg.Error as exc:
                self._wake("lost", self._lost(exc))
                failed = True
                self._stop.wait(delay)
            finally:
                with contextlib.suppress(Exception):
                    conn.close()

    def _listen(self, conn: Any) -> None:
        quiet = 0.0
        while not self._stop.is_set():
            heard = False
            for note in conn.notifies(timeout=POLL_S):
                heard = True
                ours, run_id = self._read(note.payload)
                if ours:
                    self._wake("notify", run_id)
            quiet = 0.0 if heard else quiet + POLL_S
            if quiet >= PING_S:
                conn.execute("SELECT 1")
                quiet = 0.0

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


__all__ = ["APPLICATION_NAME", "Listener", "listen"]
