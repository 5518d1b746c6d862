"""``zuke.runs.locks``: listing claims, and breaking one only when its holder is gone."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from zuke._clock import ManualClock
from zuke._errors import StateError, UsageError
from zuke.runs.locks import LockHolderLiveError, break_lock, list_locks
from zuke.state._protocol import LockAcquired, StateStore, lease_key
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.records import LockHolder, RunRecord

SINCE = "2026-01-01T00:00:00.000Z"
TTL = 60_000


@pytest.fixture(params=["memory", "filesystem"])
def clocked(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[StateStore, ManualClock]]:
    clock = ManualClock()
    if request.param == "memory":
        yield MemoryStateStore(clock=clock), clock
    else:
        yield FileSystemStateStore(tmp_path / "runs", clock=clock), clock


def holder(run_id: str, actor: str = "alice") -> LockHolder:
    return LockHolder(actor=actor, run_id=run_id, since=SINCE)


def hold(store: StateStore, key: str, run_id: str) -> LockAcquired:
    taken = store.acquire_lock(key, holder(run_id), TTL)
    assert isinstance(taken, LockAcquired)
    return taken


def running_run(store: StateStore, run_id: str, locks: dict[str, str]) -> None:
    record = RunRecord(
        id=run_id, build="Deploy", root_target="deploy", status="running", actor="alice",
        created_at=SINCE, updated_at=SINCE,
    )  # fmt: skip
    store.create_run(replace(record, locks=locks))


def test_list_locks_marks_lapsed_claims(clocked: tuple[StateStore, ManualClock]) -> None:
    store, clock = clocked
    hold(store, "a-old", "r1")
    clock.advance(TTL + 1)
    hold(store, "b-new", "r2")
    listed = list_locks(store, clock=clock)
    assert [(x.entry.key, x.lapsed) for x in listed] == [("a-old", True), ("b-new", False)]
    assert listed[1].entry.holder == holder("r2")


def test_break_is_refused_while_the_holders_lease_is_live(
    clocked: tuple[StateStore, ManualClock],
) -> None:
    store, clock = clocked
    hold(store, lease_key("r1"), "r1")
    taken = hold(store, "deploy", "r1")
    with pytest.raises(LockHolderLiveError, match=r"held by alice \(run r1\).*--force"):
        break_lock(store, "deploy", reason="stuck", actor="ops", clock=clock)
    assert store.renew_lock("deploy", taken.token, TTL) is True  # untouched


def test_force_breaks_a_live_holder_and_records_the_reason_on_its_run(
    clocked: tuple[StateStore, ManualClock],
) -> None:
    store, clock = clocked
    lease = hold(store, lease_key("r1"), "r1")
    taken = hold(store, "deploy", "r1")
    running_run(store, "r1", {lease_key("r1"): lease.token, "deploy": taken.token})
    result = break_lock(store, "deploy", reason="host died", actor="ops", force=True, clock=clock)
    assert result.holder == holder("r1") and result.recorded and result.warnings == []
    assert store.renew_lock("deploy", taken.token, TTL) is False
    again = store.acquire_lock("deploy", holder("r2"), TTL)
    assert isinstance(again, LockAcquired) and again.fence > taken.fence
    found = store.get_run("r1")
    assert found is not None
    (event,) = found.record.events
    assert (event.tool, event.actor) == ("locks-break", "ops")
    assert dict(event.args) == {"key": "deploy", "reason": "host died"}
    assert "deploy" not in found.record.locks and lease_key("r1") in found.record.locks


def test_break_without_force_works_once_the_holders_lease_lapsed(
    clocked: tuple[StateStore, ManualClock],
) -> None:
    store, clock = clocked
    hold(store, lease_key("r1"), "r1")
    hold(store, "deploy", "r1")
    clock.advance(TTL + 1)
    result = break_lock(store, "deploy", reason="killed", actor="ops", clock=clock)
    assert result.holder == holder("r1")
    assert all(x.entry.key != "deploy" for x in list_locks(store, clock=clock))


def test_a_holder_whose_run_record_is_gone_is_said_and_still_broken(
    clocked: tuple[StateStore, ManualClock],
) -> None:
    store, clock = clocked
    hold(store, "deploy", "vanished")
    result = break_lock(store, "deploy", reason="orphan", actor="ops", clock=clock)
    assert result.holder == holder("vanished") and not result.recorded
    assert result.warnings == [
        "the holder's run vanished is not in the store; the break is not recorded"
    ]
    assert store.list_locks() == []


def test_breaking_a_free_key_says_nothing_was_held(
    clocked: tuple[StateStore, ManualClock],
) -> None:
    store, clock = clocked
    result = break_lock(store, "deploy", reason="why", actor="ops", clock=clock)
    assert result.holder is None
    assert result.summary() == 'Lock "deploy" was not held; nothing to break.'


def test_an_empty_reason_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--reason"):
        break_lock(MemoryStateStore(), "deploy", reason="  ", actor="ops")


class NoBreak:
    """A third-party store predating ``break_lock``: only what the break needs."""

    def __init__(self) -> None:
        self._inner = MemoryStateStore()

    def list_locks(self, *, run_id: str | None = None) -> list[object]:
        return []


def test_a_store_without_break_lock_cannot_break_locks() -> None:
    store: object = NoBreak()
    with pytest.raises(StateError, match="NoBreak cannot break locks"):
        break_lock(store, "deploy", reason="why", actor="ops")  # type: ignore[arg-type]
