"""Held claims — a target's lock or the run's own lease — kept alive by a heartbeat.

The heartbeat is a task on the event loop, so it keeps beating while a
synchronous body is busy on its worker thread. It renews at half the TTL
(never more often than every 100 ms). Only an explicit refusal from the store
means the claim is lost — someone else holds it now — and calls ``on_lost``;
an error (a mutex timeout, an HTTP 503, a DNS blip) says nothing about who
holds the claim, so it is reported and retried on the next beat.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from zuke._errors import StateError
from zuke.state._protocol import (
    RUN_LEASE_PREFIX,
    LockAcquired,
    LockHeld,
    LockHolder,
    StateStore,
)

MIN_BEAT_S = 0.1
LEASE_TTL_MS = 60_000
LEASE_ACQUIRE_BACKOFF_S = (0.25, 0.5, 1.0, 2.0)


def lease_key(run_id: str) -> str:
    """The key of a run's own lease."""
    return RUN_LEASE_PREFIX + run_id


def beat_interval_s(ttl_ms: int) -> float:
    return max(MIN_BEAT_S, ttl_ms / 2000)


@dataclass
class Claim:
    """A lock this process holds, with its heartbeat."""

    store: StateStore
    key: str
    token: str
    fence: int
    ttl_ms: int
    on_lost: Callable[[Claim], None]
    warn: Callable[[str], None]

    def __post_init__(self) -> None:
        self.lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Claim:
        self._task = asyncio.ensure_future(self._beat())
        return self

    async def _beat(self) -> None:
        interval = beat_interval_s(self.ttl_ms)
        while True:
            await asyncio.sleep(interval)
            try:
                renewed = await asyncio.to_thread(
                    self.store.renew_lock, self.key, self.token, self.ttl_ms
                )
            except Exception as exc:
                self.warn(f"state: renewing {self.key} failed ({exc}); retrying")
                continue
            if not renewed:
                self.lost.set()
                self.on_lost(self)
                return

    async def stop(self) -> None:
        """Stop the heartbeat without releasing (the claim is lost, or left to lapse)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def release(self) -> None:
        """Stop the heartbeat and give the claim back; errors are reported, not raised."""
        await self.stop()
        if self.lost.is_set():
            return
        try:
            await asyncio.to_thread(self.store.release_lock, self.key, self.token)
        except Exception as exc:
            self.warn(f"state: releasing {self.key} failed ({exc}); it lapses after its TTL")


async def acquire(
    store: StateStore, key: str, holder: LockHolder, ttl_ms: int
) -> LockAcquired | LockHeld:
    """One acquisition attempt, off the event loop."""
    return await asyncio.to_thread(store.acquire_lock, key, holder, ttl_ms)


async def acquire_lease(
    store: StateStore,
    run_id: str,
    holder: LockHolder,
    *,
    ttl_ms: int,
    backoff_s: tuple[float, ...] | None = None,
) -> LockAcquired | LockHeld:
    """Take a run's lease, retrying a store that errors (not one that answers "held")."""
    delays = LEASE_ACQUIRE_BACKOFF_S if backoff_s is None else backoff_s
    for delay in (*delays, None):
        try:
            return await acquire(store, lease_key(run_id), holder, ttl_ms)
        except StateError as exc:
            if delay is None:
                raise StateError(
                    f"Could not claim run {run_id}: the state store did not answer ({exc}). "
                    "Check that it is reachable, or unset the state configuration to run "
                    "without durable state."
                ) from exc
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
