"""Held claims — a target's lock or the run's own lease — kept alive by a heartbeat.

Each claim's heartbeat runs on a thread of its own, not on the event loop nor
on asyncio's default executor: store calls, acquisitions and bodies share
those, and a dozen slow acquisitions once delayed a lease renewal past its
expiry. Nothing else runs on a heartbeat thread, so nothing can starve it.

**Failing closed.** The store's expiry of a claim is at least the start of
its last successful renewal (or acquisition) plus the TTL, by the store's
clock. A holder that cannot prove it still holds — no renewal succeeded —
stops what the claim guards at that start plus the TTL less a safety margin
(:func:`~zuke._lock_settings.safety_margin_ms`: 10 %, at least 0.5 s), so
nothing of it runs when the store can give the claim to someone else. Then
the claim *lapses*: ``lost`` is set and ``on_lost`` called, as for a refusal;
what it guards (:class:`Guarded`) is shut, an async body is cancelled, and a
synchronous body — a thread cannot be stopped — ends the process
(:func:`lapse_action`). An async body that is still running half the margin
later (it swallowed the cancellation, or blocks the event loop) ends it too.

The schedule (:func:`next_beat_delay_ms`, pure, so tests drive it with an
injected clock): beat at half of the TTL less the margin (never more often
than every 100 ms), counted from the last *successful* renewal's start, so a
slow renewal does not push the next one late. After a failed renewal, retry
soon — a quarter of the interval at most 1 s, doubling, capped at half the
interval — and never past the stop point. An explicit refusal from the store
means the claim is lost (someone else holds it now: it was broken or taken
over), and its user stops — a synchronous body is told through
``ctx.cancelled`` and waited for; an error (a mutex timeout, an HTTP 503, a
DNS blip) is reported and retried until the stop point. A renewal that has
not answered by the stop point counts as failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Literal

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._duration import format_duration, parse_duration
from zuke._engine.executor import BODIES
from zuke._engine.store_traits import local
from zuke._errors import StateError, StoreRefusedError, StoreUnavailableError
from zuke._lock_settings import check_claim_ttl, safety_margin_ms
from zuke.state._protocol import (
    LockAcquired,
    LockHeld,
    LockHolder,
    StateStore,
)
from zuke.state._protocol import lease_key as lease_key  # its home; zuke cancel needs no engine

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

MIN_BEAT_S = 0.1
LEASE_TTL_MS = 60_000


def lease_ttl_ms(env: Mapping[str, str], store: StateStore | None = None) -> int:
    """The run lease's TTL: ``ZUKE_RUN_LEASE_TTL``, else the store's own default, else 60 s.

    A store whose every write is costly (the GitHub branch store: a renewal is
    a commit) names its default in a positive int ``default_lease_ttl_ms``.
    A value too short to renew safely is a :class:`~zuke.DurationError` (exit 2).
    """
    raw = env.get("ZUKE_RUN_LEASE_TTL", "")
    if raw:
        what = "ZUKE_RUN_LEASE_TTL"
        return check_claim_ttl(parse_duration(raw, what=what), what)
    default = getattr(store, "default_lease_ttl_ms", None)
    if isinstance(default, int) and not isinstance(default, bool) and default > 0:
        return default
    return LEASE_TTL_MS


LEASE_ACQUIRE_BACKOFF_S = (0.25, 0.5, 1.0, 2.0)
#: The first retry after a failed renewal comes at most this soon (then doubles).
RETRY_FIRST_MS = 1000


def beat_interval_s(ttl_ms: int) -> float:
    return max(MIN_BEAT_S, (ttl_ms - safety_margin_ms(ttl_ms)) / 2000)


def stop_at_ms(*, ttl_ms: int, since_ms: int) -> int:
    """When a holder whose last successful renewal started at ``since_ms`` must have stopped."""
    return since_ms + ttl_ms - safety_margin_ms(ttl_ms)


LapseAction = Literal["end the process", "cancel", "nothing runs"]


def lapse_action(*, sync_running: int, async_running: int) -> LapseAction:
    """What a lapsed claim does about the bodies it guards that still run.

    A synchronous body runs on a thread, which nothing can stop: only ending
    the process does. An async body is cancelled (and the process ends if it
    has not returned half a margin later).
    """
    if sync_running:
        return "end the process"
    return "cancel" if async_running else "nothing runs"


@dataclass(frozen=True)
class Guarded:
    """The work a claim guards, so that the claim can fail closed."""

    #: shuts the work (nothing new starts) and counts what still runs: (sync, async)
    close: Callable[[], tuple[int, int]]
    #: waits up to the given seconds until nothing runs; whether nothing does
    idle: Callable[[float], bool]
    #: says the line and ends the process (:func:`zuke._engine.children.end_process`)
    end: Callable[[str], object]
    #: added to the line (what becomes of the run)
    note: str = ""


def guarding(
    run_id: str, scope: str | None, end: Callable[[str], object], note: str = ""
) -> Guarded:
    """What a claim of run ``run_id`` guards: its bodies in ``scope`` (a target; ``None``: all)."""
    return Guarded(
        close=lambda: BODIES.close(run_id, scope),
        idle=lambda timeout_s: BODIES.wait_idle(run_id, scope, timeout_s),
        end=end,
        note=note,
    )


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
    #: when the acquisition that granted the claim started (default: now); from then on,
    #: the start of the last successful renewal (what another holder of the same token
    #: — a resume adopting a lease — hands on)
    since_ms: int | None = None
    #: what the claim guards; ``None``: nothing to stop but the claim's user (``lost``)
    guards: Guarded | None = None
    #: how messages name the claim (default: ``lock "<key>"``)
    label: str = ""
    #: give the claim back on the loop's thread (a local store, the loop the run's alone:
    #: :func:`on_loop`), not through asyncio's executor, whose threads cost a start each
    release_here: bool = False

    def __post_init__(self) -> None:
        self.lost = asyncio.Event()
        self.renewals = 0
        self.since_ms = self.clock.now_ms() if self.since_ms is None else self.since_ms
        self.label = self.label or f'lock "{self.key}"'
        #: why the claim lapsed (no renewal succeeded in time); ``None`` if it did not
        self.lapsed: str | None = None
        self.late = False
        self._stopped = threading.Event()
        #: called on the heartbeat's thread after a refusal was handed to the loop
        #: (the scheduler's ``interrupt_from_thread``: the lease of a run whose body
        #: may run on the loop's thread)
        self.tell: Callable[[], None] | None = None
        #: set when the heartbeat loop has returned (no renewal of its own is in flight)
        self._exited = threading.Event()
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
        try:
            self._beat()
        finally:
            self._exited.set()

    def _beat(self) -> None:
        wait = self.wait or self._stopped.wait
        assert self.since_ms is not None
        since, failures = self.since_ms, 0
        why = "the heartbeat did not run in time (was the process paused or starved?)"
        while True:
            now = self.clock.now_ms()
            stop_at = stop_at_ms(ttl_ms=self.ttl_ms, since_ms=since)
            if now >= stop_at:
                self._lapse(why, now - since)
                return
            delay = next_beat_delay_ms(
                ttl_ms=self.ttl_ms, last_success_ms=since, now_ms=now, failures=failures
            )
            if wait(min(delay, stop_at - now) / 1000) or self._stopped.is_set():
                return
            attempted_at = self.clock.now_ms()
            if attempted_at >= stop_at:
                continue
            try:
                renewed = self._renew((stop_at - attempted_at) / 1000)
            except Exception as exc:  # any failure to answer says nothing about the holder
                failures, why = failures + 1, f"the last attempt: {exc or type(exc).__name__}"
                left = format_duration(max(0, stop_at - self.clock.now_ms()))
                self._to_loop(
                    self.warn,
                    f"state: renewing {self.key} failed ({exc}); retrying — what it guards "
                    f"stops in {left} unless a renewal succeeds",
                )
                continue
            if self._stopped.is_set():
                return  # released meanwhile: a refusal now means nothing
            if not renewed:
                self._to_loop(self._lose)
                if self.tell is not None:
                    self.tell()  # a body on the loop's thread cannot wait for the loop
                return
            self.renewals += 1
            since, failures = attempted_at, 0
            self.since_ms = since

    def _renew(self, timeout_s: float) -> bool:
        """One renewal; a :class:`TimeoutError` if it has not answered within ``timeout_s``.

        It runs on a thread of its own, so a hung request cannot hold the
        heartbeat past the stop point; its late answer is ignored.
        """
        answer: list[object] = []
        done = threading.Event()

        def call() -> None:
            try:
                answer.append(self.store.renew_lock(self.key, self.token, self.ttl_ms))
            except BaseException as exc:
                answer.append(exc)
            finally:
                done.set()

        threading.Thread(target=call, name=f"zuke-renew-{self.key}", daemon=True).start()
        if not done.wait(timeout_s):
            raise TimeoutError(f"no answer within {format_duration(timeout_s * 1000)}")
        result = answer[0]
        if isinstance(result, BaseException):
            raise result
        return bool(result)

    def _lapse(self, why: str, unproven_ms: int) -> None:
        """No renewal succeeded in time: stop what the claim guards (see the module doc)."""
        if self._stopped.is_set():
            return  # released meanwhile: what it guarded has returned
        self.lapsed = f"no renewal succeeded for {format_duration(unproven_ms)}; {why}"
        #: noticed only past the TTL (a paused process): another may hold the claim already
        self.late = unproven_ms >= self.ttl_ms
        guarded = self.guards
        if guarded is None:
            self._to_loop(self._lose)
            return
        sync_running, async_running = guarded.close()
        action = lapse_action(sync_running=sync_running, async_running=async_running)
        if action == "end the process":
            guarded.end(self._end_line("a synchronous body it guards cannot be stopped", guarded))
        self._to_loop(self._lose)  # cancels async bodies, stops the run
        if action == "cancel" and not guarded.idle(safety_margin_ms(self.ttl_ms) / 2000):
            guarded.end(self._end_line("an async body it guards did not stop when cancelled",
                                       guarded))  # fmt: skip

    def _end_line(self, cause: str, guarded: Guarded) -> str:
        when = (
            "as the store may have given it to another process already"
            if self.late
            else "before the store can give it to another process"
        )
        return (
            f"{self.label} could not be renewed ({self.lapsed}); {cause}, so this process "
            f"ends now (exit 3), {when}{guarded.note}"
        )

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

    async def halt(self) -> None:
        """Stop the heartbeat and wait (a renewal's bound at most) until it has returned, so
        that no renewal of its own lands after the caller's (a suspension's longer TTL)."""
        await self.stop()
        if self._thread is not None and not self._exited.is_set():
            await asyncio.to_thread(self._exited.wait, self.ttl_ms / 1000)

    async def release(self) -> None:
        """Stop the heartbeat and give the claim back; errors are reported, not raised."""
        lost = self.lost.is_set()
        await self.stop()
        if lost:
            return
        try:
            if self.release_here:
                self.store.release_lock(self.key, self.token)
            else:
                await asyncio.to_thread(self.store.release_lock, self.key, self.token)
        except Exception as exc:
            self.warn(f"state: releasing {self.key} failed ({exc}); it lapses after its TTL")


def on_loop(store: StateStore, loop_is_the_runs: bool) -> bool:
    """Whether the run's lease may be taken and given back, and its record created and
    ended, on the event loop's thread: the loop is the run's alone (``RunOptions.inline``:
    nothing else needs it before the first target or after the last; heartbeats run on
    threads of their own) and the store's calls are small and bounded
    (:func:`~zuke._engine.store_traits.local`). Otherwise they hop to asyncio's executor,
    whose first use starts two threads and a third to join them when the loop closes."""
    return loop_is_the_runs and local(store)


async def acquire(
    store: StateStore, key: str, holder: LockHolder, ttl_ms: int, *, here: bool = False
) -> LockAcquired | LockHeld:
    """One acquisition attempt, off the event loop (or on it: ``here``, see :func:`on_loop`)."""
    if here:
        return store.acquire_lock(key, holder, ttl_ms)
    return await asyncio.to_thread(store.acquire_lock, key, holder, ttl_ms)


async def acquire_lease(
    store: StateStore,
    run_id: str,
    holder: LockHolder,
    *,
    ttl_ms: int,
    backoff_s: tuple[float, ...] | None = None,
    here: bool = False,
) -> LockAcquired | LockHeld:
    """Take a run's lease, retrying a store that errors (not one that answers "held");
    ``here``: on the loop's thread (:func:`on_loop`)."""
    delays = LEASE_ACQUIRE_BACKOFF_S if backoff_s is None else backoff_s
    for delay in (*delays, None):
        try:
            return await acquire(store, lease_key(run_id), holder, ttl_ms, here=here)
        except StoreRefusedError:
            raise  # its message says what to do; asking again changes nothing
        except StateError as exc:
            if delay is None:  # one line: what was tried, the store's own words, what to check
                tried = f"{len(delays) + 1} attempts over {sum(delays):.1f}s"
                said = str(exc).rstrip(".")
                advice = "" if "Check " in said else (
                    ". Check that it is reachable, or unset the state configuration to run "
                    "without durable state"
                )  # fmt: skip
                raise StoreUnavailableError(
                    f"Could not claim run {run_id}: the state store did not answer "
                    f"({tried}): {said}{advice}."
                ) from exc
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
