"""The ``StateStore`` protocol and its result values.

A store holds run records (compare-and-swap on an opaque version) and
cross-run locks (acquire / renew / release with a server-judged TTL).
Expected outcomes are values — ``Written`` / ``Conflict``,
``LockAcquired`` / ``LockHeld`` — and exceptions are for broken things:
:class:`~zuke.StoreUnavailableError` when the store cannot answer,
:class:`~zuke.CorruptRecordError` for a record that does not parse,
:class:`~zuke.UnsafeIdError` for an id that could escape the store.

Stores are synchronous; the engine calls them off its event loop. A store
that can also append a :class:`~zuke.state.records.RunDelta` implements
:class:`JournalingStateStore`, which keeps persistence linear in the number
of transitions (a whole-record store rewrites the record every time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # the same frozen dataclasses, without compiling their methods at import (_frozen)
    from zuke.state._frozen import dataclass

from zuke.state.records import LockHolder, RunDelta, RunRecord, RunStatus, RunSummary

#: A run's own lease is the lock ``zuke-run-<run id>`` (the published naming).
#: A store may forget that key's bookkeeping when it deletes the run.
RUN_LEASE_PREFIX = "zuke-run-"
#: Key prefixes zuke keeps for itself (run leases, the cancel lock); a build's
#: ``.lock()`` may not use them, so no build can reset or hold a lease's fence.
RESERVED_LOCK_PREFIXES = (RUN_LEASE_PREFIX, "zuke-cancel-")


def lease_key(run_id: str) -> str:
    """The key of a run's own lease."""
    return RUN_LEASE_PREFIX + run_id


@dataclass(frozen=True)
class StoredRun:
    """A record and the version it was read at."""

    record: RunRecord
    version: str


@dataclass(frozen=True)
class Written:
    """A write landed; ``version`` is the record's new version."""

    version: str


@dataclass(frozen=True)
class Conflict:
    """A write did not land: the record is not at the expected version (or exists already)."""


@dataclass(frozen=True)
class LockAcquired:
    """The lock is ours. ``token`` renews and releases it; ``fence`` is the fencing token.

    ``fence`` is strictly greater than the fence of every earlier acquisition
    of the same key, so a system that remembers the highest fence it has seen
    can reject a stale holder.
    """

    token: str
    fence: int = 0


@dataclass(frozen=True)
class LockHeld:
    """Someone else holds the lock."""

    holder: LockHolder


@dataclass(frozen=True)
class RunQuery:
    """Filters for :meth:`StateStore.list_runs`; results are newest first."""

    status: RunStatus | None = None
    target: str | None = None
    #: an ISO-8601 instant; compared as a time (``+05:30`` and fractions work), inclusive
    since: str | None = None
    limit: int | None = None
    #: only runs of this build (the record's ``build``, the build class name)
    build: str | None = None


@dataclass(frozen=True)
class LockEntry:
    """One claim as :meth:`StateStore.list_locks` reports it (live or expired, not released)."""

    key: str
    holder: LockHolder
    expires_at: int  #: epoch ms, by the store's clock
    fence: int


@runtime_checkable
class StateStore(Protocol):
    """Where run records and locks live."""

    def get_run(self, run_id: str) -> StoredRun | None:
        """The record and its version, or ``None`` if there is no such run."""
        ...

    def create_run(self, record: RunRecord) -> Written | Conflict:
        """Store a new record; ``Conflict`` if a run with that id exists."""
        ...

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        """Replace the record if it is still at ``expected_version``."""
        ...

    def delete_run(self, run_id: str) -> None:
        """Remove a run; removing an absent run is not an error."""
        ...

    def list_runs(self, query: RunQuery = RunQuery()) -> list[RunSummary]:  # noqa: B008 (frozen)
        """Summaries matching ``query``, newest first by ``createdAt`` then id."""
        ...

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        """Take ``key`` if free or expired (judged by the store's clock)."""
        ...

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        """Extend a claim; ``False`` when ``token`` no longer holds ``key``."""
        ...

    def release_lock(self, key: str, token: str) -> None:
        """Give a claim back; a token that no longer holds ``key`` is a no-op."""
        ...

    def list_locks(self, *, run_id: str | None = None) -> list[LockEntry]:
        """Every claim not released (optionally only ``run_id``'s), sorted by key.

        Expired claims are listed too: only an acquirer proves a holder gone.
        """
        ...

    def break_lock(self, key: str) -> LockHolder | None:
        """Remove ``key``'s claim without its token (an operator's override).

        Returns the holder removed, ``None`` if nothing was held. The key's
        fence is kept, so the next acquisition's is strictly greater, and the
        broken holder's token no longer renews. Newer than the other methods:
        callers check for it with ``getattr`` so a third-party store lacking it
        still works for everything else.
        """
        ...


def can_append(store: object) -> bool:
    """Whether ``store`` can persist a delta (``append_run``) instead of the whole record.

    Checked by the method alone, not ``isinstance(store, JournalingStateStore)``:
    a runtime protocol check asks for every member, so a third-party store
    lacking an unrelated, newer method (``list_locks``, ``break_lock``) would silently fall back
    to whole-record writes, which are quadratic in the run's length.
    """
    return callable(getattr(store, "append_run", None))


@runtime_checkable
class JournalingStateStore(StateStore, Protocol):
    """A store that can persist a change without rewriting the whole record."""

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        """Apply ``delta`` to the run if it is still at ``expected_version``."""
        ...


__all__ = [
    "RUN_LEASE_PREFIX",
    "Conflict",
    "JournalingStateStore",
    "LockAcquired",
    "LockEntry",
    "LockHeld",
    "LockHolder",
    "RunQuery",
    "StateStore",
    "StoredRun",
    "Written",
    "can_append",
    "lease_key",
]
