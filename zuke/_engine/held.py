"""Run-held locks (``s.held_until(target)``): a lock the run keeps across a gate.

A lock normally ends with its target's body. A run-held one is taken the same
way, but the scheduler's release after the body only hands it to the run
(:class:`RunHeldLocks`); it is given back once ``until`` has finished (the
guard of ``until`` returns a :class:`UntilDone` whose release the scheduler
calls after that target, however it ended), or when the run ends, whichever
comes first.

While the run is suspended nobody heartbeats it, so on suspend each lock is
renewed once with a TTL that lasts past the latest deadline of the gates the
run waits at, plus the lock's own TTL (:func:`suspended_ttl_ms`); a gate
without a deadline keeps it for the longest TTL a store accepts, until a way
out of the run (a timeout, cancel, reap or ``zuke locks break --force``)
releases it. The token stays in the record's ``locks`` and the lock's row in
``heldLocks``, so the process that resumes the run adopts it: it renews it
with the token before any target runs (:meth:`RunHeldLocks.prove`); a lock
that is gone meanwhile (expired and taken, or broken) fails the run rather
than letting ``until`` run unguarded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from zuke._clock import SYSTEM_CLOCK, iso, parse_iso
from zuke._engine.claims import Claim, Guarded
from zuke._engine.hooks import Held
from zuke._engine.writer import RunStateWriter
from zuke._errors import LockError
from zuke.state._protocol import LockAcquired, LockHolder, StateStore
from zuke.state.lock_rules import MAX_TTL_MS
from zuke.state.records import HeldLock, RunRecord, WaitingFor

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


class HeldLockLostError(LockError):
    """A run-held lock was gone when the run came back to it (expired and taken, broken)."""


def suspended_ttl_ms(held: HeldLock, waiting: Mapping[str, WaitingFor], now_ms: int) -> int:
    """How long a suspended run keeps a run-held lock: past the latest deadline of the gates
    it waits at plus the lock's TTL (the time to notice); the longest TTL a store accepts
    when a gate has no deadline (it may wait for ever: a way out of the run releases it)."""
    deadlines = [parse_iso(w.deadline) if w.deadline else None for w in waiting.values()]
    if not deadlines or any(d is None for d in deadlines):
        return MAX_TTL_MS
    latest = max(d for d in deadlines if d is not None)
    return max(held.ttl_ms, min(MAX_TTL_MS, latest - now_ms + held.ttl_ms))


def holder_note(record: RunRecord | None, key: str) -> str:
    """What a loser is told beyond the holder: the run keeps it until a target, and where
    it waits (``held by run R, suspended at gate `qa` since …``)."""
    if record is None or key not in record.held:
        return ""
    until = record.held[key].until
    if record.status == "suspended":
        gates = sorted(n for n, row in record.targets.items() if row.status == "waiting")
        where = ", ".join(f"`{g}`" for g in gates) or "a gate"
        since = record.parked_at or record.updated_at
        return (
            f" It is held by run {record.id}, suspended at gate {where} since {since}; "
            f"the run keeps it until `{until}` has finished."
        )
    return f" Run {record.id} ({record.status}) keeps it until `{until}` has finished."


@dataclass
class Kept:
    """One run-held lock this process holds (or adopted and has not yet proven)."""

    row: HeldLock
    claim: Claim
    proven: bool = True


class RunHeldLocks:
    """The run-held locks of one run in this process."""

    def __init__(
        self,
        store: StateStore,
        writer: RunStateWriter,
        *,
        warn: Callable[[str], None],
        guards: Callable[[], Guarded],
        on_lost: Callable[[str], None],
        finished: Callable[[str], bool] = lambda target: False,
    ) -> None:
        self.store = store
        self.writer = writer
        self.warn = warn
        self._guards = guards
        self._on_lost = on_lost
        #: whether a target ran to its end (succeeded or failed) by the record
        self._finished = finished
        self.kept: dict[str, Kept] = {}
        #: keys whose claim was lost while kept: their rows leave the record with the run's end
        self.lost_keys: set[str] = set()
        self._proof: asyncio.Future[None] | None = None
        #: reaches a body on the loop's thread when a refusal stops the run (the
        #: scheduler's ``interrupt_from_thread``, set once the scheduler exists)
        self.tell: Callable[[], None] | None = None

    def claim(self, key: str, token: str, fence: int, ttl_ms: int, since_ms: int | None) -> Claim:
        """A claim that, once run-held, stops the whole run when lost."""
        claim = Claim(self.store, key, token, fence, ttl_ms,
                      on_lost=lambda claim: self._lost(claim), warn=self.warn, since_ms=since_ms,
                      guards=self._guards())  # fmt: skip
        claim.tell = lambda: self._tell(key)
        return claim

    def _tell(self, key: str) -> None:
        if self.tell is not None and key in self.kept:  # its loss stops the run
            self.tell()

    def _lost(self, claim: Claim) -> None:
        kept = self.kept.pop(claim.key, None)
        if kept is None:
            return
        self.writer.note_lock(claim.key, None)
        # The row stays until the run ends here (release): if this process's lease lapses
        # too, the run's next holder finds the kept lock gone (no token) and fails the run
        # rather than run `until` unguarded.
        self.lost_keys.add(claim.key)
        why = claim.lapsed or "the store refused its renewal (it was broken or taken over)"
        self._on_lost(
            f'lock "{claim.key}", which the run keeps from `{kept.row.target}` until '
            f"`{kept.row.until}` has finished, was lost ({why}); the run stops so that two "
            "holders never overlap"
        )

    def keep(self, row: HeldLock, claim: Claim) -> None:
        """The lock was just taken at ``row.target``: the run keeps it (recorded with it)."""
        self.kept[claim.key] = Kept(row, claim)
        self.writer.note_held(claim.key, row)

    def adopt(self, record: RunRecord) -> None:
        """A resumed run's locks, from its record: proven (renewed) before any target runs."""
        for key, row in record.held.items():
            token = record.locks.get(key, "")  # none: broken (zuke locks break --force)
            claim = self.claim(key, token, row.fence, row.ttl_ms, since_ms=None)
            self.kept[key] = Kept(row, claim, proven=False)

    async def prove(self) -> None:
        """Renew every adopted lock with its token, once, before the first target runs;
        a lock that is gone fails the run (:class:`HeldLockLostError`)."""
        if self._proof is None:
            self._proof = asyncio.ensure_future(self._prove())
        await asyncio.shield(self._proof)

    async def _prove(self) -> None:
        # An ``until`` that finished while the run was parked (a gate a sweep passed): the
        # run no longer needs the lock, so it is given back now rather than at its end.
        done = [k for k, kept in self.kept.items() if self._finished(kept.row.until)]
        await self.release(done)
        for key, kept in list(self.kept.items()):
            if kept.proven:
                continue
            claim = kept.claim
            started = SYSTEM_CLOCK.now_ms()
            renewed: bool | None = False
            why = "it expired while the run was suspended and was taken, or was broken"
            if not claim.token:
                why = "it was broken while the run was suspended (zuke locks break --force)"
            else:
                try:
                    renewed = await asyncio.to_thread(
                        self.store.renew_lock, key, claim.token, claim.ttl_ms
                    )
                except Exception as exc:
                    renewed, why = None, f"it could not be renewed ({exc})"
            if renewed:
                claim.since_ms = started
                kept.proven = True
                claim.start()
                continue
            self.kept.pop(key, None)
            self.writer.note_lock(key, None)
            self.writer.note_held(key, None)
            message = (
                f'lock "{key}", which the run keeps from `{kept.row.target}` until '
                f"`{kept.row.until}` has finished, is no longer this run's: {why}; the run "
                "fails rather than go on unguarded"
            )
            self._on_lost(message)
            raise HeldLockLostError(message)

    def ending_at(self, target: str) -> list[str]:
        return [key for key, kept in self.kept.items() if kept.row.until == target]

    def fence(self, key: str) -> int | None:
        kept = self.kept.get(key)
        return None if kept is None else kept.claim.fence

    async def release(self, keys: list[str] | None = None) -> None:
        """Give back ``keys`` (default: all) and record that the run no longer keeps them."""
        if keys is None:
            for key in sorted(self.lost_keys):
                self.writer.note_held(key, None)
            self.lost_keys.clear()
        for key in list(self.kept) if keys is None else keys:
            kept = self.kept.pop(key, None)
            if kept is None:
                continue
            if kept.proven:
                await kept.claim.release()
            elif kept.claim.token:  # adopted, never renewed here: still the run's to give back
                await kept.claim.stop()
                try:
                    await asyncio.to_thread(self.store.release_lock, key, kept.claim.token)
                except Exception as exc:
                    self.warn(f"state: releasing {key} failed ({exc}); it lapses after its TTL")
            self.writer.note_lock(key, None)
            self.writer.note_held(key, None)

    async def suspend(self, waiting: Mapping[str, WaitingFor], now_ms: int) -> None:
        """Nobody heartbeats a suspended run: renew each lock once to outlast its gates."""
        for key, kept in list(self.kept.items()):
            claim = kept.claim
            await claim.halt()
            ttl = suspended_ttl_ms(kept.row, waiting, now_ms)
            try:
                renewed = await asyncio.to_thread(self.store.renew_lock, key, claim.token, ttl)
            except Exception as exc:
                self.warn(
                    f"state: lock {key} could not be extended for the suspension ({exc}); it "
                    f"lapses at its TTL unless the run resumes first"
                )
                continue
            if not renewed:
                self.warn(
                    f"state: lock {key} was no longer this run's when it suspended; the "
                    "resume will fail rather than go on without it"
                )

    async def stop(self) -> None:
        """Stop heartbeating (the run's lease was lost): the locks lapse unless adopted."""
        for kept in self.kept.values():
            await kept.claim.stop()
        self.kept.clear()


class UntilDone:
    """The guard of ``until`` (:class:`~zuke._engine.hooks.Held`): after that target, the
    run's locks held until it are given back — unless it parked (a gate waiting)."""

    def __init__(
        self, locks: RunHeldLocks, target: str, own: Held | None, finished: Callable[[], bool]
    ) -> None:
        self.locks = locks
        self.target = target
        self.own = own
        self.lost = own.lost if own is not None else asyncio.Event()
        self._finished = finished

    def loss_message(self) -> str:
        return self.own.loss_message() if self.own is not None else ""

    async def release(self) -> None:
        if self.own is not None:
            await self.own.release()
        if self._finished():
            await self.locks.release(self.locks.ending_at(self.target))


def rekey(
    store: StateStore, record: RunRecord, now_ms: int, *, actor: str
) -> dict[str, tuple[HeldLock, str] | None]:
    """A reaper's hand-over of a gone owner's run-held locks to the run, waiting again.

    The gone owner may be stalled, not dead, and still hold the token; so each lock gets a
    new token and fence (released, then taken again for the run, to outlast the gates):
    a stalled owner that wakes finds its renewal refused, and a resource that fences
    refuses its stale fence. Returns each key's new row and token, or ``None`` when the
    lock was gone or taken meanwhile: the record keeps the old row and the resume fails the
    run rather than go on unguarded.
    """
    waiting = {
        n: row.waiting_for
        for n, row in record.targets.items()
        if row.status == "waiting" and row.waiting_for is not None
    }
    out: dict[str, tuple[HeldLock, str] | None] = {}
    holder = LockHolder(actor, record.id, iso(now_ms))  # the reaper takes it, for the run
    for key, row in sorted(record.held.items()):
        token = record.locks.get(key)
        out[key] = None
        if token is None:
            continue
        try:
            store.release_lock(key, token)
            taken = store.acquire_lock(key, holder, suspended_ttl_ms(row, waiting, now_ms))
        except Exception:
            continue  # unrenewed, it lapses; the resume says so
        if isinstance(taken, LockAcquired):
            out[key] = (replace(row, fence=taken.fence), taken.token)
    return out


def holder_of(store: StateStore, holder: LockHolder, key: str) -> str:
    """:func:`holder_note` for ``holder``'s run, read now; empty when it cannot be read."""
    try:
        found = store.get_run(holder.run_id)
    except Exception:
        return ""
    return holder_note(found.record if found is not None else None, key)
