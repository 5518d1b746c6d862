"""Reaping in the sweep: a held lease is left alone; a free one is returned, settled or finished."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.runs.support import HOUR, Harness, release_build
from zuke import LockAcquired, LockHolder
from zuke._clock import ManualClock, iso
from zuke.state._protocol import lease_key
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunStatus
from zuke.state.update import update_run

TTL = 1_000


def abandoned(
    *,
    status: RunStatus = "running",
    deadline: str | None = None,
    intended: RunStatus | None = None,
    env: dict[str, str] | None = None,
) -> tuple[Harness, list[Any], str]:
    """A run that got past its gate and died in ``promote``, holding ``deploy-api``."""
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[Any] = []
    h = Harness(release_build(store, calls, deadline=deadline), store, clock, env=dict(env or {}))
    run_id = h.start().run_id
    holder = LockHolder("ci", run_id, iso(clock.now_ms()))
    lease = store.acquire_lock(f"zuke-run-{run_id}", holder, TTL)
    lock = store.acquire_lock("deploy-api", holder, TTL)
    assert isinstance(lease, LockAcquired) and isinstance(lock, LockAcquired)

    def died(record: Any) -> RunDelta:
        rows = dict(record.targets)
        rows["approve"] = replace(rows["approve"], status="succeeded", waiting_for=None)
        rows["promote"] = replace(rows["promote"], status="running")
        return RunDelta(
            updated_at=record.updated_at,
            status=status,
            targets=rows,
            intended_terminal=intended,
            locks={f"zuke-run-{run_id}": lease.token, "deploy-api": lock.token},
        )

    update_run(store, run_id, died)
    calls.clear()
    return h, calls, run_id


def test_a_run_whose_lease_is_held_is_left_alone_even_past_its_deadline() -> None:
    h, calls, run_id = abandoned(deadline="1m")
    lease = f"zuke-run-{run_id}"
    h.clock.advance(HOUR)
    # The holder is alive: it renewed its lease a moment ago.
    token = h.record(run_id).locks[lease]
    assert h.store.renew_lock(lease, token, TTL)
    before = h.store.get_run(run_id)
    assert h.sweep().entries == []  # a sweep of everything does not mention it
    [entry] = h.sweep(run_id).entries
    assert (entry.action, entry.result) == ("left-alone", "running")
    assert "held by ci" in (entry.detail or "")
    assert h.store.get_run(run_id) == before and calls == []


def test_a_run_whose_holder_is_gone_is_returned_to_suspended_and_resumed_in_one_sweep() -> None:
    h, calls, run_id = abandoned()
    h.clock.advance(TTL + 1)
    report = h.sweep()
    assert [(e.action, e.result) for e in report.entries] == [
        ("reaped", "suspended"),
        ("resumed", "succeeded"),
    ]
    assert report.counts()["reaped"] == 1 and report.ok
    assert calls == [("promote", None, "api")]
    record = h.record(run_id)
    [reap] = [e for e in record.events if e.tool == "reap"]
    assert "returned to suspended" in (reap.detail or "")
    # The gone holder's claims had lapsed with its lease: the record forgets them; nobody
    # released them (the store lists an expired claim until an acquirer takes it).
    assert record.locks == {}
    assert all(e.expires_at <= h.clock.now_ms() for e in h.store.list_locks())
    assert h.sweep().entries == []  # a second sweep: nothing to do


def test_a_gone_holders_lock_within_its_ttl_keeps_the_run_from_being_reaped_until_it_lapses() -> (
    None
):
    """Item 11: the lease lapsed, but the lock the holder took (a longer TTL) has not: the
    holder may be paused, not dead. The run is left alone, and reaped once the lock lapses."""
    h, calls, run_id = abandoned()
    holder = LockHolder("ci", run_id, iso(h.clock.now_ms()))
    key = lease_key(run_id)
    h.store.break_lock("deploy-api")  # the same holder took it with an hour's TTL
    longer = h.store.acquire_lock("deploy-api", holder, HOUR)
    assert isinstance(longer, LockAcquired) and key != "deploy-api"
    update_run(h.store, run_id, lambda r: RunDelta(updated_at=r.updated_at,
                                                   locks={"deploy-api": longer.token}))  # fmt: skip
    h.clock.advance(TTL + 1)  # the lease lapsed; the lock did not
    before = h.store.get_run(run_id)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("left-alone", "running")
    assert "deploy-api" in (entry.detail or "") and "zuke locks break" in (entry.detail or "")
    assert h.store.get_run(run_id) == before and calls == []
    [live] = [e for e in h.store.list_locks() if e.key == "deploy-api"]
    assert live.expires_at > h.clock.now_ms()  # never released by the reaper
    h.clock.advance(HOUR)  # now it lapsed
    assert [(e.action, e.result) for e in h.sweep().entries] == [
        ("reaped", "suspended"),
        ("resumed", "succeeded"),
    ]


def test_a_gone_run_past_its_deadline_is_settled_failed() -> None:
    h, calls, run_id = abandoned(deadline="30m")
    h.clock.advance(HOUR)
    report = h.sweep()
    [entry] = report.entries
    assert (entry.action, entry.result) == ("reaped", "failed")
    assert not report.ok
    record = h.record(run_id)
    assert record.status == "failed" and record.intended_terminal == "failed"
    assert h.statuses(run_id) == {
        "deploy": "succeeded", "approve": "succeeded", "promote": "failed",
        "lint": "succeeded", "release": "skipped",
    }  # fmt: skip
    assert record.targets["promote"].error == "abandoned past the run's deadline"
    assert h.store.list_locks() == [] and calls == []


def test_a_gone_run_past_its_deadline_whose_graph_differs_is_only_returned_to_suspended() -> None:
    h, calls, run_id = abandoned(deadline="30m")
    h.clock.advance(HOUR)

    def smoke(self: Any, t: Any) -> Any:
        return t.executes(lambda: None)

    def promote(self: Any, t: Any) -> Any:
        return t.depends_on(self.approve, self.smoke).executes(lambda: None)

    from zuke import target

    changed = release_build(
        h.store, calls, deadline="30m", extra={"smoke": target(smoke), "promote": target(promote)}
    )
    report = h.sweep(build=changed)
    assert [(e.action, e.result) for e in report.entries] == [
        ("reaped", "suspended"),
        ("failed", "suspended"),  # the resume refuses the changed graph
    ]
    assert "--force-graph" in (report.entries[1].detail or "")
    assert h.record(run_id).status == "suspended"


def test_a_run_left_cancelling_is_finished_to_its_intended_terminal() -> None:
    h, _, run_id = abandoned(status="cancelling", intended="failed")
    h.clock.advance(TTL + 1)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("reaped", "failed")
    record = h.record(run_id)
    assert record.status == "failed"
    assert record.targets["promote"].status == "failed"
    assert record.targets["release"].status == "skipped"
    assert h.store.list_locks() == []


def test_a_run_left_cancelling_without_an_intent_ends_cancelled() -> None:
    h, _, run_id = abandoned(status="cancelling")
    h.clock.advance(TTL + 1)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("reaped", "cancelled")
    assert h.record(run_id).status == "cancelled"


def test_a_foreign_builds_abandoned_run_is_not_reaped() -> None:
    h, calls, run_id = abandoned(env={"ZUKE_BUILD_ID": "acme/app"})
    h.clock.advance(TTL + 1)
    other = Harness(h.build, h.store, h.clock, env={"ZUKE_BUILD_ID": "acme/web"})
    before = h.store.get_run(run_id)
    assert other.sweep().entries == []
    assert h.store.get_run(run_id) == before and calls == []


def test_a_run_with_another_root_target_is_not_reaped() -> None:
    h, _, run_id = abandoned()
    update_run(h.store, run_id, lambda r: RunDelta(updated_at=r.updated_at))
    h.clock.advance(TTL + 1)
    from zuke import target

    def ship(self: Any, t: Any) -> Any:
        return t.executes(lambda: None)

    # The same class name, but a build with no target called `release`.
    other = release_build(h.store, [], extra={"release": None, "ship": target(ship)})
    assert Harness(other, h.store, h.clock).sweep().entries == []
    assert h.record(run_id).status == "running"


def test_a_held_cancelling_run_is_left_alone_and_reported_as_cancelling() -> None:
    h, _, run_id = abandoned(status="cancelling")
    [entry] = h.sweep(run_id).entries
    assert (entry.action, entry.result) == ("left-alone", "cancelling")
    assert h.record(run_id).status == "cancelling"
