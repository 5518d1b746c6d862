"""The state service's locks in SQLite, decided by :mod:`zuke.state.lock_rules`.

Each operation reads the key's row into a :class:`~zuke.state.lock_rules.ClaimState`,
asks the shared rule what the next state is, and writes that state back, all
in one ``BEGIN IMMEDIATE`` transaction. The rules (expiry by the server's
clock, renewal past expiry until someone else acquires, fences that only grow)
are therefore the same here as in every other store.

Lock rows are never deleted: a released key keeps its ``fence``, so the next
acquisition's fence is still strictly greater — across deleted runs and
restarts too. ``run_id`` mirrors the holder's ``runId`` for ``GET /locks?runId=``.
"""

from __future__ import annotations

import sqlite3
import uuid

from zuke._clock import Clock
from zuke._serve.backend import grant_token
from zuke._serve.jsontext import dumps, loads, sql_text
from zuke._serve.sqlite import Pool
from zuke.state import lock_rules
from zuke.state._protocol import LockAcquired, LockEntry, LockHeld
from zuke.state.lock_rules import ClaimState
from zuke.state.records import LockHolder
from zuke.state.wire import holder_to_json, parse_holder


class LockTable:
    """Acquire, renew, release, break and list the fenced locks of every namespace."""

    def __init__(self, pool: Pool, clock: Clock) -> None:
        self._pool = pool
        self._clock = clock

    def acquire(
        self, ns: str, key: str, holder: LockHolder, ttl_ms: int, *, write_id: str | None = None
    ) -> LockAcquired | LockHeld:
        """Take ``key`` if free, released or expired by this server's clock.

        ``write_id`` (the request's idempotency key): the token is derived from it
        (:func:`~zuke._serve.backend.grant_token`) and the acquisition leaves a grant, which
        no release, break or takeover erases — so the request sent again after its answer
        was lost is answered with the same token and fence.
        """
        token = str(uuid.uuid4()) if write_id is None else grant_token(write_id)
        with self._pool.write() as conn:
            now_ms = self._clock.now_ms()
            if write_id is not None:
                granted = conn.execute(
                    "SELECT fence FROM lock_grants WHERE ns = ? AND key = ? AND token = ?",
                    (ns, key, token),
                ).fetchone()
                if granted is not None:
                    return LockAcquired(token=token, fence=int(granted[0]))
            decision = lock_rules.acquire(
                _read(conn, ns, key), holder, ttl_ms, now_ms=now_ms, token=token
            )
            if isinstance(decision, lock_rules.Refused):
                return LockHeld(holder=decision.holder)
            _write(conn, ns, key, decision.state)
            if write_id is not None:
                conn.execute(
                    "DELETE FROM lock_grants WHERE ns = ? AND key = ? AND at < ?",
                    (ns, key, now_ms - GRANT_KEEP_MS),
                )
                conn.execute(
                    "INSERT OR IGNORE INTO lock_grants (ns, key, token, fence, at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (ns, key, token, decision.state.fence, now_ms),
                )
            return LockAcquired(token=str(decision.state.token), fence=decision.state.fence)

    def renew(self, ns: str, key: str, token: str, ttl_ms: int) -> bool | None:
        """``True`` renewed; ``False`` the key is held under another token; ``None`` unclaimed."""
        token = _issued_form(token)
        with self._pool.write() as conn:
            current = _read(conn, ns, key)
            if current is None or not current.claimed:
                return None
            renewed = lock_rules.renew(current, token, ttl_ms, now_ms=self._clock.now_ms())
            if renewed is None:
                return False
            _write(conn, ns, key, renewed)
            return True

    def release(self, ns: str, key: str, token: str) -> bool:
        """Give the claim of ``token`` back (the fence stays); whether it held the key."""
        token = _issued_form(token)
        with self._pool.write() as conn:
            released = lock_rules.release(_read(conn, ns, key), token)
            if released is None:
                return False
            _write(conn, ns, key, released)
            return True

    def break_claim(self, ns: str, key: str) -> LockHolder | None:
        """Remove ``key``'s claim whatever its token (the fence stays); the holder removed."""
        with self._pool.write() as conn:
            current = _read(conn, ns, key)
            broken = lock_rules.break_claim(current)
            if broken is None or current is None:
                return None
            _write(conn, ns, key, broken)
            return current.holder

    def list(self, ns: str, *, run_id: str | None = None) -> list[LockEntry]:
        """Every claim not released (live or expired), optionally of one run, by key."""
        sql = "SELECT key, holder, expires_at, fence FROM locks WHERE ns = ? AND token IS NOT NULL"
        args: tuple[str, ...] = (ns,)
        if run_id is not None:
            sql, args = sql + " AND run_id = ?", (ns, run_id)
        with self._pool.conn() as conn:
            rows = conn.execute(sql + " ORDER BY key", args).fetchall()
        return [
            LockEntry(key=key, holder=parse_holder(loads(holder)), expires_at=exp, fence=fence)
            for key, holder, exp, fence in rows
        ]


#: grants older than this are forgotten by the key's next keyed acquisition
GRANT_KEEP_MS = 24 * 3600 * 1000


def _issued_form(token: str) -> str:
    """``token``, or one that matches nothing when it is not ASCII (every issued token is)."""
    # The rule compares encoded tokens; a lone surrogate would not encode.
    return token if token.isascii() else "\x00"


def _read(conn: sqlite3.Connection, ns: str, key: str) -> ClaimState | None:
    row = conn.execute(
        "SELECT token, holder, expires_at, fence FROM locks WHERE ns = ? AND key = ?", (ns, key)
    ).fetchone()
    if row is None:
        return None
    token, holder, expires_at, fence = row
    return ClaimState(
        fence=int(fence),
        holder=None if holder is None else parse_holder(loads(holder)),
        token=token,
        expires_at=expires_at,
    )


def _write(conn: sqlite3.Connection, ns: str, key: str, state: ClaimState) -> None:
    holder = state.holder
    conn.execute(
        "INSERT INTO locks (ns, key, token, holder, expires_at, fence, run_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (ns, key) DO UPDATE SET"
        " token = excluded.token, holder = excluded.holder, expires_at = excluded.expires_at,"
        " fence = excluded.fence, run_id = excluded.run_id",
        (
            ns, key, state.token,
            None if holder is None else dumps(holder_to_json(holder)),
            state.expires_at, state.fence,
            None if holder is None else sql_text(holder.run_id),
        ),
    )  # fmt: skip


__all__ = ["LockTable"]
