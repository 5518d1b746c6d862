"""The append sent now and answered later: the run's writer overlaps its round trip (issue 28 §2).

A transition's append is one round trip, and the writer must have its answer
before the next body starts (``docs/state.md``). What the engine does between
the write and the body — the console's line — need not wait for it: the store's
connections are in psycopg2's asynchronous mode (their ``execute`` waits, see
:mod:`._pg_pool`), so :func:`send` sends the prepared append (:mod:`._pg_append`)
on an idle pooled connection, lent until the answer, and returns at once; the
answer is read when the writer asks for it (:meth:`Sent.answer`), just before
the body. Nothing else changes: the same statement on the same connection, the
same compare-and-swap and witness, the same compaction; a lost answer is looked
up by its witness like any other write's (the store's ``_write``).

Where no connection is idle, or the connection cannot keep a prepared statement
(a transaction pooler), nothing is sent: the append goes the ordinary way.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from zuke.state import _pg_append, _pg_runs
from zuke.state._pg_pool import wait
from zuke.state._pg_schema import to_db
from zuke.state.records import RunDelta
from zuke.state.wire import delta_to_json

if TYPE_CHECKING:
    from psycopg2.extensions import cursor

    from zuke.state._pg_pool import PgConn, Pool


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


class Sent:
    """An append sent on a lent connection: :meth:`answer` waits for it and gives the
    connection back (once, whatever happens)."""

    __slots__ = ("conn", "cursor", "pool")

    def __init__(self, pool: Pool, conn: PgConn, cursor: cursor) -> None:
        self.pool, self.conn, self.cursor = pool, conn, cursor

    def answer(self) -> int | None:
        """The version the append made (negated: a compaction is due), or ``None`` (the run
        is not at the expected version). Raises psycopg2's error (``self.conn.broken``: the
        connection broke under it, the append's fate unknown)."""
        try:
            wait(self.conn.raw)
            row = self.cursor.fetchone()
        finally:
            self.pool.give(self.conn)  # closed there if it broke or is mid-transaction
        return None if row is None or row[0] is None else int(row[0])


def send(lent: tuple[Pool, PgConn], args: Sequence[Any]) -> Sent | None:
    """Send the prepared append with ``args`` on the lent connection (``PREPARE``d first if it
    is not yet: that one waits); ``None``: not sent, the connection given back."""
    import psycopg2
    from psycopg2.errors import DuplicatePreparedStatement

    pool, conn = lent
    try:
        if conn.prepared is None:  # a pooler's: it keeps no prepared statement
            pool.give(conn)
            return None
        prepare, execute = _pg_append.FORMS[_pg_append.NAME]
        if _pg_append.NAME not in conn.prepared:
            with suppress(DuplicatePreparedStatement):  # a pooler's server connection has it
                conn.execute(prepare)
            conn.prepared.add(_pg_append.NAME)
        cur = conn.raw.cursor()
        cur.execute(execute, args)  # sent; answered in Sent.answer
    except psycopg2.Error:  # nothing of the append went out
        pool.give(conn)
        return None
    return Sent(pool, conn, cur)


__all__ = ["Sent", "plain_append_args", "send"]
