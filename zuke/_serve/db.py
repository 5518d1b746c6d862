"""The state service's runs in SQLite: records with versions, and their journal.

This module owns every statement about runs (:mod:`zuke._serve.db_locks` and
:mod:`zuke._serve.db_builds` own the locks and the build catalog) and opens
the file: :class:`StateDb` is the one object the app talks to, with
``.locks`` and ``.builds`` beside its run methods. Transactions and pooling
live in :mod:`zuke._serve.sqlite`, the schema in :mod:`zuke._serve.schema`.

Runs are keyed by ``(namespace, id)``; the record JSON is stored as sent,
beside the columns a listing needs (``createdAt`` also as epoch ms, so
``since`` is a time comparison from an index) and a table of graph node
names for the ``target`` filter. A version (the ETag) is a fresh random value
per write, so a stale ETag can never match a record that was deleted and
re-created.

A write sent with an idempotency key (``x-zuke-write-id``) keeps it, with
the version it made, in ``run_writes`` — in the write's own transaction, and
erased by no later write — so the same request sent again after its answer
was lost is answered ``written`` with that version, not ``412``.

A ``PATCH`` appends its delta to ``run_deltas`` instead of rewriting the
record, so persisting a run costs time linear in its transitions. Reads fold
the deltas over the stored record; once the deltas outweigh the record (and
at least 64 KiB of them have gathered) they are folded into it, so the
rewrites stay linear too.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from contextlib import AbstractContextManager
from pathlib import Path

from zuke._clock import Clock
from zuke._errors import StateError
from zuke._serve.backend import Position, StoredText, SummaryRow, WriteOutcome
from zuke._serve.db_builds import BuildTable
from zuke._serve.db_locks import LockTable
from zuke._serve.jsontext import dumps, from_sql, loads, sql_text
from zuke._serve.schema import created_ms, prepare
from zuke._serve.sqlite import DbClosedError, Pool, WouldWait
from zuke.state._listing_sql import Position as Place
from zuke.state._listing_sql import listing_sql, page
from zuke.state.records import RunDelta, RunRecord, apply_deltas
from zuke.state.wire import delta_to_json, parse_delta, parse_record, record_to_json

COMPACT_MIN_BYTES = 64 * 1024
#: witnesses of keyed writes older than this are forgotten when the run's journal is folded
WITNESS_KEEP_MS = 24 * 3600 * 1000


def new_etag() -> str:
    # Quoted, as HTTP entity tags are; clients echo it back verbatim.
    return f'"{uuid.uuid4().hex}"'


class StateDb:
    """Thread-safe access to one SQLite state file: runs here, ``.locks``, ``.builds``."""

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock) -> None:
        self._path = Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        if not self._path.exists():
            # The file holds actors, parameters and metadata: owner-only from the start.
            os.close(os.open(self._path, os.O_CREAT | os.O_WRONLY, 0o600))
        self._pool = Pool(self._path)
        self._clock = clock
        self.locks = LockTable(self._pool, clock)
        self.builds = BuildTable(self._pool)
        try:
            with self._pool.conn() as conn:
                prepare(conn, str(self._path))
        except sqlite3.Error as exc:
            self.close()
            raise StateError(f"serve: cannot use {self._path} as a state database: {exc}") from None
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        return self._pool.closed

    def close(self) -> None:
        self._pool.close()

    def promptly(self) -> AbstractContextManager[None]:
        """Within it, writes that would wait raise :class:`WouldWait` (see :mod:`.sqlite`)."""
        return self._pool.promptly()

    # ------------------------------------------------------------ runs

    def get_run(self, ns: str, run_id: str) -> StoredText | None:
        with self._pool.read() as conn:  # one snapshot: the record and its deltas agree
            row = conn.execute(
                "SELECT record, etag FROM runs WHERE ns = ? AND id = ?", (ns, run_id)
            ).fetchone()
            deltas = [d for (d,) in conn.execute(
                "SELECT delta FROM run_deltas WHERE ns = ? AND run_id = ? ORDER BY seq",
                (ns, run_id),
            )]  # fmt: skip
        if row is None:
            return None
        return StoredText(text=_fold(row[0], deltas) if deltas else row[0], etag=row[1])

    def create_run(
        self, ns: str, record: RunRecord, text: str, *, write_id: str | None = None
    ) -> str | None:
        """Store a new run; its version, or ``None`` if the id is taken (by another write
        than the one ``write_id`` names: that one is answered its version again)."""
        with self._pool.write() as conn:
            if conn.execute(
                "SELECT 1 FROM runs WHERE ns = ? AND id = ?", (ns, record.id)
            ).fetchone():
                return _witnessed(conn, ns, record.id, write_id)
            etag = new_etag()
            conn.execute(
                "INSERT INTO runs (ns, id, etag, record, build, root_target, status, actor,"
                " created_at, updated_at, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ns, record.id, etag, text, *_columns(record)),
            )
            _insert_targets(conn, ns, record)
            _reset_journal(conn, ns, record.id, len(text))
            _witness(conn, ns, record.id, write_id, etag, self._clock.now_ms())
            return etag

    def update_run(
        self, ns: str, record: RunRecord, text: str, *, if_match: str, write_id: str | None = None
    ) -> tuple[WriteOutcome, str]:
        """Replace a run at version ``if_match`` (``*``: any); the outcome and new version."""
        with self._pool.write() as conn:
            outcome = _check_version(conn, ns, record.id, if_match)
            if outcome != "written":
                landed = _witnessed(conn, ns, record.id, write_id)
                return (outcome, "") if landed is None else ("written", landed)
            etag = _replace(conn, ns, record, text, graph_changed=True)
            _witness(conn, ns, record.id, write_id, etag, self._clock.now_ms())
            return "written", etag

    def patch_run(
        self, ns: str, run_id: str, delta: RunDelta, *, if_match: str, write_id: str | None = None
    ) -> tuple[WriteOutcome, str]:
        """Apply ``delta`` to a run at version ``if_match``; the outcome and new version."""
        with self._pool.write(checkpoint=delta.status is not None) as conn:
            outcome = _check_version(conn, ns, run_id, if_match)
            if outcome != "written":
                landed = _witnessed(conn, ns, run_id, write_id)
                return (outcome, "") if landed is None else ("written", landed)
            line = dumps(delta_to_json(delta))
            base_bytes, journal_bytes, last_seq = _journal_size(conn, ns, run_id)
            now_ms = self._clock.now_ms()
            if journal_bytes + len(line) > max(base_bytes, COMPACT_MIN_BYTES):
                self._pool.long_work_ahead()  # a fold of the journal: not on the event loop
                etag = _compact(conn, ns, run_id, delta)
                conn.execute(  # the run's old witnesses go with its old journal
                    "DELETE FROM run_writes WHERE ns = ? AND run_id = ? AND at < ?",
                    (ns, run_id, now_ms - WITNESS_KEEP_MS),
                )
                _witness(conn, ns, run_id, write_id, etag, now_ms)
                return "written", etag
            conn.execute(
                "INSERT INTO run_deltas (ns, run_id, seq, delta) VALUES (?, ?, ?, ?)",
                (ns, run_id, last_seq + 1, line),
            )
            conn.execute(
                "UPDATE run_journal SET journal_bytes = ?, last_seq = ?"
                " WHERE ns = ? AND run_id = ?",
                (journal_bytes + len(line), last_seq + 1, ns, run_id),
            )
            etag = new_etag()
            # Keep the listing's columns current without touching the record.
            actor = None if delta.actor is None else sql_text(delta.actor)
            conn.execute(
                "UPDATE runs SET etag = ?, updated_at = ?, status = COALESCE(?, status),"
                " actor = COALESCE(?, actor) WHERE ns = ? AND id = ?",
                (etag, sql_text(delta.updated_at), delta.status, actor, ns, run_id),
            )
            _witness(conn, ns, run_id, write_id, etag, now_ms)
            return "written", etag

    def delete_run(self, ns: str, run_id: str) -> bool:
        """Remove a run; whether it existed. Locks are left alone (a lock outlives runs)."""
        with self._pool.write() as conn:
            conn.execute("DELETE FROM run_targets WHERE ns = ? AND run_id = ?", (ns, run_id))
            conn.execute("DELETE FROM run_deltas WHERE ns = ? AND run_id = ?", (ns, run_id))
            conn.execute("DELETE FROM run_journal WHERE ns = ? AND run_id = ?", (ns, run_id))
            conn.execute("DELETE FROM run_writes WHERE ns = ? AND run_id = ?", (ns, run_id))
            cursor = conn.execute("DELETE FROM runs WHERE ns = ? AND id = ?", (ns, run_id))
            return cursor.rowcount > 0

    def list_runs(
        self,
        ns: str,
        *,
        status: str | None = None,
        target: str | None = None,
        build: str | None = None,
        since_ms: int | None = None,
        limit: int | None = None,
        before: Position | None = None,
    ) -> list[SummaryRow]:
        """Summary rows ``(id, build, root_target, status, actor, created_at, updated_at)``.

        Newest first by ``createdAt`` as a time, then id, both descending;
        ``since_ms`` keeps runs created at or after it (a run whose
        ``createdAt`` is not an ISO instant never matches it); ``limit``
        applies after ordering; ``before`` keeps the rows past that place in the
        order (keyset paging). Every filter is served by an index.
        """

        def fetch(limit: int | None, before: Place | None) -> list[SummaryRow]:
            sql, args = listing_sql(
                runs="runs", targets="run_targets", mark="?", ns=ns, status=status, build=build,
                since_ms=since_ms, target=target, before=before, limit=limit,
            )  # fmt: skip
            with self._pool.conn() as conn:
                rows = conn.execute(sql, args).fetchall()
            return [(row[0], *(from_sql(v) for v in row[1:])) for row in rows]

        return page(fetch, limit=limit, before=before)


def _columns(record: RunRecord) -> tuple[str | bytes | int | None, ...]:
    """``build, root_target, status, actor, created_at, updated_at, created_ms`` of a record."""
    return (
        sql_text(record.build), sql_text(record.root_target), record.status,
        sql_text(record.actor), sql_text(record.created_at), sql_text(record.updated_at),
        created_ms(record.created_at),
    )  # fmt: skip


def _insert_targets(conn: sqlite3.Connection, ns: str, record: RunRecord) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO run_targets (ns, run_id, name) VALUES (?, ?, ?)",
        [(ns, record.id, sql_text(node.name)) for node in record.graph],
    )


def _witness(
    conn: sqlite3.Connection, ns: str, run_id: str, write_id: str | None, etag: str, now_ms: int
) -> None:
    """Keep the witness of a write sent with an idempotency key (in its transaction)."""
    if write_id is not None:
        conn.execute(
            "INSERT OR IGNORE INTO run_writes (ns, run_id, write_key, etag, at)"
            " VALUES (?, ?, ?, ?, ?)",
            (ns, run_id, write_id, etag, now_ms),
        )


def _witnessed(conn: sqlite3.Connection, ns: str, run_id: str, write_id: str | None) -> str | None:
    """The version the write keyed ``write_id`` made, if it landed."""
    if write_id is None:
        return None
    row = conn.execute(
        "SELECT etag FROM run_writes WHERE ns = ? AND run_id = ? AND write_key = ?",
        (ns, run_id, write_id),
    ).fetchone()
    return None if row is None else str(row[0])


def _check_version(conn: sqlite3.Connection, ns: str, run_id: str, if_match: str) -> WriteOutcome:
    row = conn.execute("SELECT etag FROM runs WHERE ns = ? AND id = ?", (ns, run_id)).fetchone()
    if row is None:
        return "missing"
    if if_match != "*" and row[0] != if_match:
        return "mismatch"
    return "written"


def _replace(
    conn: sqlite3.Connection, ns: str, record: RunRecord, text: str, *, graph_changed: bool
) -> str:
    etag = new_etag()
    conn.execute("DELETE FROM run_deltas WHERE ns = ? AND run_id = ?", (ns, record.id))
    _reset_journal(conn, ns, record.id, len(text))
    conn.execute(
        "UPDATE runs SET etag = ?, record = ?, build = ?, root_target = ?, status = ?,"
        " actor = ?, created_at = ?, updated_at = ?, created_ms = ? WHERE ns = ? AND id = ?",
        (etag, text, *_columns(record), ns, record.id),
    )
    if graph_changed:
        conn.execute("DELETE FROM run_targets WHERE ns = ? AND run_id = ?", (ns, record.id))
        _insert_targets(conn, ns, record)
    return etag


def _journal_size(conn: sqlite3.Connection, ns: str, run_id: str) -> tuple[int, int, int]:
    """``(record bytes, delta bytes, last delta seq)`` of a run, from its counters."""
    row = conn.execute(
        "SELECT base_bytes, journal_bytes, last_seq FROM run_journal WHERE ns = ? AND run_id = ?",
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


def _compact(conn: sqlite3.Connection, ns: str, run_id: str, delta: RunDelta) -> str:
    """Fold the run's deltas (and ``delta``) into its record; the new version."""
    (text,) = conn.execute(
        "SELECT record FROM runs WHERE ns = ? AND id = ?", (ns, run_id)
    ).fetchone()
    deltas = [parse_delta(loads(d)) for (d,) in conn.execute(
        "SELECT delta FROM run_deltas WHERE ns = ? AND run_id = ? ORDER BY seq", (ns, run_id)
    )]  # fmt: skip
    record = apply_deltas(parse_record(loads(text)), [*deltas, delta])
    conn.execute("DELETE FROM run_deltas WHERE ns = ? AND run_id = ?", (ns, run_id))
    return _replace(conn, ns, record, dumps(record_to_json(record)), graph_changed=False)


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
    record = apply_deltas(parse_record(loads(text)), [parse_delta(loads(d)) for d in deltas])
    return dumps(record_to_json(record))


__all__ = ["DbClosedError", "StateDb", "StoredText", "WouldWait", "new_etag"]
