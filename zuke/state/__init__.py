"""Durable run state: the store protocol, records, stores, locks and the one CAS loop."""

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
