"""The one owner of a run's transitions (``zuke.runs.lifecycle``), path by path.

Each test names the issue-15 finding it pins: a transition decides on the
record read under the run's lease, re-decides on conflict, proves its lease
before it writes, and never moves a run's clocks by looking at it.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from tests.runs.support import Harness, RecordingStore, approval, release_build
from zuke._clock import ManualClock, iso, parse_iso
from zuke._errors import AlreadyResumedError, DurationError, LeaseLostError
from zuke._redact import Redactor
from zuke._waits import NotYet, WaitContext, WaitTrigger
from zuke.runs.cancel import cancel_run
from zuke.runs.lifecycle import take
from zuke.runs.resume import pushed_deadline
from zuke.runs.signals import SignalDelivery
from zuke.state._protocol import LockAcquired, LockHolder, lease_key
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunEvent, RunRecord, WaitingFor
from zuke.state.update import update_run

HOUR = 3_600_000


def parked(**kwargs: Any) -> tuple[Harness, list[Any], str]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[Any] = []
    h = Harness(release_build(store, calls, **kwargs), store, clock)
    run_id = h.start().run_id
    calls.clear()
    return h, calls, run_id


def hold_of(h: Harness, run_id: str, actor: str = "sweep") -> Any:
    return asyncio.run(take(h.store, run_id, actor=actor, clock=h.clock, env={}, held="{actor}"))


def occupy(h: Harness, run_id: str, actor: str) -> None:
    """Another process holds the run's lease."""
    h.store.acquire_lock(
        lease_key(run_id), LockHolder(actor, run_id, iso(h.clock.now_ms())), 60_000
    )


# -- item 16: parked time is recorded, not derived from updatedAt --------------------


def test_parked_at_is_set_when_the_run_suspends_and_an_audit_write_does_not_move_it() -> None:
    h, _, run_id = parked(deadline="72h")
    record = h.record(run_id)
    assert record.parked_at is not None and record.status == "suspended"
    h.clock.advance(71 * HOUR)
    look = RunEvent(at=iso(h.clock.now_ms()), tool="show_run", actor="mcp")
    # Even a writer that moves updatedAt (an old client) does not move parkedAt.
    update_run(
        h.store, run_id, lambda r: RunDelta(updated_at=iso(h.clock.now_ms()), events=(look,))
    )
    after = h.record(run_id)
    assert after.parked_at == record.parked_at and after.updated_at != record.updated_at
    pushed = pushed_deadline(after, h.clock.now_ms())
    assert pushed is not None and record.deadline_at is not None
    credit = (parse_iso(pushed) or 0) - (parse_iso(record.deadline_at) or 0)
    assert credit == 71 * HOUR  # nothing taken off


def test_a_resume_at_hour_71_keeps_the_whole_run_deadline_credit() -> None:
    h, _, run_id = parked(deadline="72h")
    before = h.record(run_id).deadline_at
    assert before is not None
    h.clock.advance(71 * HOUR)
    update_run(h.store, run_id, lambda r: RunDelta(updated_at=iso(h.clock.now_ms())))
    h.resume(run_id, "approved")
    after = h.record(run_id).deadline_at
    assert after is not None
    assert (parse_iso(after) or 0) - (parse_iso(before) or 0) == 71 * HOUR


# -- item 12: a timeout is decided again on the fresh record -------------------------


class PassesTheGateOnFirstWrite(RecordingStore):
    """Another process passes the gate the moment the settling write is first attempted."""

    def __init__(self, inner: Any, gate: str) -> None:
        super().__init__(inner)
        self.gate = gate
        self.sneaked = False

    def append_run(self, run_id: str, delta: Any, *, expected_version: str) -> Any:
        if not self.sneaked and delta.status == "failed":
            self.sneaked = True

            def passed(r: RunRecord) -> RunDelta:
                row = r.targets[self.gate]
                return RunDelta(
                    updated_at=r.updated_at,
                    targets={self.gate: type(row)(status="succeeded", meta=row.meta)},
                )

            update_run(self.inner, run_id, passed)
        return super().append_run(run_id, delta, expected_version=expected_version)


def test_a_timeout_settled_from_a_record_that_moved_fails_nothing() -> None:
    h, _, run_id = parked(gate=approval(timeout="1h"))
    h.clock.advance(HOUR + 1)
    sneaky = PassesTheGateOnFirstWrite(h.store, "approve")
    with pytest.raises(AlreadyResumedError, match="changed while its timeout was settled"):
        Harness(h.build, sneaky, h.clock).resume(run_id)
    record = h.record(run_id)
    assert record.status == "suspended"  # not failed: the gate had passed meanwhile
    assert record.targets["approve"].status == "succeeded"
    assert h.store.list_locks() == []


# -- item 13: a gate check never writes back rows read before it ---------------------


class Slow(WaitTrigger):
    """A trigger during whose check another writer changes the row's state (an append)."""

    def __init__(self, during: Any) -> None:
        self.during = during

    @property
    def descriptor(self) -> str:
        return "slow"

    def check(self, ctx: WaitContext) -> Any:
        self.during()
        return NotYet("not yet")


def test_a_gate_check_never_reverts_a_gate_that_moved_during_it_to_waiting() -> None:
    """Item 13: the rows a check writes are decided on the fresh record, so a gate another
    writer passed while the trigger ran is left passed (it used to go back to waiting)."""
    box: dict[str, Any] = {}

    def during() -> None:
        def passed(r: RunRecord) -> RunDelta:
            row = replace(r.targets["approve"], status="succeeded", waiting_for=None)
            return RunDelta(updated_at=r.updated_at, targets={"approve": row})

        update_run(box["store"], box["run_id"], passed)

    def gate(build: Any, s: Any) -> Any:
        return s.on(Slow(during))

    h, _, run_id = parked(gate=gate)
    box.update(run_id=run_id, store=h.store)
    [entry] = h.sweep().entries
    assert entry.action == "skipped-held" and "moved while its gates were checked" in (
        entry.detail or ""
    )
    row = h.record(run_id).targets["approve"]
    assert row.status == "succeeded" and row.waiting_for is None


class Hooked(WaitTrigger):
    """A trigger whose ``on_timeout`` hook outlasts the run lease's TTL (in store time)."""

    def __init__(self, during: Any) -> None:
        self.during = during

    @property
    def descriptor(self) -> str:
        return "hooked"

    def check(self, ctx: WaitContext) -> Any:
        return NotYet("not yet")

    async def on_timeout(self, ctx: WaitContext) -> None:
        await self.during()


def test_an_on_timeout_hook_runs_under_a_renewed_lease_and_a_second_sweep_waits() -> None:
    """Item 15: the hook is user code; the lease is heartbeated while it runs, so a second
    sweep finds the run held instead of calling the hook again."""
    hooks: list[str] = []
    box: dict[str, Any] = {}

    async def during() -> None:
        h, run_id = box["h"], box["run_id"]
        hooks.append("hook")
        h.clock.advance(5_000)  # the hook takes longer than the lease's TTL (2 s)...
        key = lease_key(run_id)

        def renewed() -> bool:  # ...and the lease is renewed meanwhile
            return any(
                e.key == key and e.expires_at > h.clock.now_ms() for e in h.store.list_locks()
            )

        for _ in range(400):  # a poll with a deadline (10 s), not a sleep as synchronisation
            if renewed():
                break
            await asyncio.sleep(0.025)
        assert renewed(), "the lease was not renewed while the hook ran"
        second = await asyncio.to_thread(h.sweep)
        box["second"] = [(e.action, e.result) for e in second.entries]

    def gate(build: Any, s: Any) -> Any:
        return s.on(Hooked(during)).timeout("1h")

    h, _, run_id = parked(gate=gate)
    h.env["ZUKE_RUN_LEASE_TTL"] = "2s"
    box.update(h=h, run_id=run_id)
    h.clock.advance(HOUR + 1)
    [entry] = h.sweep().entries
    assert entry.action == "timed-out" and hooks == ["hook"]
    assert box["second"] == [("skipped-held", "suspended")]


def test_a_holder_paused_since_it_read_the_run_calls_no_on_timeout_hook_after_a_takeover() -> None:
    """Issue 25 §7 (the simulation's seed 899): a resumer took the lease, was paused past its
    TTL, then timed the gate out and called the hook a second time after the sweep that took
    the run over had. The hook is an external call no compare-and-swap guards: the lease is
    proven before it, and the paused holder stops."""
    from zuke.runs.lifecycle import load_for
    from zuke.runs.timeouts import settle_timeout

    hooks: list[str] = []

    async def during() -> None:
        hooks.append("hook")

    def gate(build: Any, s: Any) -> Any:
        return s.on(Hooked(during)).timeout("1h")

    h, _, run_id = parked(gate=gate)
    h.clock.advance(HOUR + 1)
    hold = hold_of(h, run_id, actor="paused")
    asyncio.run(hold.claim.halt())  # the process is paused: its heartbeat does not run,
    assert hold.claim.since_ms is not None  # and its last proof (real time) is a TTL old
    hold.claim.since_ms -= hold.ttl_ms
    h.clock.advance(hold.ttl_ms + 1)  # paused past the lease's TTL ...
    taken = h.store.acquire_lock(  # ... and another process took the run over
        lease_key(run_id), LockHolder("sweep-2", run_id, iso(h.clock.now_ms())), 60_000
    )
    assert isinstance(taken, LockAcquired)
    run = h.options()
    loaded = load_for(h.build, hold.record, run)
    with pytest.raises(LeaseLostError, match="taken over"):
        asyncio.run(settle_timeout(loaded, hold, "approve", run, actor="paused", notes=[]))
    assert hooks == []


def test_a_sweep_finding_the_run_held_skips_it_naming_its_real_status() -> None:
    """A trigger that must persist before its external call needs the lease; another
    holder has it, so the sweep skips the run — its status as it is, not "running"."""
    calls: list[str] = []

    class Dispatches(WaitTrigger):
        @property
        def descriptor(self) -> str:
            return "dispatch"

        async def check(self, ctx: WaitContext) -> Any:
            ctx.state.set({"marker": "m-1"})
            await ctx.persist()
            calls.append("dispatch")
            return NotYet("dispatched")

    def gate(build: Any, s: Any) -> Any:
        return s.on(Dispatches())

    h, _, run_id = parked(gate=gate)
    calls.clear()
    occupy(h, run_id, "bob")
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("skipped-held", "suspended")
    assert calls == []  # its persist() found the run held: the dispatch was not made


# -- item 20: a paused holder cannot write; a canceller does not pull a held run --------


def test_a_holder_whose_lease_was_taken_over_cannot_write() -> None:
    h, _, run_id = parked()
    hold = hold_of(h, run_id)
    hold.claim.since_ms -= hold.ttl_ms  # last proven a TTL ago: a renewal must prove it now
    h.store.break_lock(lease_key(run_id))  # paused past its TTL: someone else has it now
    h.store.acquire_lock(
        lease_key(run_id), LockHolder("bob", run_id, iso(h.clock.now_ms())), 60_000
    )
    before = h.store.get_run(run_id)
    with pytest.raises(LeaseLostError, match="taken over"):
        asyncio.run(hold.write(lambda r: RunDelta(updated_at=r.updated_at, status="running")))
    assert h.store.get_run(run_id) == before


def test_a_holder_paused_between_its_proof_and_its_write_does_not_land() -> None:
    """Found by the simulation (seed 1376 at 4bbc214): a sweep proved its lease, was paused
    past the lease's stop point, and its write landed after another sweep took over. Each
    attempt is now made only while its proof is fresh."""
    h, _, run_id = parked()
    hold = hold_of(h, run_id)
    asyncio.run(hold.claim.stop())  # no heartbeat: the pause is the test's clock

    class Paused:
        """Each reading is a lease's TTL later: the holder sleeps between proof and write."""

        def __init__(self) -> None:
            self.now: int = hold.since_ms

        def now_ms(self) -> int:
            self.now += int(hold.ttl_ms)
            return self.now

    hold.claim.clock = Paused()
    before = h.store.get_run(run_id)
    with pytest.raises(LeaseLostError, match="paused"):
        asyncio.run(hold.write(lambda r: RunDelta(updated_at=r.updated_at, status="running")))
    assert h.store.get_run(run_id) == before


def test_a_holder_that_cannot_reach_the_store_to_renew_does_not_write() -> None:
    h, _, run_id = parked()
    hold = hold_of(h, run_id)
    hold.claim.since_ms -= hold.ttl_ms  # last proven a TTL ago: a renewal must prove it now

    class Down:
        def __getattr__(self, name: str) -> Any:
            return getattr(h.store, name)

        def renew_lock(self, *args: Any) -> bool:
            raise ConnectionError("store unreachable")

    hold.store = Down()
    with pytest.raises(LeaseLostError, match="could not renew its lease"):
        asyncio.run(hold.write(lambda r: RunDelta(updated_at=r.updated_at, status="running")))
    assert h.record(run_id).status == "suspended"


def test_a_cancel_does_not_pull_a_suspended_run_out_from_under_its_resumer() -> None:
    h, _, run_id = parked()
    h.store.acquire_lock(
        lease_key(run_id), LockHolder("sweep", run_id, iso(h.clock.now_ms())), 60_000
    )
    sleeps: list[float] = []

    def resumer_lets_go(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:  # the resumer gave up and released the lease
            [entry] = h.store.list_locks(run_id=run_id)
            h.store.break_lock(entry.key)

    result = cancel_run(h.store, run_id, actor="ops", clock=h.clock, build=h.build, env={},
                        sleep=resumer_lets_go)  # fmt: skip
    assert result.status == "cancelled"
    statuses = [e.tool for e in h.record(run_id).events]
    assert "cancel" in statuses
    assert len(sleeps) == 2  # it waited while the run was held and suspended


def test_every_takeover_uses_the_run_lease_ttl_the_store_names() -> None:
    h, _, run_id = parked()
    h.store.default_lease_ttl_ms = 600_000  # type: ignore[attr-defined]
    hold = hold_of(h, run_id)
    [entry] = h.store.list_locks(run_id=run_id)
    assert entry.expires_at - h.clock.now_ms() == 600_000
    asyncio.run(hold.release())


# -- item 18: every setting parses before the commit point ---------------------------


@pytest.mark.parametrize("name", ["ZUKE_CANCEL_POLL", "ZUKE_RUN_LEASE_TTL"])
def test_a_bad_setting_refuses_a_resume_before_the_run_moves(name: str) -> None:
    h, calls, run_id = parked()
    before = h.store.get_run(run_id)
    h.env[name] = "banana"
    with pytest.raises(DurationError, match=name):
        h.resume(run_id, "approved")
    with pytest.raises(DurationError, match=name):
        h.sweep()
    assert h.store.get_run(run_id) == before and calls == [] and h.store.list_locks() == []


# -- items 21, 22, 25: one answer per delivery; typos refused; secrets masked ----------


def test_the_same_delivery_twice_answers_success_both_times() -> None:
    h, calls, run_id = parked()
    first = h.resume(run_id, "approved", {"by": "qa"})
    second = h.resume(run_id, "approved", {"by": "qa"})
    assert first.ok and second.ok and second.action == "already-delivered"
    assert calls.count("lint") <= 1


def test_a_secret_in_a_signals_data_is_stored_redacted() -> None:
    h, _, run_id = parked()
    h.env["TOKEN"] = "hunter2-secret-value"
    h.resume(run_id, "approved", {"token": "hunter2-secret-value", "by": "qa"})
    stored = h.record(run_id).signals["approved"]
    assert stored.data == {"token": "[redacted]", "by": "qa"}
    # its default id is hashed from the masked data: it cannot confirm a guess at the secret
    raw = SignalDelivery("approved", {"token": "hunter2-secret-value", "by": "qa"})
    assert stored.id != raw.key() and stored.id == raw.key(Redactor(["hunter2-secret-value"]))


def test_a_signal_for_a_gate_not_reached_yet_is_stored_with_a_note() -> None:
    h, _, run_id = parked()

    def early(r: RunRecord) -> RunDelta:
        row = r.targets["approve"]
        return RunDelta(updated_at=r.updated_at, targets={"approve": type(row)()})

    update_run(h.store, run_id, early)  # the gate is pending: not reached
    h.store.acquire_lock(
        lease_key(run_id), LockHolder("bob", run_id, iso(h.clock.now_ms())), 60_000
    )
    outcome = h.resume(run_id, "approved")
    assert outcome.action == "delivered" and "approved" in h.record(run_id).signals
    waiting = WaitingFor(trigger="signal:approved")
    assert waiting.trigger.endswith("approved")
