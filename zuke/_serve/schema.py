"""The service database's schema, and the upgrade of a file written by an older zuke.

Version 3 (this one) adds the witnesses of writes sent with an idempotency key
(``x-zuke-write-id``): ``run_writes`` (the key and the version the write made)
and ``lock_grants`` (an acquisition's token and fence), which no later write
erases, so a request sent again after its answer was lost is answered as it
landed. Version 2 added, over version 1:

* ``runs.created_ms`` — ``createdAt`` as epoch milliseconds (``NULL`` when it
  is not an ISO-8601 instant), so ``since`` is a time comparison and the
  listing is ordered by time, both from an index;
* indexes for the ``status`` and ``build`` filters;
* ``locks.run_id`` — the holder's run, for ``GET /locks?runId=``;
* the ``builds`` table (the build catalog, ``/builds``).

A version-1 or -2 file is upgraded in place, in one transaction, when the service
opens it; a file from a newer zuke is refused.
"""

from __future__ import annotations

import json
import sqlite3

from zuke._clock import parse_iso
from zuke._errors import StateError

SCHEMA_VERSION = 3

_TABLES = """
CREATE TABLE IF NOT EXISTS runs (
    ns TEXT NOT NULL,
    id TEXT NOT NULL,
    etag TEXT NOT NULL,
    record TEXT NOT NULL,
    build TEXT NOT NULL,
    root_target TEXT NOT NULL,
    status TEXT NOT NULL,
    actor TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    created_ms INTEGER,
    PRIMARY KEY (ns, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_targets (
    ns TEXT NOT NULL,
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (ns, run_id, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_targets_by_name ON run_targets (ns, name);
CREATE TABLE IF NOT EXISTS run_deltas (
    ns TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    delta TEXT NOT NULL,
    PRIMARY KEY (ns, run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_journal (
    ns TEXT NOT NULL,
    run_id TEXT NOT NULL,
    base_bytes INTEGER NOT NULL,
    journal_bytes INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    PRIMARY KEY (ns, run_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS locks (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    token TEXT,
    holder TEXT,
    expires_at INTEGER,
    fence INTEGER NOT NULL,
    run_id TEXT,
    PRIMARY KEY (ns, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_writes (
    ns TEXT NOT NULL,
    run_id TEXT NOT NULL,
    write_key TEXT NOT NULL,
    etag TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (ns, run_id, write_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lock_grants (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    token TEXT NOT NULL,
    fence INTEGER NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (ns, key, token)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS builds (
    ns TEXT NOT NULL,
    id TEXT NOT NULL,
    etag TEXT NOT NULL,
    descriptor TEXT NOT NULL,
    name TEXT NOT NULL,
    actor TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (ns, id)
) WITHOUT ROWID;
"""

_INDEXES = """
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (ns, created_ms DESC, id DESC);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (ns, status, created_ms DESC, id DESC);
CREATE INDEX IF NOT EXISTS runs_by_build ON runs (ns, build, created_ms DESC, id DESC);
CREATE INDEX IF NOT EXISTS locks_by_run ON locks (ns, run_id) WHERE token IS NOT NULL;
CREATE INDEX IF NOT EXISTS builds_by_time ON builds (ns, created_ms DESC, id DESC);
CREATE INDEX IF NOT EXISTS builds_by_name ON builds (ns, name, created_ms DESC, id DESC);
"""


def created_ms(created_at: str) -> int | None:
    """``createdAt`` as epoch ms, or ``None`` when it is not an ISO-8601 instant."""
    try:
        return parse_iso(created_at)
    except (OverflowError, ValueError):
        return None


def prepare(conn: sqlite3.Connection, where: str) -> None:
    """Create the schema in a new file, upgrade a version-1 file, refuse a newer one."""
    _refuse_newer(conn, where)
    conn.execute("PRAGMA journal_mode=WAL")  # not allowed inside a transaction
    conn.execute("BEGIN IMMEDIATE")  # two servers opening one file upgrade it once
    try:
        version = _refuse_newer(conn, where)
        if version < SCHEMA_VERSION:
            if version == 1:
                _upgrade_from_1(conn)
            for statement in filter(str.strip, (_TABLES + _INDEXES).split(";")):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _refuse_newer(conn: sqlite3.Connection, where: str) -> int:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StateError(
            f"serve: {where} was written by a newer zuke (schema {version}); "
            "upgrade zuke or point --db at another file"
        )
    return version


def _upgrade_from_1(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE runs ADD COLUMN created_ms INTEGER")
    conn.execute("DROP INDEX IF EXISTS runs_newest")
    rows = conn.execute("SELECT ns, id, created_at FROM runs").fetchall()
    conn.executemany(
        "UPDATE runs SET created_ms = ? WHERE ns = ? AND id = ?",
        [(created_ms(at), ns, run_id) for ns, run_id, at in rows],
    )
    conn.execute("ALTER TABLE locks ADD COLUMN run_id TEXT")
    rows = conn.execute("SELECT ns, key, holder FROM locks WHERE holder IS NOT NULL").fetchall()
    conn.executemany(
        "UPDATE locks SET run_id = ? WHERE ns = ? AND key = ?",
        [(_holder_run(holder), ns, key) for ns, key, holder in rows],
    )


def _holder_run(holder_json: str) -> str | None:
    try:
        run_id = json.loads(holder_json).get("runId")
    except (ValueError, AttributeError):
        return None
    return run_id if isinstance(run_id, str) else None


__all__ = ["SCHEMA_VERSION", "created_ms", "prepare"]
