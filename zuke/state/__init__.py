"""Durable run state: the store protocol, records, stores, locks and the one CAS loop.

The protocol's names load on first use (:pep:`562`), so importing one store
module (``zuke.state.records``, ``zuke.state.postgres``) does not create the
protocol's classes too.
"""

from __future__ import annotations

import importlib

#: ``typing.TYPE_CHECKING`` without importing typing (8 ms here); type checkers read it alike
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

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

if not TYPE_CHECKING:  # hidden from type checkers, so a misspelt name stays an error there

    def __getattr__(name: str) -> Any:
        if name not in __all__:  # a submodule (`from zuke.state import _journal`) or a typo
            raise AttributeError(f"module 'zuke.state' has no attribute {name!r}")
        value = getattr(importlib.import_module("zuke.state._protocol"), name)
        globals()[name] = value
        return value
