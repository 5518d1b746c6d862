"""A walker that lost the run's lease without knowing it (paused past its TTL: its
heartbeat was never refused) must not break the live walker's cancel lock nor take the
record over: it proves ownership first (a renewal now, and a record naming its token)."""

from __future__ import annotations

from tests.engine.walk_support import (
    AT,
    LEASE_TTL_MS,
    RUN,
    chain_build,
    events,
    plan_of,
    record_of,
    running_run,
    take_lease,
    walk_now,
)
from zuke._clock import ManualClock
from zuke._engine.compensation import COMPENSATE_EVENT
from zuke._engine.walk import WalkResult, cancel_lock_key
from zuke.state._protocol import LockAcquired, LockHolder, lease_key
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunRecord
from zuke.state.update import Updated, update_run


def cancel_lock(store: MemoryStateStore) -> list[tuple[str, int]]:
    """Who holds the run's cancel lock, and its fence."""
    return [(e.holder.actor, e.fence) for e in store.list_locks() if e.key == cancel_lock_key(RUN)]


def test_a_walker_whose_lease_lapsed_does_not_break_the_live_walkers_lock() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    ran: list[tuple[str, str]] = []
    stale: dict[str, object] = {}
    walking = ["sweep"]

    def undo(name: str) -> None:
        ran.append((name, walking[-1]))
        if name == "unmigrate" and not stale:
            # The stale walker wakes up while the live one is mid-compensation.
            stale["result"] = None
            before = (store.get_run(RUN), cancel_lock(store))
            walking.append("owner")
            stale["result"] = walk_now(store, clock, owner, plan, "owner")
            walking.pop()
            stale["same"] = before == (store.get_run(RUN), cancel_lock(store))
            stale["lock"] = cancel_lock(store)

    plan = plan_of(chain_build(undo))
    owner = take_lease(store, clock, "owner")
    running_run(store, owner)
    clock.advance(LEASE_TTL_MS + 1)  # the owner stalls past its lease; nothing told it so
    sweeper = take_lease(store, clock, "sweep")
    result = walk_now(store, clock, sweeper, plan, "sweep")

    lost = stale["result"]
    assert isinstance(lost, WalkResult) and lost.stopped is not None
    assert "could not prove it still holds the run's lease" in lost.stopped
    assert lost.compensated == []
    assert stale["same"] is True  # the stale walker wrote nothing, and broke no lock
    assert stale["lock"] == [("sweep", 1)]
    assert ran == [("unmigrate", "sweep"), ("undeploy", "sweep")]  # each once, by the live one
    assert result.status == "cancelled" and result.stopped is None
    assert result.compensated == ["migrate → unmigrate", "deploy → undeploy"]
    record = record_of(store)
    assert record.status == "cancelled"
    assert [t for _, t, _ in events(record, COMPENSATE_EVENT)] == ["migrate", "deploy"]


class LateAnswers(MemoryStateStore):
    """A store whose answer to one renewal arrives late: it said yes when asked, but by the
    time the walker hears it, its lease has lapsed and another walker took the run."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.late_token: str | None = None
        self.meanwhile = lambda: None

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        answer = super().renew_lock(key, token, ttl_ms)
        if token == self.late_token:
            self.late_token = None
            self.meanwhile()
        return answer


def test_a_walker_paused_after_its_renewal_does_not_take_the_record_over() -> None:
    clock = ManualClock()
    store = LateAnswers(clock)
    ran: list[str] = []
    plan = plan_of(chain_build(ran.append))
    owner = take_lease(store, clock, "owner")
    running_run(store, owner)
    taken: dict[str, RunRecord] = {}

    def another_walker_takes_the_run() -> None:
        clock.advance(LEASE_TTL_MS + 1)
        sweeper = take_lease(store, clock, "sweep")
        named = RunDelta(updated_at=AT, locks={lease_key(RUN): sweeper.token})
        assert isinstance(update_run(store, RUN, lambda record: named), Updated)
        holder = LockHolder(actor="sweep", run_id=RUN, since="now")
        assert isinstance(store.acquire_lock(cancel_lock_key(RUN), holder, 30_000), LockAcquired)
        taken["record"] = record_of(store)

    store.late_token, store.meanwhile = owner.token, another_walker_takes_the_run
    result = walk_now(store, clock, owner, plan, "owner")
    assert result.stopped is not None and "could not prove" in result.stopped
    assert ran == []
    assert record_of(store) == taken["record"]  # names the new walker's token, untouched
    assert cancel_lock(store) == [("sweep", 1)]  # not broken


def test_a_walker_paused_past_its_stop_point_starts_no_compensation_even_if_renewable() -> None:
    """Found by the simulation (seeds 8993, 10478, 10818): a walker paused past its lease's
    stop point woke while nobody had taken the run, so the store still renewed its lease —
    but its heartbeat was already stopping what the lease guards, so the compensation was
    refused, recorded as failed, and the run settled without it. A lease past its own stop
    point proves nothing: the walk stops, and the next walk (a sweep's) compensates."""
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    ran: list[str] = []
    plan = plan_of(chain_build(ran.append))
    owner = take_lease(store, clock, "owner")
    running_run(store, owner)
    clock.advance(LEASE_TTL_MS - 1)  # paused: past the stop point (TTL less its margin)
    result = walk_now(store, clock, owner, plan, "owner")
    assert result.stopped is not None and ran == []
    assert record_of(store).status != "cancelled"  # left for a walk that holds its lease
    assert events(record_of(store), "compensating", "compensate") == []
