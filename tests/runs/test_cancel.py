"""``cancel_run``: the library function behind ``zuke cancel``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from zuke import LockAcquired, LockHeld, LockHolder, RunNotFoundError, UnsafeIdError
from zuke._clock import ManualClock
from zuke.runs import ForeignRunError, cancel_run
from zuke.state._protocol import Conflict, Written
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunRecord, TargetRecord

HOLDER = LockHolder(actor="owner", run_id="run-1", since="2026-01-01T00:00:00.000Z")
OTHER = LockHolder(actor="other", run_id="run-2", since="2026-01-01T00:00:00.000Z")


def running_run(store: MemoryStateStore, **changes: object) -> RunRecord:
    lease = store.acquire_lock("zuke-run-run-1", HOLDER, 60_000)
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


def test_a_running_run_is_recorded_cancelled_and_its_claims_released() -> None:
    store = MemoryStateStore()
    running_run(store)
    result = cancel_run(store, "run-1", actor="ops", clock=ManualClock())
    assert (result.status, result.noop) == ("cancelled", False)
    assert result.released == ["deploy-api", "zuke-run-run-1"]
    found = store.get_run("run-1")
    assert found is not None
    record = found.record
    assert record.status == "cancelled" and record.locks == {}
    assert {n: t.status for n, t in record.targets.items()} == {
        "build": "succeeded", "deploy": "failed", "verify": "skipped",
    }  # fmt: skip
    assert record.targets["deploy"].error == "cancelled by ops"
    assert record.events[-1].tool == "cancel" and record.events[-1].actor == "ops"
    assert isinstance(store.acquire_lock("deploy-api", OTHER, 1000), LockAcquired)


def test_cancelling_a_finished_run_is_a_noop_that_adds_nothing() -> None:
    store = MemoryStateStore()
    running_run(store, status="succeeded")
    result = cancel_run(store, "run-1", actor="ops")
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
        cancel_run(store, "run-1", actor="ops", origin="acme/web")
    with pytest.raises(ForeignRunError, match="is a run of Release, not of Deploy"):
        cancel_run(store, "run-1", actor="ops", build_name="Deploy")
    found = store.get_run("run-1")
    assert found is not None and found.record.status == "running"


def test_a_missing_origin_on_either_side_does_not_decide() -> None:
    store = MemoryStateStore()
    running_run(store, build_id=None)
    assert cancel_run(store, "run-1", actor="ops", origin="acme/web").status == "cancelled"


class RacingStore(MemoryStateStore):
    """The owner writes between the canceller's read and its write, once."""

    def __init__(self) -> None:
        super().__init__()
        self.raced = False

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        if not self.raced:
            self.raced = True
            found = self.get_run(record.id)
            assert found is not None
            owner_write = replace(
                found.record,
                targets={**found.record.targets, "deploy": TargetRecord(status="succeeded")},
            )
            super().put_run(owner_write, expected_version=found.version)
        return super().put_run(record, expected_version=expected_version)


def test_a_conflicting_write_is_retried_on_the_fresh_record() -> None:
    store = RacingStore()
    running_run(store)
    result = cancel_run(store, "run-1", actor="ops")
    found = store.get_run("run-1")
    assert result.status == "cancelled" and found is not None
    # the owner's settlement landed first and is kept, not overwritten as "failed"
    assert found.record.targets["deploy"].status == "succeeded"
