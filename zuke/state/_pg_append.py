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
* the rare append that changes the run's status or actor (a park, an end) is a
  second prepared statement (:data:`STATUS_STATEMENT`), prepared when the
  first one comes: the common one leaves ``status`` out of its ``UPDATE``, so
  that the parking trigger (``AFTER UPDATE OF status``) is not even looked at
  on every transition. (It was the function: its first call on a connection
  compiles it and plans its statements, about 1.2 ms more than preparing
  this one — a run's end paid it once; ``docs/benchmarks.md``);
* an append that carries a signal calls the function, which sends the
  signal's ``pg_notify`` itself.

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
#: the same, also setting the run's status ($9, NULL: kept) and actor ($10, NULL: kept)
STATUS_STATEMENT = STATEMENT.replace(
    "updated_at = $6,",
    "updated_at = $6, status = COALESCE($9, status), actor = COALESCE($10, actor),",
)
STATUS_TYPES = f"{TYPES}, text, text"


def _name(kind: str, types: str, statement: str) -> str:
    """Named by its text (a CRC: ``hashlib`` would load OpenSSL into every read-only command)."""
    return f"zuke_{kind}_{zlib.crc32(f'{types}|{statement}'.encode()):08x}"


NAME = _name("append", TYPES, STATEMENT)
STATUS_NAME = _name("append_status", STATUS_TYPES, STATUS_STATEMENT)
#: name -> (its PREPARE, its EXECUTE)
FORMS = {
    NAME: (f"PREPARE {NAME} ({TYPES}) AS {STATEMENT}",
           f"EXECUTE {NAME} (%s, %s, %s, %s, %s, %s, %s, %s)"),
    STATUS_NAME: (f"PREPARE {STATUS_NAME} ({STATUS_TYPES}) AS {STATUS_STATEMENT}",
                  f"EXECUTE {STATUS_NAME} (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"),
}  # fmt: skip
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
    if not signal and conn.prepared is not None:
        args: tuple[Any, ...] = (ns, run_id, expected, version, key, updated_at, delta, compact)
        if status is None and actor is None:
            ran, made = _prepared(conn, NAME, args)
        else:
            ran, made = _prepared(conn, STATUS_NAME, (*args, status, actor))
        if ran:
            return made
    row = conn.execute(
        _CALL,
        (ns, run_id, expected, version, key, updated_at, status, actor, delta, compact, signal),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _prepared(conn: Conn, name: str, args: Sequence[Any]) -> tuple[bool, int | None]:
    """Whether the prepared statement ``name`` ran, and its answer; it did not when the
    connection cannot keep it (which then never tries again)."""
    from psycopg2.errors import DuplicatePreparedStatement, InvalidSqlStatementName

    assert conn.prepared is not None
    prepare, execute = FORMS[name]
    if name not in conn.prepared:
        with suppress(DuplicatePreparedStatement):  # a pooler's server connection has it
            conn.execute(prepare)
        conn.prepared.add(name)
    try:
        row = conn.execute(execute, args).fetchone()
    except InvalidSqlStatementName:  # refused before it ran: nothing of it happened
        conn.prepared = None
        return False, None
    return True, (None if row is None else int(row[0]))


__all__ = [
    "NAME",
    "STATEMENT",
    "STATUS_NAME",
    "STATUS_STATEMENT",
    "STATUS_TYPES",
    "TYPES",
    "append",
]
