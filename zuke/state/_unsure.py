"""Writes whose answer was lost for good, remembered so that the same write sent again is
known by the same key.

A store that retries (Postgres, the HTTP client) decides a lost answer by a
witness stored with the write: the version drawn for it, or an idempotency
key. Within one call that is enough. But a call can also fail outright after
its write went out (the server stayed away longer than the call waits): the
caller — the run's writer, retrying with backoff — then sends *the same
write again* (the same change, against the same version), in a new call.

:class:`UnsureWrites` is how the new call finds the old key: the store notes
a write that failed unsure (``note``), and a later call of the same write —
equal run, expected version and payload — gets its key back (``key``), so the
store looks at that write's witness before sending anything: landed is
``Written`` with the version it made, whatever landed after it; not landed
is sent again under the same key. A definite answer forgets it (``forget``).
It is small and per store object: at most :data:`RUNS` runs, each with at most
:data:`PER_RUN` writes, the oldest dropped first (a lost memory only costs
the look, never a wrong answer: the write then goes out under a new key,
as it did before this existed).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Generic, TypeVar

from zuke._errors import StoreUnavailableError

K = TypeVar("K")

RUNS = 64
PER_RUN = 4


class UnsureWriteError(StoreUnavailableError):
    """A write went out and its answer was lost for good: it may or may not have landed.
    The store remembers it (:class:`UnsureWrites`), so the same write sent again looks
    first."""

    #: the stored run (a ``StoredRun``) the write was sent against, set by ``update_run``
    #: when that was a record it re-read after a conflict: the caller's retry sends the
    #: same write against it — so the store finds the write's witness — not against the
    #: older record it knew, which would meet its own landed write as a conflict and
    #: apply the change twice
    based_on: Any = None


class UnsureWrites(Generic[K]):
    """``(target, expected, payload) -> key`` of writes that may or may not have landed."""

    def __init__(self) -> None:
        self._by_target: OrderedDict[str, list[tuple[str, object, K]]] = OrderedDict()
        self._lock = threading.Lock()

    def key(self, target: str, expected: str, payload: object) -> K | None:
        """The key of the same write, if one was noted (``payload`` compared by ``==``)."""
        with self._lock:
            for at, sent, key in self._by_target.get(target, ()):
                if at == expected and sent == payload:
                    return key
        return None

    def note(self, target: str, expected: str, payload: object, key: K) -> None:
        with self._lock:
            entries = [
                e for e in self._by_target.pop(target, []) if (e[0], e[1]) != (expected, payload)
            ]
            entries.append((expected, payload, key))
            self._by_target[target] = entries[-PER_RUN:]
            while len(self._by_target) > RUNS:
                self._by_target.popitem(last=False)

    def forget(self, target: str, expected: str, payload: object) -> None:
        with self._lock:
            entries = self._by_target.get(target)
            if not entries:
                return
            kept = [e for e in entries if (e[0], e[1]) != (expected, payload)]
            if kept:
                self._by_target[target] = kept
            else:
                del self._by_target[target]


__all__ = ["PER_RUN", "RUNS", "UnsureWriteError", "UnsureWrites"]
