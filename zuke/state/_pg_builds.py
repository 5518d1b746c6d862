"""The build catalog (``/builds``) in Postgres, for ``zuke serve --db postgresql://``.

Descriptors live in ``zuke_builds`` (schema 1), keyed by ``(ns, id)``, stored
as sent beside the columns the listing needs. A version is drawn from the
same sequence as the runs' (``zuke_run_versions``), so a build deregistered
and registered again never reuses one. A create is one ``INSERT … ON
CONFLICT DO NOTHING``; an update is one short transaction that holds the row
(``FOR UPDATE``) while it compares the version and keeps the first
registration's ``createdAt`` — the row lock, not a process, decides a race.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from zuke.state._pg_schema import from_db, to_db

if TYPE_CHECKING:
    from zuke.state._pg_conn import Conn

BuildOutcome = Literal["written", "mismatch", "missing", "exists"]
#: the descriptor's text, given the ``createdAt`` it must carry
TextFor = Callable[[str], str]


def get(conn: Conn, ns: str, build_id: str) -> tuple[str, int] | None:
    """``(descriptor text, version)``, or ``None`` when not registered."""
    row = conn.execute(
        "SELECT descriptor, version FROM zuke_builds WHERE ns = %s AND id = %s", (ns, build_id)
    ).fetchone()
    return None if row is None else (row[0], int(row[1]))


def put(
    conn: Conn,
    ns: str,
    build_id: str,
    *,
    text_for: TextFor,
    name: str,
    actor: str,
    created_at: str,
    created_ms: int,
    updated_at: str,
    if_match: int | Literal["*"] | None,
) -> tuple[BuildOutcome, int]:
    """Create (``if_match`` ``None``) or update at ``if_match`` (``*``: any); outcome, version."""
    values = {
        "ns": ns, "id": build_id, "name": to_db(name), "actor": to_db(actor),
        "created_at": to_db(created_at), "created_ms": created_ms,
        "updated_at": to_db(updated_at),
    }  # fmt: skip
    if if_match is None:
        row = conn.execute(
            "INSERT INTO zuke_builds (ns, id, version, descriptor, name, actor, created_at,"
            " created_ms, updated_at) VALUES (%(ns)s, %(id)s, nextval('zuke_run_versions'),"
            " %(text)s, %(name)s, %(actor)s, %(created_at)s, %(created_ms)s, %(updated_at)s)"
            " ON CONFLICT DO NOTHING RETURNING version",
            {**values, "text": text_for(created_at)},
        ).fetchone()
        return ("exists", 0) if row is None else ("written", int(row[0]))
    with conn.transaction():
        row = conn.execute(
            "SELECT version, created_at, created_ms FROM zuke_builds"
            " WHERE ns = %s AND id = %s FOR UPDATE",
            (ns, build_id),
        ).fetchone()
        if row is None:
            return "missing", 0
        if if_match != "*" and int(row[0]) != if_match:
            return "mismatch", 0
        first = from_db(row[1])  # the first registration's createdAt stays
        (version,) = conn.execute(
            "UPDATE zuke_builds SET version = nextval('zuke_run_versions'), descriptor = %(text)s,"
            " name = %(name)s, actor = %(actor)s, updated_at = %(updated_at)s"
            " WHERE ns = %(ns)s AND id = %(id)s RETURNING version",
            {**values, "text": text_for(first)},
        ).fetchone() or (0,)
        return "written", int(version)


def delete(conn: Conn, ns: str, build_id: str) -> bool:
    cursor = conn.execute("DELETE FROM zuke_builds WHERE ns = %s AND id = %s", (ns, build_id))
    return cursor.rowcount > 0


def listing(conn: Conn, ns: str, *, name: str | None, since_ms: int | None) -> list[dict[str, str]]:
    """Summaries ``{id, name, actor, createdAt, updatedAt}``, newest first, then by id."""
    sql = "SELECT id, name, actor, created_at, updated_at FROM zuke_builds WHERE ns = %s"
    args: list[str | int] = [ns]
    if name is not None:
        sql += " AND name = %s"
        args.append(to_db(name))
    if since_ms is not None:
        sql += " AND created_ms >= %s"
        args.append(since_ms)
    rows = conn.execute((sql + " ORDER BY created_ms DESC, id DESC").encode(), args).fetchall()
    keys = ("id", "name", "actor", "createdAt", "updatedAt")
    return [dict(zip(keys, map(from_db, row), strict=True)) for row in rows]


__all__ = ["BuildOutcome", "delete", "get", "listing", "put"]
