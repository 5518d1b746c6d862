"""Pins the public surface: an API change must show up as a diff here."""

from __future__ import annotations

import zuke

EXPECTED = [
    "Build", "BuildDefinitionError", "Conflict", "Context", "CorruptRecordError",
    "DurationError", "GraphError", "LockAcquired", "LockConflictError", "LockError",
    "LockHeld", "LockHolder", "LockInfo", "LockSettings", "Outcome",
    "Parameter", "ParameterError", "RunError", "RunNotFoundError", "RunQuery", "RunResult",
    "Signal", "StateError", "StateHandle", "StateStore", "StoreUnavailableError", "StoredRun",
    "Target", "TargetBuilder", "TargetFailedError", "TargetTimeoutError", "UnsafeIdError",
    "UsageError", "Written", "ZukeError", "__version__", "execute", "lock_key", "parameter",
    "run", "target",
]  # fmt: skip


def test_all_is_pinned_and_sorted() -> None:
    assert zuke.__all__ == EXPECTED
    assert sorted(zuke.__all__) == zuke.__all__


def test_every_exported_name_exists() -> None:
    missing = [name for name in zuke.__all__ if not hasattr(zuke, name)]
    assert missing == []


def test_every_error_shares_one_root() -> None:
    errors = [getattr(zuke, n) for n in zuke.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, zuke.ZukeError) for e in errors)
