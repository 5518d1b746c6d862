"""A compensation walker's proof that it still owns the run (a renewal of the run's lease
sent now, and the record naming its lease token) and its compare-and-swap writes — kept
apart from the walk's steps (:mod:`zuke._engine.walk`), which prove before each one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from zuke._clock import Clock, iso
from zuke._engine.claims import Claim, stop_at_ms
from zuke._redact import Redactor
from zuke.state._protocol import StateStore, lease_key
from zuke.state.records import TERMINAL_STATUSES, RunDelta, RunEvent, RunRecord, RunStatus
from zuke.state.update import GaveUp, Unchanged, update_run


class Walker:
    """One walker's hold on the run: its lease, and the proofs it gives before each step."""

    def __init__(
        self, store: StateStore, run_id: str, lease: Claim, actor: str, clock: Clock,
        redactor: Redactor,
    ) -> None:  # fmt: skip
        self.redactor = redactor
        self.store = store
        self.run_id = run_id
        self.lease = lease
        self.actor = actor
        self.clock = clock
        #: when the last renewal that proved the lease ours was sent (epoch ms)
        self.proven_at: int | None = None

    def now(self) -> str:
        return iso(self.clock.now_ms())

    def ours(self, record: RunRecord) -> bool:
        return record.locks.get(lease_key(self.run_id)) == self.lease.token

    def fresh(self) -> bool:
        """The last proof is under half a TTL old: the lease cannot have lapsed since, with
        half a TTL to spare for clocks that run at different rates."""
        age = self.clock.now_ms() - (self.proven_at or 0)
        return self.proven_at is not None and age < self.lease.ttl_ms // 2

    def lapsed(self) -> bool:
        """The lease's own stop point passed without a renewal (this process was paused):
        its heartbeat is about to stop what it guards, so nothing more may start under it,
        even if the store would still renew a claim nobody took meanwhile."""
        lease = self.lease
        since = lease.since_ms if lease.since_ms is not None else lease.clock.now_ms()
        return lease.clock.now_ms() >= stop_at_ms(ttl_ms=lease.ttl_ms, since_ms=since)

    async def prove(self) -> bool:
        """Renew the run's lease right now; whether the store said it is still ours.

        ``lease.lost`` is set only on a refusal its heartbeat saw: a walker paused past
        its TTL still believes it holds the lease, so only a renewal proves it. A store
        that cannot answer raises (the caller writes nothing more).
        """
        if self.lease.lost.is_set() or self.lapsed():
            return False
        sent = self.clock.now_ms()
        key, token, ttl = lease_key(self.run_id), self.lease.token, self.lease.ttl_ms
        if not await asyncio.to_thread(self.store.renew_lock, key, token, ttl):
            return False
        self.proven_at = sent
        return True

    async def take_record(self) -> bool:
        """Prove the lease ours, then make the record name our token: a walker that took a
        dead holder's lease writes its token over the holder's (``locks`` only). Whether the
        record (if still unsettled) now names us."""
        if not await self.prove():
            return False

        def adopt(fresh: RunRecord) -> RunDelta | None:
            if fresh.status in TERMINAL_STATUSES or self.ours(fresh) or not self.fresh():
                return None  # settled (nothing to take); already ours; or the proof is stale
            return RunDelta(
                updated_at=fresh.updated_at, locks={lease_key(self.run_id): self.lease.token}
            )

        outcome = await asyncio.to_thread(update_run, self.store, self.run_id, adopt)
        return outcome.record.status in TERMINAL_STATUSES or self.ours(outcome.record)

    async def proven_owner(self) -> bool:
        """A renewal now, and the fresh record names our lease token."""
        if not await self.prove():
            return False
        found = await asyncio.to_thread(self.store.get_run, self.run_id)
        return found is not None and self.ours(found.record) and self.fresh()

    def status(self) -> RunStatus:
        found = self.store.get_run(self.run_id)
        return found.record.status if found else "cancelling"

    async def write(self, change: Callable[[RunRecord], RunDelta | None]) -> RunRecord | None:
        """One compare-and-swap; the record written, or None if it did not apply."""
        outcome = await asyncio.to_thread(update_run, self.store, self.run_id, change)
        if isinstance(outcome, (Unchanged, GaveUp)):
            return None
        return outcome.record

    def event(self, tool: str, detail: str, *, outcome: str = "ok", **args: str) -> RunEvent:
        return RunEvent(at=self.now(), tool=tool, actor=self.actor, detail=detail,
                        outcome=outcome, args=args)  # type: ignore[arg-type]  # fmt: skip
