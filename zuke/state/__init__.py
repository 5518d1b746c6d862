"""Durable run state: the store protocol, records, stores, the writer and locks."""

from zuke.state._protocol import (
    Conflict,
    JournalingStateStore,
    LockAcquired,
    LockEntry,
    LockHeld,
    LockHolder,
    RunQuery,
    StateStore,
    StoredRun,
    Written,
)

__all__ = [
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
]
