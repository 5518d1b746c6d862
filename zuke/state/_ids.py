"""Validation of what callers hand a store: run ids, lock keys, lock TTLs.

An id becomes a file name in the filesystem store and a path segment in the
HTTP store, so it must not be able to name anything outside the store:
only ``[A-Za-z0-9._-]``, not empty, not ``.`` or ``..``, at most 200 characters
(the filesystem store's file-name limit once its suffixes are added). A TTL is
a whole number of milliseconds from 1 to :data:`~zuke.state.lock_rules.MAX_TTL_MS`
(366 days). Every store, and ``zuke serve`` for its 400 answers, uses these
two functions, so the bounds and the messages are the same everywhere.
"""

from __future__ import annotations

import re

from zuke._errors import StateError, UnsafeIdError
from zuke.state.lock_rules import MAX_TTL_MS

MAX_ID_LENGTH = 200
_SAFE = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_ID_LENGTH}}}")


class LockTtlError(StateError, ValueError):
    """A lock TTL that is not a whole number of milliseconds from 1 to ``MAX_TTL_MS``."""


def check_id(value: object, what: str = "run id") -> str:
    """Return ``value`` if it is a safe id, else raise :class:`UnsafeIdError` naming it."""
    if not isinstance(value, str) or not _SAFE.fullmatch(value) or value in (".", ".."):
        shown = repr(value)[:80]
        raise UnsafeIdError(
            f"state: unsafe {what} {shown}: use 1-{MAX_ID_LENGTH} characters from "
            "[A-Za-z0-9._-] (not '.' or '..')"
        )
    return value


def check_ttl(ttl_ms: object) -> int:
    """Return ``ttl_ms`` if it is a whole number of milliseconds in bounds, else raise
    :class:`LockTtlError` (a ``StateError`` and a ``ValueError``)."""
    if not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool) or not 0 < ttl_ms <= MAX_TTL_MS:
        shown = repr(ttl_ms)[:40]
        raise LockTtlError(
            f"state: lock ttl_ms must be a whole number of milliseconds from 1 to "
            f"{MAX_TTL_MS} (366 days), got {shown}"
        )
    return ttl_ms
