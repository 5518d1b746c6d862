"""Validation of what callers hand a store: run ids, lock keys, lock TTLs.

An id becomes a file name in the filesystem store and a path segment in the
HTTP store, so it must not be able to name anything outside the store:
only ``[A-Za-z0-9._-]``, not empty, not ``.`` or ``..``, at most 200 characters.
"""

from __future__ import annotations

import re

from zuke._errors import UnsafeIdError

_SAFE = re.compile(r"[A-Za-z0-9._-]{1,200}")


def check_id(value: object, what: str = "run id") -> str:
    """Return ``value`` if it is a safe id, else raise :class:`UnsafeIdError` naming it."""
    if not isinstance(value, str) or not _SAFE.fullmatch(value) or value in (".", ".."):
        shown = repr(value)[:80]
        raise UnsafeIdError(
            f"state: unsafe {what} {shown}: use 1-200 characters from [A-Za-z0-9._-] "
            "(not '.' or '..')"
        )
    return value


def check_ttl(ttl_ms: object) -> int:
    """Return ``ttl_ms`` if it is a positive whole number of milliseconds, else raise."""
    if not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool) or ttl_ms <= 0:
        raise ValueError(f"state: lock ttl_ms must be a positive integer, got {ttl_ms!r}")
    return ttl_ms
