"""``MemoryStateStore``: the whole store protocol in one process's memory.

For tests, and as the reference implementation of the semantics every store
must share (the contract suite in :mod:`zuke.testing.store_contract` is run
against it). One :class:`threading.Lock` serialises every operation, which
makes compare-and-swap and lock acquisition trivially atomic.

Locks follow :mod:`zuke.state.lock_rules` (one :class:`ClaimState` per key).
Deleting a run forgets its own lease key (``zuke-run-<id>``) unless a live
claim holds it, as the filesystem store does; the forgotten key's fence is
kept in a store-wide floor, so fences never go back.

Records are kept as their JSON text, not as the caller's objects: a record's
mappings are mutable, so storing the object would let a caller change stored
state behind the store's back, and serialising on the way in catches a record
that a real store could not persist. Versions come from one counter per store,
so a run deleted and re-created never reuses a version (no ABA).
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Final

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke.state import lock_rules
from zuke.state._ids import check_id, check_ttl
from zuke.state._protocol import (
    RUN_LEASE_PREFIX,
    Conflict,
    LockAcquired,
    LockEntry,
    LockHeld,
    LockHolder,
    RunQuery,
    StoredRun,
    Written,
)
from zuke.state._query import select
from zuke.state.lock_rules import ClaimState
from zuke.state.records import RunDelta, RunRecord, RunSummary, apply_delta
from zuke.state.wire import loads_record, record_to_json

_EVERY_RUN: Final = RunQuery()


class MemoryStateStore:
    """An in-process, thread-safe :class:`~zuke.state.JournalingStateStore`."""

    #: a write never waits: the engine may make it on the event loop's thread
    inline_writes = True

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock: Final[Clock] = clock
        self._mutex = threading.Lock()
        self._runs: dict[str, tuple[str, str]] = {}  # id -> (record JSON, version)
        self._claims: dict[str, ClaimState] = {}  # a released key keeps its fence
        self._fence_floor = 0  # the highest fence of any forgotten key
        self._counter = 0

    def __repr__(self) -> str:
        return f"MemoryStateStore({len(self._runs)} runs)"

    #: the store as messages name it
    display_name = "memory (this process only)"

    def _store(self, record: RunRecord) -> Written:
        self._counter += 1
        version = str(self._counter)
        self._runs[record.id] = (json.dumps(record_to_json(record)), version)
        return Written(version=version)

    def get_run(self, run_id: str) -> StoredRun | None:
        check_id(run_id)
        with self._mutex:
            entry = self._runs.get(run_id)
        if entry is None:
            return None
        return StoredRun(record=loads_record(entry[0], where=f"run {run_id!r}"), version=entry[1])

    def create_run(self, record: RunRecord) -> Written | Conflict:
        check_id(record.id)
        with self._mutex:
            if record.id in self._runs:
                return Conflict()
            return self._store(record)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        check_id(record.id)
        with self._mutex:
            entry = self._runs.get(record.id)
            if entry is None or entry[1] != expected_version:
                return Conflict()
            return self._store(record)

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        check_id(run_id)
        with self._mutex:
            entry = self._runs.get(run_id)
            if entry is None or entry[1] != expected_version:
                return Conflict()
            current = loads_record(entry[0], where=f"run {run_id!r}")
            return self._store(apply_delta(current, delta))

    def delete_run(self, run_id: str) -> None:
        check_id(run_id)
        with self._mutex:
            self._runs.pop(run_id, None)
            # Nobody takes a deleted run's lease again: forget it unless it is live.
            lease = self._claims.get(RUN_LEASE_PREFIX + run_id)
            if lease is not None and not lease.is_live(self.clock.now_ms()):
                self._fence_floor = max(self._fence_floor, lease.fence)
                del self._claims[RUN_LEASE_PREFIX + run_id]

    def list_runs(self, query: RunQuery = _EVERY_RUN) -> list[RunSummary]:
        with self._mutex:
            entries = list(self._runs.items())
        return select((loads_record(text, where=f"run {i!r}") for i, (text, _) in entries), query)

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        with self._mutex:
            outcome = lock_rules.acquire(
                self._claims.get(key),
                holder,
                ttl_ms,
                now_ms=self.clock.now_ms(),
                token=uuid.uuid4().hex,
                fence_floor=self._fence_floor,
            )
            if isinstance(outcome, lock_rules.Refused):
                return LockHeld(holder=outcome.holder)
            self._claims[key] = state = outcome.state
            assert state.token is not None
            return LockAcquired(token=state.token, fence=state.fence)

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        with self._mutex:
            renewed = lock_rules.renew(
                self._claims.get(key), token, ttl_ms, now_ms=self.clock.now_ms()
            )
            if renewed is None:
                return False
            self._claims[key] = renewed
            return True

    def release_lock(self, key: str, token: str) -> None:
        check_id(key, "lock key")
        with self._mutex:
            released = lock_rules.release(self._claims.get(key), token)
            if released is not None:
                self._claims[key] = released

    def break_lock(self, key: str) -> LockHolder | None:
        check_id(key, "lock key")
        with self._mutex:
            current = self._claims.get(key)
            broken = lock_rules.break_claim(current)
            if broken is None or current is None:
                return None
            self._claims[key] = broken
            return current.holder

    def list_locks(self, *, run_id: str | None = None) -> list[LockEntry]:
        with self._mutex:
            claims = sorted(self._claims.items())
        return [
            LockEntry(key=key, holder=state.holder, expires_at=state.expires_at, fence=state.fence)
            for key, state in claims
            if state.holder is not None
            and state.expires_at is not None
            and (run_id is None or state.holder.run_id == run_id)
        ]
