"""What the app asks of a database, and which database ``--db`` names.

Two databases answer it: a SQLite file (:mod:`zuke._serve.db`, one process
on one host) and Postgres (:mod:`zuke._serve.pg`, any number of replicas on
one database). The app (:mod:`zuke._serve.app`) sees only :class:`ServeDb`:
runs with versions (ETags), ``.locks`` and ``.builds``, every call keyed by
namespace. Every decision a second replica could contradict — a version
match, a lock's holder and expiry, a build's first ``createdAt`` — is the
database's, inside one statement or transaction.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from zuke.state._pg_url import shown_url
from zuke.state._protocol import LockAcquired, LockEntry, LockHeld
from zuke.state.records import LockHolder, RunDelta, RunRecord

WriteOutcome = Literal["written", "mismatch", "missing"]
BuildOutcome = Literal["written", "mismatch", "missing", "exists"]
#: ``(id, build, root_target, status, actor, created_at, updated_at)``
SummaryRow = tuple[str, str, str, str, str, str, str]
#: a place in the listing's order: ``(created_ms, id)`` (see :meth:`ServeDb.list_runs`)
Position = tuple[int | None, str]
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class StoredText:
    """A stored JSON text and its version."""

    text: str
    etag: str


@dataclass(frozen=True)
class Descriptor:
    """What the app validated: the descriptor JSON and the fields the catalog indexes."""

    id: str
    raw: dict[str, Any]
    name: str
    actor: str
    created_at: str
    created_ms: int
    updated_at: str

    def with_created_at(self, created_at: str) -> dict[str, Any]:
        """The descriptor carrying ``created_at`` (the first registration's)."""
        return self.raw if created_at == self.created_at else {**self.raw, "createdAt": created_at}


def grant_token(write_id: str) -> str:
    """The token of an acquisition sent with ``x-zuke-write-id: write_id``: derived from it,
    so the same request sent again (its answer lost) is answered the same token by any
    replica, once the grant it left (the token's hash) shows it landed."""
    import hashlib

    return hashlib.sha256(f"zuke-lock-grant:{write_id}".encode()).hexdigest()[:32]


class LockBackend(Protocol):
    def acquire(
        self, ns: str, key: str, holder: LockHolder, ttl_ms: int, *, write_id: str | None = None
    ) -> LockAcquired | LockHeld:
        """Take ``key`` if free, released or expired by the database's clock. ``write_id``:
        the request's idempotency key — one that landed before is answered as it was."""

    def renew(self, ns: str, key: str, token: str, ttl_ms: int) -> bool | None:
        """``True`` renewed; ``False`` held under another token; ``None`` unclaimed."""

    def release(self, ns: str, key: str, token: str) -> bool:
        """Give the claim of ``token`` back (the fence stays); whether it held the key."""

    def break_claim(self, ns: str, key: str) -> LockHolder | None:
        """Remove ``key``'s claim whatever its token; the holder removed."""

    def list(self, ns: str, *, run_id: str | None = None) -> list[LockEntry]:
        """Every claim not released (live or expired), optionally of one run, by key."""


class BuildBackend(Protocol):
    def get(self, ns: str, build_id: str) -> tuple[str, str] | None:
        """``(descriptor text, etag)``, or ``None`` when not registered."""

    def put(self, ns: str, build: Descriptor, *, if_match: str | None) -> tuple[BuildOutcome, str]:
        """Create (``if_match`` ``None``) or update at ``if_match`` (``*``: any); outcome, etag."""

    def delete(self, ns: str, build_id: str) -> bool: ...

    def list(self, ns: str, *, name: str | None, since_ms: int | None) -> list[dict[str, str]]:
        """Summaries ``{id, name, actor, createdAt, updatedAt}``, newest first, then by id."""


class ServeDb(Protocol):
    @property
    def locks(self) -> LockBackend: ...

    @property
    def builds(self) -> BuildBackend: ...

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...

    def promptly(self) -> AbstractContextManager[None]:
        """Within it, a write that would wait raises :class:`~zuke._serve.sqlite.WouldWait`."""

    def get_run(self, ns: str, run_id: str) -> StoredText | None: ...

    def create_run(
        self, ns: str, record: RunRecord, text: str, *, write_id: str | None = None
    ) -> str | None:
        """Store a new run as ``text``; its version, or ``None`` if the id is taken.

        ``write_id`` (every write): the request's idempotency key (``x-zuke-write-id``),
        kept with the write as its witness: sent again after its answer was lost, a write
        that landed is answered with the version it made, whatever landed after it."""

    def update_run(
        self, ns: str, record: RunRecord, text: str, *, if_match: str, write_id: str | None = None
    ) -> tuple[WriteOutcome, str]:
        """Replace a run at version ``if_match`` (``*``: any); the outcome and new version."""

    def patch_run(
        self, ns: str, run_id: str, delta: RunDelta, *, if_match: str, write_id: str | None = None
    ) -> tuple[WriteOutcome, str]:
        """Append ``delta`` to a run at version ``if_match``; the outcome and new version."""

    def delete_run(self, ns: str, run_id: str) -> bool:
        """Remove a run; whether it existed."""

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
        """Summary rows newest first (``createdAt`` as a time, then id); every filter indexed.

        ``before``: only the rows past that place in the order (keyset paging, the web
        view's): ``(created_ms, id)`` of a page's last row, ``created_ms`` ``None`` for a
        run whose ``createdAt`` is no time (those come last).
        """


def is_postgres(spec: str | os.PathLike[str]) -> bool:
    return isinstance(spec, str) and spec.startswith(POSTGRES_SCHEMES)


def shown_db(spec: str | os.PathLike[str]) -> str:
    """``--db`` fit for a message or a log: a Postgres URL without its password."""
    return shown_url(str(spec)) if is_postgres(spec) else os.fspath(spec)


__all__ = [
    "BuildBackend",
    "BuildOutcome",
    "Descriptor",
    "LockBackend",
    "Position",
    "ServeDb",
    "StoredText",
    "SummaryRow",
    "WriteOutcome",
    "grant_token",
    "is_postgres",
    "shown_db",
]
