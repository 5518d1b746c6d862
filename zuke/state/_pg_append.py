"""The append on Postgres — a run's transition — in one round trip, planned once per connection.

An append bumps the run's version if it is at the expected one (the
compare-and-swap), keeps the listing's columns current, stores the delta and
the write's witness, and says whether a compaction is due: one statement, one
round trip. Sent as text, such a statement is parsed and planned on every call
(psycopg2 has no protocol-level prepared statements), which was half of a
transition's time. So:

* on each connection it is ``PREPARE``d once (:data:`NAME`, named by a hash of
  its text: a connection never runs another zuke's statement under it) and
  then ``EXECUTE``d — the fastest way psycopg2 has (``docs/benchmarks.md``);
* where a connection cannot keep a prepared statement — a transaction pooler
  (PgBouncer) lends each statement any server connection, which then answers
  "prepared statement does not exist" before running anything — the
  connection stops preparing and calls the function ``zuke_append`` (schema 4,
  :mod:`._pg_schema`), whose plans PL/pgSQL keeps per server connection: the
  same statements, nothing of them session state;
* the rare append that changes the run's status or actor (a park, an end), or
  carries a signal, calls the function too: the prepared statement leaves
  ``status`` out of its ``UPDATE``, so that the parking trigger (``AFTER
  UPDATE OF status``) is not even looked at on every transition, and wakes
  nobody, where the function sends a signal's ``pg_notify`` itself.

The write's witness (its key and the version it made) rides in the delta's row
(schema 4), not in a row of its own.

Both answer the version made, negated when a compaction is due (versions are
positive), or nothing when the run is not at the expected version.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zuke.state._pg_conn import Conn

#: the statement prepared: $1 ns, $2 id, $3 expected, $4 version (NULL: drawn here), $5 the
#: witness key (NULL: none), $6 updatedAt, $7 the delta, $8 the least journal to compact
STATEMENT = (
    "WITH u AS (UPDATE zuke_runs"
    " SET version = COALESCE($4, nextval('zuke_run_versions')), updated_at = $6,"
    " journal_bytes = journal_bytes + length($7), last_seq = last_seq + 1"
    " WHERE ns = $1 AND id = $2 AND version = $3"
    " RETURNING ns, id, version, last_seq, base_bytes, journal_bytes),"
    " d AS (INSERT INTO zuke_run_deltas (ns, run_id, seq, delta, write_key, made)"
    " SELECT ns, id, last_seq, $7, $5, version FROM u)"
    " SELECT CASE WHEN journal_bytes > GREATEST(base_bytes, $8) THEN -version ELSE version END"
    " FROM u"
)
TYPES = "text, text, bigint, bigint, text, text, text, bigint"
#: named by its text (a CRC: ``hashlib`` would load OpenSSL into every read-only command)
NAME = f"zuke_append_{zlib.crc32(f'{TYPES}|{STATEMENT}'.encode()):08x}"
_EXECUTE = f"EXECUTE {NAME} (%s, %s, %s, %s, %s, %s, %s, %s)"
_CALL = "SELECT zuke_append(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


def append(
    conn: Conn,
    ns: str,
    run_id: str,
    expected: int,
    version: int | None,
    key: str | None,
    updated_at: str,
    status: str | None,
    actor: str | None,
    delta: str,
    compact: int,
    *,
    signal: bool,
) -> int | None:
    """The version the append made (negated: a compaction is due), or ``None``: the run is
    not at ``expected`` (or is gone). ``signal``: the delta stores a signal (sweepers are
    woken)."""
    if status is None and actor is None and not signal and conn.prepared is not None:
        ran, made = _prepared(conn, (ns, run_id, expected, version, key, updated_at, delta,
                                     compact))  # fmt: skip
        if ran:
            return made
    row = conn.execute(
        _CALL,
        (ns, run_id, expected, version, key, updated_at, status, actor, delta, compact, signal),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _prepared(conn: Conn, args: Sequence[Any]) -> tuple[bool, int | None]:
    """Whether the prepared statement ran, and its answer; it did not when the connection
    cannot keep it (which then never tries again)."""
    from psycopg2.errors import DuplicatePreparedStatement, InvalidSqlStatementName

    assert conn.prepared is not None
    if NAME not in conn.prepared:
        with suppress(DuplicatePreparedStatement):  # a pooler's server connection has it
            conn.execute(f"PREPARE {NAME} ({TYPES}) AS {STATEMENT}")
        conn.prepared.add(NAME)
    try:
        row = conn.execute(_EXECUTE, args).fetchone()
    except InvalidSqlStatementName:  # refused before it ran: nothing of it happened
        conn.prepared = None
        return False, None
    return True, (None if row is None else int(row[0]))


__all__ = ["NAME", "STATEMENT", "TYPES", "append"]
