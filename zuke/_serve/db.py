"""The state service's SQLite database: runs with versions, and fenced locks.

This module owns the schema and every statement. Each mutation runs in one
``BEGIN IMMEDIATE`` transaction (behind an in-process lock too, so threads
queue instead of spinning on ``SQLITE_BUSY``): the read of the current
version and the write that depends on it cannot interleave with another
writer, which is what makes compare-and-swap and lock acquisition atomic —
across the server's threads and even across two servers on one file.

Runs are keyed by ``(namespace, id)``; the record JSON is stored as sent,
beside the columns a listing needs and a table of graph node names for the
``target`` filter. A version (the ETag) is a fresh random value per write,
so a stale ETag can never match a record that was deleted and re-created.
Lock rows are never deleted: a released lock keeps its ``fence`` so the next
acquisition's fence is still strictly greater.

A ``PATCH`` appends its delta to ``run_deltas`` instead of rewriting the
record, so persisting a run costs time linear in its transitions (rewriting
the record made each write of a 1000-target run cost ~10 ms). Reads fold the
deltas over the stored record; once the deltas outweigh the record (and at
least 64 KiB of them have gathered) they are folded into it, so the rewrites
stay linear too.
"""

from __future__ import annotations

import hmac
import json
import os
import queue
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from zuke._clock import Clock
from zuke._errors import StateError
from zuke.state.records import RunDelta, RunRecord, apply_deltas
from zuke.state.wire import delta_to_json, parse_delta, parse_record, record_to_json

COMPACT_MIN_BYTES = 64 * 1024

SCHEMA_VERSION = 1

_SCHEMA = """
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
    PRIMARY KEY (ns, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS runs_newest ON runs (ns, created_at DESC, id DESC);
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
    PRIMARY KEY (ns, key)
) WITHOUT ROWID;
"""


class DbClosedError(StateError):
    """The database was closed (the server is shutting down)."""


@dataclass(frozen=True)
class StoredText:
    """A run's stored JSON text and its version."""

    text: str
    etag: str


@dataclass(frozen=True)
class Granted:
    token: str
    fence: int


@dataclass(frozen=True)
class HeldBy:
    holder_json: str


WriteOutcome = Literal["written", "mismatch", "missing"]
RenewOutcome = Literal["renewed", "missing", "held"]


def _new_etag() -> str:
    # Quoted, as HTTP entity tags are; clients echo it back verbatim.
    return f'"{uuid.uuid4().hex}"'


class StateDb:
    """Thread-safe access to one SQLite state file."""

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock) -> None:
        self._path = Path(path)
        self._clock = clock
        self._write_lock = threading.Lock()
        self._pool: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._closed = False
        self._path.parent.mkdir(parents=True, exist_ok=True)
        if not self._path.exists():
            # The file holds actors, parameters and metadata: owner-only from the start.
            os.close(os.open(self._path, os.O_CREAT | os.O_WRONLY, 0o600))
        try:
            with self._conn() as conn:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise StateError(
                        f"serve: {self._path} was written by a newer zuke (schema {version}); "
                        "upgrade zuke or point --db at another file"
                    )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(_SCHEMA)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            self.close()
            raise StateError(f"serve: cannot use {self._path} as a state database: {exc}") from None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._all_lock:
            self._closed = True
            for conn in self._all:
                conn.close()
            self._all.clear()

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        """A pooled connection (connections outlive the per-request threads)."""
        if self._closed:
            raise DbClosedError("serve: the database is closed")
        try:
            conn = self._pool.get_nowait()
        except queue.Empty:
            try:
                conn = sqlite3.connect(
                    self._path, isolation_level=None, check_same_thread=False, timeout=30.0
                )
            except sqlite3.Error as exc:
                raise StateError(f"serve: cannot open {self._path}: {exc}") from None
            with self._all_lock:
                if self.closed:  # close() ran while this connection was opening
                    conn.close()
                    raise DbClosedError("serve: the database is closed") from None
                self._all.append(conn)
        try:
            yield conn
        finally:
            self._pool.put(conn)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error."""
        with self._write_lock, self._conn() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # ------------------------------------------------------------ runs

    def get_run(self, ns: str, run_id: str) -> StoredText | None:
        with self._conn() as conn:
            conn.execute("BEGIN")  # one snapshot: the record and its deltas agree
            try:
                row = conn.execute(
                    "SELECT record, etag FROM runs WHERE ns = ? AND id = ?", (ns, run_id)
                ).fetchone()
                deltas = [d for (d,) in conn.execute(
                    "SELECT delta FROM run_deltas WHERE ns = ? AND run_id = ? ORDER BY seq",
                    (ns, run_id),
                )]  # fmt: skip
            finally:
                conn.execute("COMMIT")
        if row is None:
            return None
        return StoredText(text=_fold(row[0], deltas) if deltas else row[0], etag=row[1])

    def create_run(self, ns: str, record: RunRecord, text: str) -> str | None:
        """Store a new run; its version, or ``None`` if the id is taken."""
        with self._write() as conn:
            if conn.execute(
                "SELECT 1 FROM runs WHERE ns = ? AND id = ?", (ns, record.id)
            ).fetchone():
                return None
            etag = _new_etag()
            conn.execute(
                "INSERT INTO runs (ns, id, etag, record, build, root_target, status, actor,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ns, record.id, etag, text, record.build, record.root_target, record.status,
                 record.actor, record.created_at, record.updated_at),
            )  # fmt: skip
            conn.executemany(
                "INSERT OR IGNORE INTO run_targets (ns, run_id, name) VALUES (?, ?, ?)",
                [(ns, record.id, node.name) for node in record.graph],
            )
            _reset_journal(conn, ns, record.id, len(text))
            return etag

    def update_run(
        self, ns: str, record: RunRecord, text: str, *, if_match: str
    ) -> tuple[WriteOutcome, str]:
        """Replace a run at version ``if_match`` (``*``: any); the outcome and new version."""
        with self._write() as conn:
            outcome = self._check_version(conn, ns, record.id, if_match)
            if outcome != "written":
                return outcome, ""
            return "written", self._replace(conn, ns, record, text, graph_changed=True)

    def patch_run(
        self, ns: str, run_id: str, delta: RunDelta, *, if_match: str
    ) -> tuple[WriteOutcome, str]:
        """Apply ``delta`` to a run at version ``if_match``; the outcome and new version."""
        with self._write() as conn:
            outcome = self._check_version(conn, ns, run_id, if_match)
            if outcome != "written":
                return outcome, ""
            line = _dumps(delta_to_json(delta))
            base_bytes, journal_bytes, last_seq = self._journal_size(conn, ns, run_id)
            if journal_bytes + len(line) > max(base_bytes, COMPACT_MIN_BYTES):
                return "written", self._compact(conn, ns, run_id, delta)
            conn.execute(
                "INSERT INTO run_deltas (ns, run_id, seq, delta) VALUES (?, ?, ?, ?)",
                (ns, run_id, last_seq + 1, line),
            )
            conn.execute(
                "UPDATE run_journal SET journal_bytes = ?, last_seq = ?"
                " WHERE ns = ? AND run_id = ?",
                (journal_bytes + len(line), last_seq + 1, ns, run_id),
            )
            etag = _new_etag()
            # Keep the listing's columns current without touching the record.
            conn.execute(
                "UPDATE runs SET etag = ?, updated_at = ?, status = COALESCE(?, status),"
                " actor = COALESCE(?, actor) WHERE ns = ? AND id = ?",
                (etag, delta.updated_at, delta.status, delta.actor, ns, run_id),
            )
            return "written", etag

    @staticmethod
    def _journal_size(conn: sqlite3.Connection, ns: str, run_id: str) -> tuple[int, int, int]:
        """``(record bytes, delta bytes, last delta seq)`` of a run, from its counters."""
        row = conn.execute(
            "SELECT base_bytes, journal_bytes, last_seq FROM run_journal"
            " WHERE ns = ? AND run_id = ?",
            (ns, run_id),
        ).fetchone()
        if row is not None:
            return int(row[0]), int(row[1]), int(row[2])
        # A run written before the counters existed: count once, then keep counting.
        base, journal, last = conn.execute(
            "SELECT LENGTH(r.record), COALESCE(SUM(LENGTH(d.delta)), 0), COALESCE(MAX(d.seq), 0)"
            " FROM runs r LEFT JOIN run_deltas d ON d.ns = r.ns AND d.run_id = r.id"
            " WHERE r.ns = ? AND r.id = ?",
            (ns, run_id),
        ).fetchone()
        _reset_journal(conn, ns, run_id, int(base), journal=int(journal), last_seq=int(last))
        return int(base), int(journal), int(last)

    def _compact(self, conn: sqlite3.Connection, ns: str, run_id: str, delta: RunDelta) -> str:
        """Fold the run's deltas (and ``delta``) into its record; the new version."""
        (text,) = conn.execute(
            "SELECT record FROM runs WHERE ns = ? AND id = ?", (ns, run_id)
        ).fetchone()
        deltas = [parse_delta(_loads(d)) for (d,) in conn.execute(
            "SELECT delta FROM run_deltas WHERE ns = ? AND run_id = ? ORDER BY seq", (ns, run_id)
        )]  # fmt: skip
        record = apply_deltas(parse_record(_loads(text)), [*deltas, delta])
        conn.execute("DELETE FROM run_deltas WHERE ns = ? AND run_id = ?", (ns, run_id))
        return self._replace(conn, ns, record, _dumps(record_to_json(record)), graph_changed=False)

    @staticmethod
    def _check_version(
        conn: sqlite3.Connection, ns: str, run_id: str, if_match: str
    ) -> WriteOutcome:
        row = conn.execute("SELECT etag FROM runs WHERE ns = ? AND id = ?", (ns, run_id)).fetchone()
        if row is None:
            return "missing"
        if if_match != "*" and row[0] != if_match:
            return "mismatch"
        return "written"

    @staticmethod
    def _replace(
        conn: sqlite3.Connection, ns: str, record: RunRecord, text: str, *, graph_changed: bool
    ) -> str:
        etag = _new_etag()
        conn.execute("DELETE FROM run_deltas WHERE ns = ? AND run_id = ?", (ns, record.id))
        _reset_journal(conn, ns, record.id, len(text))
        conn.execute(
            "UPDATE runs SET etag = ?, record = ?, build = ?, root_target = ?, status = ?,"
            " actor = ?, created_at = ?, updated_at = ? WHERE ns = ? AND id = ?",
            (etag, text, record.build, record.root_target, record.status, record.actor,
             record.created_at, record.updated_at, ns, record.id),
        )  # fmt: skip
        if graph_changed:
            conn.execute("DELETE FROM run_targets WHERE ns = ? AND run_id = ?", (ns, record.id))
            conn.executemany(
                "INSERT OR IGNORE INTO run_targets (ns, run_id, name) VALUES (?, ?, ?)",
                [(ns, record.id, node.name) for node in record.graph],
            )
        return etag

    def delete_run(self, ns: str, run_id: str) -> bool:
        """Remove a run; whether it existed. Locks are left alone (a lock outlives runs)."""
        with self._write() as conn:
            conn.execute("DELETE FROM run_targets WHERE ns = ? AND run_id = ?", (ns, run_id))
            conn.execute("DELETE FROM run_deltas WHERE ns = ? AND run_id = ?", (ns, run_id))
            conn.execute("DELETE FROM run_journal WHERE ns = ? AND run_id = ?", (ns, run_id))
            cursor = conn.execute("DELETE FROM runs WHERE ns = ? AND id = ?", (ns, run_id))
            return cursor.rowcount > 0

    def list_runs(
        self,
        ns: str,
        *,
        status: str | None,
        target: str | None,
        since: str | None,
        limit: int | None,
    ) -> list[tuple[str, str, str, str, str, str, str]]:
        """Summary rows ``(id, build, root_target, status, actor, created_at, updated_at)``.

        Newest first by ``createdAt`` then id, both descending; ``since`` is an
        inclusive string comparison (ISO-8601 UTC stamps sort as strings);
        ``limit`` applies after ordering.
        """
        sql = [
            "SELECT id, build, root_target, status, actor, created_at, updated_at",
            "FROM runs r WHERE r.ns = ?",
        ]
        args: list[str | int] = [ns]
        if status is not None:
            sql.append("AND r.status = ?")
            args.append(status)
        if since is not None:
            sql.append("AND r.created_at >= ?")
            args.append(since)
        if target is not None:
            sql.append(
                "AND EXISTS (SELECT 1 FROM run_targets t"
                " WHERE t.ns = r.ns AND t.run_id = r.id AND t.name = ?)"
            )
            args.append(target)
        sql.append("ORDER BY r.created_at DESC, r.id DESC")
        if limit is not None:
            sql.append("LIMIT ?")
            args.append(limit)
        with self._conn() as conn:
            return [tuple(row) for row in conn.execute(" ".join(sql), args).fetchall()]

    # ------------------------------------------------------------ locks

    def acquire_lock(self, ns: str, key: str, holder_json: str, ttl_ms: int) -> Granted | HeldBy:
        """Take ``key`` if free or expired by this server's clock."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT token, holder, expires_at, fence FROM locks WHERE ns = ? AND key = ?",
                (ns, key),
            ).fetchone()
            now = self._clock.now_ms()
            if row is not None and row[0] is not None and row[2] > now:
                return HeldBy(holder_json=row[1])
            # Free, released or expired: a new claim with a strictly greater fence.
            fence = (row[3] if row is not None else 0) + 1
            token = str(uuid.uuid4())
            conn.execute(
                "INSERT INTO locks (ns, key, token, holder, expires_at, fence)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (ns, key) DO UPDATE SET"
                " token = excluded.token, holder = excluded.holder,"
                " expires_at = excluded.expires_at, fence = excluded.fence",
                (ns, key, token, holder_json, now + ttl_ms, fence),
            )
            return Granted(token=token, fence=fence)

    def renew_lock(self, ns: str, key: str, token: str, ttl_ms: int) -> RenewOutcome:
        """Extend the claim of ``token``.

        A matching token renews even past its expiry: expired is not abandoned
        until somebody else acquires the key (which replaces the token).
        """
        with self._write() as conn:
            row = conn.execute(
                "SELECT token FROM locks WHERE ns = ? AND key = ?", (ns, key)
            ).fetchone()
            if row is None or row[0] is None:
                return "missing"
            if not _same_token(row[0], token):
                return "held"
            conn.execute(
                "UPDATE locks SET expires_at = ? WHERE ns = ? AND key = ?",
                (self._clock.now_ms() + ttl_ms, ns, key),
            )
            return "renewed"

    def release_lock(self, ns: str, key: str, token: str) -> bool:
        """Give the claim of ``token`` back (the fence stays); whether it held the key."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT token FROM locks WHERE ns = ? AND key = ?", (ns, key)
            ).fetchone()
            if row is None or row[0] is None or not _same_token(row[0], token):
                return False
            conn.execute(
                "UPDATE locks SET token = NULL, holder = NULL, expires_at = NULL"
                " WHERE ns = ? AND key = ?",
                (ns, key),
            )
            return True


def _reset_journal(
    conn: sqlite3.Connection, ns: str, run_id: str, base_bytes: int, *,
    journal: int = 0, last_seq: int = 0,
) -> None:  # fmt: skip
    conn.execute(
        "INSERT OR REPLACE INTO run_journal (ns, run_id, base_bytes, journal_bytes, last_seq)"
        " VALUES (?, ?, ?, ?, ?)",
        (ns, run_id, base_bytes, journal, last_seq),
    )


def _fold(text: str, deltas: list[str]) -> str:
    record = apply_deltas(parse_record(_loads(text)), [parse_delta(_loads(d)) for d in deltas])
    return _dumps(record_to_json(record))


def _same_token(stored: str, given: str) -> bool:
    return hmac.compare_digest(stored.encode(), given.encode())


def _loads(text: str) -> object:
    return json.loads(text)


def _dumps(raw: object) -> str:
    return json.dumps(raw, ensure_ascii=False, separators=(",", ":"))


__all__ = ["DbClosedError", "Granted", "HeldBy", "StateDb", "StoredText"]
