"""``cancel_run``: the library function behind ``zuke cancel``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from zuke import LockAcquired, LockHeld, LockHolder, RunNotFoundError, UnsafeIdError
from zuke._clock import ManualClock
from zuke.runs import ForeignRunError, cancel_run
from zuke.state._protocol import Conflict, Written
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunRecord, TargetRecord

HOLDER = LockHolder(actor="owner", run_id="run-1", since="2026-01-01T00:00:00.000Z")
OTHER = LockHolder(actor="other", run_id="run-2", since="2026-01-01T00:00:00.000Z")


def running_run(
    store: MemoryStateStore, *, lease_ttl_ms: int = 60_000, **changes: object
) -> RunRecord:
    """A running run holding its lease and ``deploy-api``; ``store.clock`` passing the
    lease's TTL makes its owner "gone"."""
    lease = store.acquire_lock("zuke-run-run-1", HOLDER, lease_ttl_ms)
    lock = store.acquire_lock("deploy-api", HOLDER, 60_000)
    assert isinstance(lease, LockAcquired) and isinstance(lock, LockAcquired)
    record = RunRecord(
        id="run-1", build="Release", root_target="deploy", status="running", actor="owner",
        created_at="2026-01-01T00:00:00.000Z", updated_at="2026-01-01T00:00:00.000Z",
        targets={
            "build": TargetRecord(status="succeeded"),
            "deploy": TargetRecord(status="running"),
            "verify": TargetRecord(status="pending"),
        },
        locks={"zuke-run-run-1": lease.token, "deploy-api": lock.token},
        build_id="acme/app",
    )  # fmt: skip
    record = replace(record, **changes)  # type: ignore[arg-type]
    assert isinstance(store.create_run(record), Written)
    return record


def test_a_run_whose_owner_is_gone_is_settled_cancelled_and_its_live_claims_left() -> None:
    """Item 11: a claim within its TTL is released by its holder only; a gone owner may be
    paused, not dead, so its lock lapses at its TTL (an operator breaks it sooner)."""
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    running_run(store, lease_ttl_ms=1_000)
    clock.advance(1_001)  # the owner stopped renewing: its lease can be taken
    result = cancel_run(store, "run-1", actor="ops", clock=clock, compensations="skip")
    assert (result.status, result.noop, result.owner) == ("cancelled", False, None)
    assert result.released == [] and result.left == ["deploy-api"]
    assert "Left to lapse at their TTL: deploy-api." in result.summary()
    assert any("zuke locks break deploy-api" in w for w in result.warnings)
    [entry] = store.list_locks()
    assert entry.key == "deploy-api" and entry.expires_at > clock.now_ms()  # still its holder's
    found = store.get_run("run-1")
    assert found is not None
    record = found.record
    assert record.status == "cancelled" and record.locks == {}
    assert {n: t.status for n, t in record.targets.items()} == {
        "build": "succeeded", "deploy": "failed", "verify": "skipped",
    }  # fmt: skip
    assert record.targets["deploy"].error == "cancelled by ops"
    assert record.events[-1].tool == "cancel" and record.events[-1].actor == "ops"
    assert not isinstance(store.acquire_lock("deploy-api", OTHER, 1000), LockAcquired)
    assert isinstance(store.acquire_lock("zuke-run-run-1", OTHER, 1000), LockAcquired)
    clock.advance(60_000)  # the lock's own TTL: now the next acquirer takes it
    assert isinstance(store.acquire_lock("deploy-api", OTHER, 1000), LockAcquired)


def test_a_live_owner_is_only_asked_to_stop_and_keeps_its_claims() -> None:
    store = MemoryStateStore()
    running_run(store)
    result = cancel_run(store, "run-1", actor="ops", compensations="skip")
    assert (result.status, result.noop, result.owner) == ("cancelling", False, "owner")
    assert result.released == []
    assert "marked cancelling; its owner (owner) is stopping it" in result.summary()
    found = store.get_run("run-1")
    assert found is not None
    record = found.record
    assert (record.status, record.intended_terminal) == ("cancelling", "cancelled")
    assert record.targets["deploy"].status == "running"  # the owner settles its own targets
    assert record.events[-1].tool == "cancel" and record.events[-1].actor == "ops"
    # Never freed under a live holder: a second deploy cannot start beside the first.
    assert isinstance(store.acquire_lock("deploy-api", OTHER, 1000), LockHeld)
    assert isinstance(store.acquire_lock("zuke-run-run-1", OTHER, 1000), LockHeld)


def test_cancel_waits_for_the_live_owner_to_finish_stopping() -> None:
    store = MemoryStateStore()
    running_run(store)
    polls: list[float] = []

    def owner_finishes(seconds: float) -> None:  # the owner, seen from the canceller's poll
        polls.append(seconds)
        found = store.get_run("run-1")
        assert found is not None and found.record.status == "cancelling"
        done = replace(found.record, status="cancelled", locks={})
        assert isinstance(store.put_run(done, expected_version=found.version), Written)

    result = cancel_run(
        store, "run-1", actor="ops", wait_ms=30_000, sleep=owner_finishes, compensations="skip"
    )
    assert (result.status, result.owner, len(polls)) == ("cancelled", "owner", 1)
    assert "cancelled by its owner (owner)" in result.summary()


def test_claims_missing_from_the_record_are_found_through_the_store() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    running_run(store, lease_ttl_ms=1_000, locks={})  # a client that dropped the locks field
    clock.advance(1_001)
    result = cancel_run(store, "run-1", actor="ops", clock=clock, compensations="skip")
    assert result.status == "cancelled" and result.released == []
    assert result.left == ["deploy-api"]  # no token here: named, and left to its TTL
    assert "Left to lapse at their TTL: deploy-api." in result.summary()


def test_cancelling_a_finished_run_is_a_noop_that_adds_nothing() -> None:
    store = MemoryStateStore()
    running_run(store, status="succeeded")
    result = cancel_run(store, "run-1", actor="ops", compensations="skip")
    assert (result.status, result.noop, result.released) == ("succeeded", True, [])
    found = store.get_run("run-1")
    assert found is not None and found.record.events == ()
    assert isinstance(store.acquire_lock("deploy-api", OTHER, 1000), LockHeld)


def test_an_unknown_or_unsafe_run_id_is_an_error() -> None:
    store = MemoryStateStore()
    with pytest.raises(RunNotFoundError, match='no run "nope"'):
        cancel_run(store, "nope", actor="ops")
    with pytest.raises(UnsafeIdError):
        cancel_run(store, "../../etc/passwd", actor="ops")


def test_a_run_of_another_build_is_refused() -> None:
    store = MemoryStateStore()
    running_run(store)
    with pytest.raises(ForeignRunError, match='belongs to build "acme/app", not "acme/web"'):
        cancel_run(store, "run-1", actor="ops", origin="acme/web", compensations="skip")
    with pytest.raises(ForeignRunError, match="is a run of Release, not of Deploy"):
        cancel_run(store, "run-1", actor="ops", build_name="Deploy", compensations="skip")
    found = store.get_run("run-1")
    assert found is not None and found.record.status == "running"


def test_a_missing_origin_on_either_side_does_not_decide() -> None:
    store = MemoryStateStore()
    running_run(store, build_id=None)
    assert (
        cancel_run(store, "run-1", actor="ops", origin="acme/web", compensations="skip").status
        == "cancelling"
    )


class RacingStore(MemoryStateStore):
    """The owner writes between the canceller's read and its write, once."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.raced = False

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        if not self.raced:
            self.raced = True
            found = self.get_run(run_id)
            assert found is not None
            owner_write = replace(
                found.record,
                targets={**found.record.targets, "deploy": TargetRecord(status="succeeded")},
            )
            super().put_run(owner_write, expected_version=found.version)
        return super().append_run(run_id, delta, expected_version=expected_version)


def test_a_conflicting_write_is_retried_on_the_fresh_record() -> None:
    clock = ManualClock()
    store = RacingStore(clock)
    running_run(store, lease_ttl_ms=1_000)
    clock.advance(1_001)
    result = cancel_run(store, "run-1", actor="ops", clock=clock, compensations="skip")
    found = store.get_run("run-1")
    assert result.status == "cancelled" and found is not None and store.raced
    # the owner's settlement landed first and is kept, not overwritten as "failed"
    assert found.record.targets["deploy"].status == "succeeded"


def test_an_owner_that_dies_while_asked_to_stop_is_taken_over() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    running_run(store, lease_ttl_ms=5_000)

    def owner_dies(seconds: float) -> None:
        clock.advance(5_001)  # no more renewals: its lease lapses

    result = cancel_run(
        store,
        "run-1",
        actor="ops",
        clock=clock,
        wait_ms=60_000,
        sleep=owner_dies,
        compensations="skip",
    )
    assert (result.status, result.owner, result.released) == ("cancelled", None, [])
    assert result.left == ["deploy-api"]  # within its TTL: left to lapse
    found = store.get_run("run-1")
    assert found is not None and found.record.status == "cancelled"
    # asked, taken over, then the walk's summary
    assert [e.tool for e in found.record.events] == ["cancel", "cancel", "cancel"]
