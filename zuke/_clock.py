"""Time, injected: the engine and the stores read the clock through this seam.

Tests pass a :class:`ManualClock` so TTLs and deadlines are tested without sleeps.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        self._now += ms


#: the last second :func:`iso` formatted, and its text up to the milliseconds
_last_second: tuple[int, str] = (-1, "")


def iso(ms: int) -> str:
    """ISO-8601 UTC with millisecond precision, e.g. ``2026-01-02T03:04:05.678Z``.

    A run stamps every transition (and the record again), mostly within the
    same second: the second's text is formatted once (``strftime`` is the
    cost) and kept; only the milliseconds change.
    """
    global _last_second
    second, millis = divmod(ms, 1000)
    cached = _last_second  # one read: another thread may replace it meanwhile
    if cached[0] != second:
        stamp = datetime.fromtimestamp(second, tz=UTC)
        cached = (second, stamp.strftime("%Y-%m-%dT%H:%M:%S."))
        _last_second = cached
    return f"{cached[1]}{millis:03d}Z"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def parse_iso(text: str) -> int | None:
    """Epoch ms of an ISO-8601 stamp, or ``None`` if it does not parse."""
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    # Exact integer arithmetic: ``int(stamp.timestamp() * 1000)`` goes through a float and
    # truncates, so some instants came out a millisecond early.
    return (stamp - _EPOCH) // _ONE_MS


SYSTEM_CLOCK = SystemClock()
