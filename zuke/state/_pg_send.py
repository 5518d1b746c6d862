"""The append sent now and answered later: the run's writer overlaps its round trip (issue 28 §2).

A transition's append is one round trip, and the writer must have its answer
before the next body starts (``docs/state.md``). What the engine does between
the write and the body — the console's line, the observers — need not wait for
it: :class:`AppendSender` sends the prepared append (:mod:`._pg_append`) on a
connection of its own in psycopg2's asynchronous mode, returns at once, and
the answer is read when the writer asks for it (``answer``), just before the
body. Nothing else changes: the same statement, the same compare-and-swap and
witness, the same compaction; a lost answer is looked up by its witness like
any other write's (the store's ``_write``).

The connection is opened once a store has made :data:`SEND_AFTER` appends (a
short run never opens it), and without waiting: :meth:`AppendSender.ready`
drives its connect and its ``PREPARE`` a step at a time (``poll`` never
blocks), and says no — the append goes the ordinary way, on a pooled
connection — until they are done. It is one connection beside the pool's
(``ZUKE_PG_POOL_SIZE``), and a connection that cannot keep a prepared
statement (a transaction pooler) or breaks is dropped
for good: every later append goes the ordinary way.
"""

from __future__ import annotations

import select
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from zuke.state import _pg_append, _pg_runs
from zuke.state._pg_schema import to_db
from zuke.state.records import RunDelta
from zuke.state.wire import delta_to_json

if TYPE_CHECKING:
    from psycopg2.extensions import connection, cursor

#: the appends a store makes the ordinary way before it opens the sending connection: a
#: short run never opens it (a backend's start and its first statements cost the server a
#: few milliseconds of CPU, more than overlapping a few round trips saves)
SEND_AFTER = 8
#: the sender's states
_CONNECTING, _PREPARING, _READY, _BUSY, _GONE = range(5)
#: psycopg2's ``POLL_OK`` and ``POLL_READ`` (``psycopg2.extensions``: 0 and 1, fixed by its
#: API), here so that the wait imports nothing
_POLL_OK, _POLL_READ = 0, 1


def plain_append_args(
    ns: str, run_id: str, delta: RunDelta, expected: int, version: int
) -> tuple[Any, ...] | None:
    """The arguments of the common prepared append (:data:`._pg_append.NAME`) for ``delta``,
    as :func:`._pg_runs.append` sends them; ``None`` when ``delta`` needs another statement
    (it sets the run's status or actor, or stores a signal)."""
    if delta.status is not None or delta.actor is not None or delta.signals:
        return None
    line = _pg_runs.dumps(delta_to_json(delta))
    return (ns, run_id, expected, version, _pg_runs.write_key(version),
            to_db(delta.updated_at), line, _pg_runs.COMPACT_MIN_BYTES)  # fmt: skip


class AppendSender:
    """One asynchronous connection for a process's appends: one in flight at a time."""

    def __init__(self, conninfo: str) -> None:
        import psycopg2

        self._conn: connection | None = None
        self._cursor: cursor | None = None
        self._state = _CONNECTING
        self._poller = select.poll()
        try:
            self._conn = psycopg2.connect(conninfo, async_=1)  # returns before it is made
        except psycopg2.Error:
            self._state = _GONE

    @property
    def gone(self) -> bool:
        return self._state == _GONE

    def ready(self) -> bool:
        """Whether an append can be sent now; advances the connect and the ``PREPARE`` a step
        (never waiting) while they are under way."""
        if self._state == _READY:
            return True
        if self._state in (_BUSY, _GONE):
            return False
        if not self._step():
            return False
        if self._state == _CONNECTING:  # connected: prepare the append, answered later
            assert self._conn is not None
            self._cursor = self._conn.cursor()
            prepare, _ = _pg_append.FORMS[_pg_append.NAME]
            if not self._send(prepare, None):
                return False
            self._state = _PREPARING
            return False
        self._state = _READY  # the PREPARE was answered
        return True

    def send(self, args: Sequence[Any]) -> bool:
        """Send the prepared append with ``args`` (:data:`._pg_append.TYPES`); ``False``: not
        sent (the connection is gone — nothing of it reached the server)."""
        assert self._state == _READY, "send only when ready()"
        _, execute = _pg_append.FORMS[_pg_append.NAME]
        if not self._send(execute, args):
            return False
        self._state = _BUSY
        return True

    def answer(self) -> int | None:
        """Wait for the sent append's answer: the version it made (negated: a compaction is
        due), or ``None`` (the run is not at the expected version). Raises psycopg2's error;
        the connection is dropped then (:attr:`gone`), the append's fate for the caller to
        look up unless it is ``InvalidSqlStatementName`` (refused before it ran)."""
        assert self._state == _BUSY and self._conn is not None and self._cursor is not None
        try:
            self._wait()
            row = self._cursor.fetchone()
        except BaseException:
            self.close()
            raise
        self._state = _READY
        return None if row is None or row[0] is None else int(row[0])

    def close(self) -> None:
        self._state = _GONE
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):
                conn.close()

    # -- the asynchronous connection ------------------------------------------------

    def _send(self, statement: str, args: Sequence[Any] | None) -> bool:
        import psycopg2

        assert self._cursor is not None
        try:
            self._cursor.execute(statement, args)
        except psycopg2.Error:
            self.close()
            return False
        return True

    def _step(self) -> bool:
        """One non-blocking ``poll``: whether what is under way is done."""
        import psycopg2
        import psycopg2.extensions as ext

        assert self._conn is not None
        try:
            return bool(self._conn.poll() == ext.POLL_OK)
        except psycopg2.Error:  # a refused connect, a PREPARE the server refused
            self.close()
            return False

    def _wait(self) -> None:
        """``poll`` until the statement under way is answered, sleeping on the socket."""
        assert self._conn is not None
        conn, poller = self._conn, self._poller
        fd = conn.fileno()
        while True:
            state = conn.poll()
            if state == _POLL_OK:
                return
            poller.register(fd, select.POLLIN if state == _POLL_READ else select.POLLOUT)
            poller.poll()


__all__ = ["AppendSender", "plain_append_args"]
