"""Locks in Postgres: lease rows with fences, judged by the database's clock.

The rules are :mod:`zuke.state.lock_rules`' (free, released or expired keys
may be taken; the fence only rises; an expired claim renews until someone
else takes it; a stale token changes nothing; a break keeps the fence), each
written as one statement so the row lock of that statement is what decides a
race, in one round trip. Every "now" is ``clock_timestamp()``, the database's
clock: no client's clock decides an expiry, and clients on many hosts agree.

They are rows, never advisory locks: a session advisory lock pins the pooled
connection that took it, and is lost or leaked behind a transaction pooler.

Only a hash of each token is stored (``token_sha256``), so the database (a
dump, a replica) never holds a token that would renew or release a claim,
and the comparison in ``WHERE`` is of hashes.

Every acquisition also records its **grant** (``zuke_lock_grants``: the
token's hash and the fence) in the same statement. A release, a break or a
takeover clears the claim but not the grant, so after a lost answer
:func:`held_by` tells an acquisition that landed from one that did not,
whatever happened to the key since (grants older than a day are forgotten
by the key's next acquisition).

When a run is deleted its lease row (``zuke-run-<id>``) is forgotten unless a
live claim holds it, and its fence is raised into the namespace's row of
``zuke_fence_floors``; a new key's first fence is above that floor. The
deletion holds the floor row ``FOR UPDATE`` and an acquisition reads it
``FOR KEY SHARE``, so one cannot slip between the other's two steps.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from zuke.state._pg_runs import dumps
from zuke.state._pg_schema import to_db
from zuke.state._protocol import RUN_LEASE_PREFIX, LockAcquired, LockEntry, LockHeld
from zuke.state.records import LockHolder
from zuke.state.wire import holder_to_json, parse_holder

if TYPE_CHECKING:
    from zuke.state._pg_conn import Conn

#: Attempts when the key is released between an acquisition's refusal and reading its holder.
ACQUIRE_ATTEMPTS = 10
_NOW = "clock_timestamp()"
#: grants older than this are forgotten by the key's next acquisition
GRANT_KEEP = "1 day"
_RELEASED = "token_sha256 = NULL, holder = NULL, run_id = NULL, expires_at = NULL"


def token_hash(token: str) -> bytes:
    import hashlib  # OpenSSL: loaded by the first lock call, not by a listing (_pg_light)

    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def ensure_floor(conn: Conn, ns: str) -> None:
    """The namespace's fence-floor row, which acquisitions and deletions lock."""
    conn.execute(
        "INSERT INTO zuke_fence_floors (ns, floor) VALUES (%s, 0) ON CONFLICT DO NOTHING", (ns,)
    )


def acquire(
    conn: Conn, ns: str, key: str, holder: LockHolder, ttl_ms: int, *, token: str | None = None
) -> LockAcquired | LockHeld:
    """Take ``key`` if it is free, released or expired; ``token``: the claim's, if chosen
    beforehand (so that a lost answer can be told from a refusal: :func:`held_by`)."""
    # 32 random hex digits, as uuid4().hex: without importing uuid (platform)
    token = os.urandom(16).hex() if token is None else token
    for _ in range(ACQUIRE_ATTEMPTS):
        row = conn.execute(
            "WITH a AS (INSERT INTO zuke_locks AS l"
            " (ns, key, token_sha256, holder, run_id, expires_at, fence)"
            f" VALUES (%(ns)s, %(key)s, %(sha)s, %(holder)s, %(run)s,"
            f" {_NOW} + %(ttl)s * interval '1 millisecond',"
            " COALESCE((SELECT floor FROM zuke_fence_floors WHERE ns = %(ns)s FOR KEY SHARE), 0)"
            " + 1)"
            " ON CONFLICT (ns, key) DO UPDATE SET token_sha256 = excluded.token_sha256,"
            " holder = excluded.holder, run_id = excluded.run_id, expires_at = excluded.expires_at,"
            " fence = GREATEST(l.fence + 1, excluded.fence)"
            f" WHERE l.token_sha256 IS NULL OR l.expires_at <= {_NOW}"
            " RETURNING fence),"
            " g AS (INSERT INTO zuke_lock_grants (ns, key, token_sha256, fence)"
            " SELECT %(ns)s, %(key)s, %(sha)s, fence FROM a ON CONFLICT DO NOTHING),"
            " old AS (DELETE FROM zuke_lock_grants o USING a WHERE o.ns = %(ns)s"
            f" AND o.key = %(key)s AND o.at < {_NOW} - interval '{GRANT_KEEP}')"
            " SELECT fence FROM a",
            {
                "ns": ns, "key": key, "sha": token_hash(token),
                "holder": dumps(holder_to_json(holder)), "run": to_db(holder.run_id),
                "ttl": ttl_ms,
            },
        ).fetchone()  # fmt: skip
        if row is not None:
            return LockAcquired(token=token, fence=int(row[0]))
        held = conn.execute(
            "SELECT holder FROM zuke_locks WHERE ns = %s AND key = %s"
            f" AND token_sha256 IS NOT NULL AND expires_at > {_NOW}",
            (ns, key),
        ).fetchone()
        if held is not None:
            return LockHeld(holder=_holder(held[0], key))
    raise AssertionError(f"lock {key!r} was released and taken {ACQUIRE_ATTEMPTS} times in a row")


def held_by(conn: Conn, ns: str, key: str, token: str) -> LockAcquired | None:
    """The acquisition of ``token`` on ``key`` if it landed — even if the claim was released,
    broken or taken over since (its grant stays) — else ``None``."""
    row = conn.execute(
        "SELECT fence FROM zuke_lock_grants WHERE ns = %s AND key = %s AND token_sha256 = %s",
        (ns, key, token_hash(token)),
    ).fetchone()
    return None if row is None else LockAcquired(token=token, fence=int(row[0]))


def renew(conn: Conn, ns: str, key: str, token: str, ttl_ms: int) -> bool:
    row = conn.execute(
        f"UPDATE zuke_locks SET expires_at = {_NOW} + %s * interval '1 millisecond'"
        " WHERE ns = %s AND key = %s AND token_sha256 = %s RETURNING 1",
        (ttl_ms, ns, key, token_hash(token)),
    ).fetchone()
    return row is not None


def release(conn: Conn, ns: str, key: str, token: str) -> bool:
    """Give the claim of ``token`` back (the fence stays); whether it held the key."""
    cursor = conn.execute(
        f"UPDATE zuke_locks SET {_RELEASED} WHERE ns = %s AND key = %s AND token_sha256 = %s",
        (ns, key, token_hash(token)),
    )
    return cursor.rowcount > 0


def break_claim(conn: Conn, ns: str, key: str) -> LockHolder | None:
    row = conn.execute(
        "WITH old AS (SELECT key, holder FROM zuke_locks"
        " WHERE ns = %(ns)s AND key = %(key)s AND token_sha256 IS NOT NULL FOR UPDATE)"
        f" UPDATE zuke_locks l SET {_RELEASED} FROM old"
        " WHERE l.ns = %(ns)s AND l.key = old.key RETURNING old.holder",
        {"ns": ns, "key": key},
    ).fetchone()
    return None if row is None else _holder(row[0], key)


def listing(conn: Conn, ns: str, run_id: str | None) -> list[LockEntry]:
    sql, args = listing_sql(ns, run_id)
    return entries(conn.execute(sql, args).fetchall())


def listing_sql(ns: str, run_id: str | None) -> tuple[bytes, list[str]]:
    """:func:`listing`'s statement and arguments (the light path reads the same one)."""
    sql = (
        "SELECT key, holder, floor(extract(epoch FROM expires_at) * 1000)::bigint, fence"
        " FROM zuke_locks WHERE ns = %s AND token_sha256 IS NOT NULL"
    )
    args = [ns]
    if run_id is not None:
        sql, args = sql + " AND run_id = %s", [ns, to_db(run_id)]
    return (sql + " ORDER BY key").encode(), args


def entries(rows: Iterable[Sequence[Any]]) -> list[LockEntry]:
    """:func:`listing_sql`'s rows as entries."""
    return [
        LockEntry(key=key, holder=_holder(holder, key), expires_at=int(exp), fence=int(fence))
        for key, holder, exp, fence in rows
    ]


def forget_lease(conn: Conn, ns: str, run_id: str) -> None:
    """Inside a deletion's transaction: drop the run's lease row unless live, keep its fence."""
    conn.execute("SELECT floor FROM zuke_fence_floors WHERE ns = %s FOR UPDATE", (ns,))
    conn.execute(
        "WITH gone AS (DELETE FROM zuke_locks WHERE ns = %(ns)s AND key = %(key)s"
        f" AND (token_sha256 IS NULL OR expires_at <= {_NOW}) RETURNING fence)"
        " UPDATE zuke_fence_floors f SET floor = GREATEST(f.floor, gone.fence)"
        " FROM gone WHERE f.ns = %(ns)s",
        {"ns": ns, "key": RUN_LEASE_PREFIX + run_id},
    )


def _holder(text: str, key: str) -> LockHolder:
    import json

    return parse_holder(json.loads(text), where=f"holder of lock {key!r}")


__all__ = [
    "acquire", "break_claim", "ensure_floor", "entries", "forget_lease", "held_by", "listing",
    "listing_sql", "release", "renew",
]  # fmt: skip
