"""The build catalog (``/builds``) in SQLite: descriptors with versions.

A build descriptor is stored as sent (compact JSON) beside the columns its
listing needs. Versions work as for runs: a fresh random ETag per write,
compared inside one ``BEGIN IMMEDIATE`` transaction. One rule is the
service's own: ``createdAt`` is the first registration's — an update that
sends another ``createdAt`` is stored with the original one — so
re-registering a build refreshes ``updatedAt`` without moving it in a
``since`` listing.
"""

from __future__ import annotations

import sqlite3
import uuid

from zuke._serve.backend import BuildOutcome, Descriptor
from zuke._serve.jsontext import dumps, from_sql, sql_text
from zuke._serve.sqlite import Pool


class BuildTable:
    """Register, update, deregister and list build descriptors per namespace."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def get(self, ns: str, build_id: str) -> tuple[str, str] | None:
        """``(descriptor text, etag)``, or ``None`` when not registered."""
        with self._pool.conn() as conn:
            row = conn.execute(
                "SELECT descriptor, etag FROM builds WHERE ns = ? AND id = ?", (ns, build_id)
            ).fetchone()
        return None if row is None else (row[0], row[1])

    def put(self, ns: str, build: Descriptor, *, if_match: str | None) -> tuple[BuildOutcome, str]:
        """Create (``if_match`` ``None``) or update at ``if_match`` (``*``: any); outcome, etag."""
        etag = f'"{uuid.uuid4().hex}"'
        with self._pool.write() as conn:
            row = conn.execute(
                "SELECT etag, created_at, created_ms FROM builds WHERE ns = ? AND id = ?",
                (ns, build.id),
            ).fetchone()
            if if_match is None:
                if row is not None:
                    return "exists", ""
                _insert(conn, ns, build, etag, build.created_at, build.created_ms)
                return "written", etag
            if row is None:
                return "missing", ""
            if if_match != "*" and row[0] != if_match:
                return "mismatch", ""
            _insert(conn, ns, build, etag, from_sql(row[1]), int(row[2]))
            return "written", etag

    def delete(self, ns: str, build_id: str) -> bool:
        with self._pool.write() as conn:
            cursor = conn.execute("DELETE FROM builds WHERE ns = ? AND id = ?", (ns, build_id))
            return cursor.rowcount > 0

    def list(self, ns: str, *, name: str | None, since_ms: int | None) -> list[dict[str, str]]:
        """Summaries ``{id, name, actor, createdAt, updatedAt}``, newest first, then by id."""
        sql = "SELECT id, name, actor, created_at, updated_at FROM builds WHERE ns = ?"
        args: list[str | int] = [ns]
        if name is not None:
            sql += " AND name = ?"
            args.append(name)
        if since_ms is not None:
            sql += " AND created_ms >= ?"
            args.append(since_ms)
        with self._pool.conn() as conn:
            rows = conn.execute(sql + " ORDER BY created_ms DESC, id DESC", args).fetchall()
        keys = ("id", "name", "actor", "createdAt", "updatedAt")
        return [dict(zip(keys, map(from_sql, row), strict=True)) for row in rows]


def _insert(
    conn: sqlite3.Connection, ns: str, build: Descriptor, etag: str, created_at: str, ms: int
) -> None:
    raw = build.with_created_at(created_at)
    conn.execute(
        "INSERT OR REPLACE INTO builds (ns, id, etag, descriptor, name, actor, created_at,"
        " created_ms, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (ns, build.id, etag, dumps(raw), sql_text(build.name), sql_text(build.actor),
         sql_text(created_at), ms, sql_text(build.updated_at)),
    )  # fmt: skip


__all__ = ["BuildTable"]
