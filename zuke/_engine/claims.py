"""Held claims — a target's lock or the run's own lease — kept alive by a heartbeat.

Each claim's heartbeat runs on a thread of its own, not on the event loop nor
on asyncio's default executor: store calls, acquisitions and bodies share
those, and a dozen slow acquisitions once delayed a lease renewal past its
expiry. Nothing else runs on a heartbeat thread, so nothing can starve it.

The schedule (:func:`next_beat_delay_ms`, pure, so tests drive it with an
injected clock): beat at half the TTL (never more often than every 100 ms),
counted from the last *successful* renewal, so a slow renewal does not push
the next one late. After a failed renewal, retry soon — a quarter of the
interval at most 1 s, doubling, capped at half the interval — not a whole
interval later. Only an explicit refusal from the store means the claim is
lost (someone else holds it now) and calls ``on_lost``; an error (a mutex
timeout, an HTTP 503, a DNS blip) says nothing about who holds the claim, so
it is reported and retried. A renewal's own request timeout is the store's
business; the HTTP store keeps it well under half the TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._errors import StateError
from zuke.state._protocol import (
    LockAcquired,
    LockHeld,
    LockHolder,
    StateStore,
)
from zuke.state._protocol import lease_key as lease_key  # its home; zuke cancel needs no engine

MIN_BEAT_S = 0.1
LEASE_TTL_MS = 60_000
LEASE_ACQUIRE_BACKOFF_S = (0.25, 0.5, 1.0, 2.0)
#: The first retry after a failed renewal comes at most this soon (then doubles).
RETRY_FIRST_MS = 1000


def beat_interval_s(ttl_ms: int) -> float:
    return max(MIN_BEAT_S, ttl_ms / 2000)


def next_beat_delay_ms(*, ttl_ms: int, last_success_ms: int, now_ms: int, failures: int) -> int:
    """How long to wait before the next renewal.

    ``failures`` counts the renewals that failed since ``last_success_ms``.
    """
    interval = int(beat_interval_s(ttl_ms) * 1000)
    if failures == 0:
        return max(0, last_success_ms + interval - now_ms)
    first = min(RETRY_FIRST_MS, interval // 4)
    backoff: int = first << (failures - 1)  # doubling
    return max(1, min(backoff, interval // 2))


@dataclass
class Claim:
    """A lock this process holds, with its heartbeat thread."""

    store: StateStore
    key: str
    token: str
    fence: int
    ttl_ms: int
    on_lost: Callable[[Claim], None]
    warn: Callable[[str], None]
    clock: Clock = SYSTEM_CLOCK
    #: waits up to the given seconds; True means "stop now" (tests inject one)
    wait: Callable[[float], bool] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.lost = asyncio.Event()
        self.renewals = 0
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Claim:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self.beat, name=f"zuke-heartbeat-{self.key}", daemon=True
        )
        self._thread.start()
        return self

    def beat(self) -> None:
        """The heartbeat loop (the thread's body; tests call it directly)."""
        wait = self.wait or self._stopped.wait
        last_success = self.clock.now_ms()
        failures = 0
        while True:
            delay = next_beat_delay_ms(
                ttl_ms=self.ttl_ms,
                last_success_ms=last_success,
                now_ms=self.clock.now_ms(),
                failures=failures,
            )
            if wait(delay / 1000) or self._stopped.is_set():
                return
            attempted_at = self.clock.now_ms()
            try:
                renewed = self.store.renew_lock(self.key, self.token, self.ttl_ms)
            except Exception as exc:  # any failure to answer says nothing about the holder
                failures += 1
                self._to_loop(self.warn, f"state: renewing {self.key} failed ({exc}); retrying")
                continue
            if self._stopped.is_set():
                return  # released meanwhile: a refusal now means nothing
            if not renewed:
                self._to_loop(self._lose)
                return
            self.renewals += 1
            last_success, failures = attempted_at, 0

    def _lose(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.lost.set()
        self.on_lost(self)

    def _to_loop(self, fn: Callable[..., None], *args: object) -> None:
        loop = self._loop
        if loop is None:
            fn(*args)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
            loop.call_soon_threadsafe(fn, *args)

    async def stop(self) -> None:
        """Stop the heartbeat without releasing (the claim is lost, or left to lapse).

        A renewal in flight may still land; its answer is ignored from now on.
        """
        self._stopped.set()

    async def release(self) -> None:
        """Stop the heartbeat and give the claim back; errors are reported, not raised."""
        lost = self.lost.is_set()
        await self.stop()
        if lost:
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
