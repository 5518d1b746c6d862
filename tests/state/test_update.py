"""update_run: the one compare-and-swap loop (re-read and re-apply, one budget, no-ops)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from zuke import RunNotFoundError
from zuke.state._protocol import Conflict, StoredRun, Written
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunRecord, TargetRecord
from zuke.state.update import MAX_ATTEMPTS, GaveUp, Unchanged, Updated, update_run
from zuke.testing.store_contract import sample_record

STAMP = "2026-01-02T03:04:06.000Z"


class Racing(MemoryStateStore):
    """A store where someone else writes just before each of our next ``races`` writes."""

    def __init__(self) -> None:
        super().__init__()
        self.races = 0
        self.appends = 0
        self.puts = 0

    def _someone_else_writes(self, run_id: str) -> None:
        if self.races:
            self.races -= 1
            found = super().get_run(run_id)
            assert found is not None
            super().put_run(
                replace(found.record, actor=f"other-{self.races}"),
                expected_version=found.version,
            )

    def append_run(self, run_id: str, delta: RunDelta, *, expected_version: str):
        self._someone_else_writes(run_id)
        self.appends += 1
        return super().append_run(run_id, delta, expected_version=expected_version)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        self.puts += 1
        return super().put_run(record, expected_version=expected_version)


class WholeRecordOnly:
    """A store without ``append_run`` (like the TypeScript service): only whole records."""

    def __init__(self) -> None:
        self.inner = MemoryStateStore()
        self.puts = 0

    def __getattr__(self, name: str) -> object:
        if name == "append_run":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        self.puts += 1
        return self.inner.put_run(record, expected_version=expected_version)


def start(store: MemoryStateStore, run_id: str = "run-1") -> StoredRun:
    assert isinstance(store.create_run(sample_record(run_id)), Written)
    found = store.get_run(run_id)
    assert found is not None
    return found


def build_succeeded(record: RunRecord) -> RunDelta:
    return RunDelta(updated_at=STAMP, targets={"build": TargetRecord(status="succeeded")})


def test_a_change_is_appended_on_a_journaling_store() -> None:
    store = Racing()
    start(store)
    result = update_run(store, "run-1", build_succeeded)
    assert isinstance(result, Updated)
    assert (result.attempts, store.appends, store.puts) == (1, 1, 0)
    found = store.get_run("run-1")
    assert found is not None and found.version == result.version
    assert found.record == result.record
    assert found.record.targets["build"].status == "succeeded"


def test_a_conflict_re_reads_and_applies_the_change_to_the_fresh_record() -> None:
    store = Racing()
    start(store)
    store.races = 2
    seen: list[str] = []

    def change(record: RunRecord) -> RunDelta:
        seen.append(record.actor)
        return build_succeeded(record)

    result = update_run(store, "run-1", change)
    assert isinstance(result, Updated) and result.attempts == 3
    assert seen == ["contract-suite", "other-1", "other-0"]  # each try sees the fresh record
    assert result.record.actor == "other-0"  # their change survived ours
    assert result.record.targets["build"].status == "succeeded"


def test_a_change_that_returns_none_writes_nothing() -> None:
    store = Racing()
    start(store)
    result = update_run(store, "run-1", lambda record: None)
    assert isinstance(result, Unchanged)
    assert result.record.status == "running"
    assert store.appends == 0


def test_it_gives_up_after_its_budget_of_conflicting_writes() -> None:
    store = Racing()
    start(store)
    store.races = 100
    result = update_run(store, "run-1", build_succeeded)
    assert isinstance(result, GaveUp)
    assert result.attempts == MAX_ATTEMPTS == store.appends
    found = store.get_run("run-1")
    assert found is not None and found.record.targets["build"].status == "pending"


def test_a_known_record_is_written_against_without_reading_first() -> None:
    store = Racing()
    known = start(store)
    reads: list[str] = []
    original = store.get_run

    def counting_get(run_id: str) -> StoredRun | None:
        reads.append(run_id)
        return original(run_id)

    store.get_run = counting_get  # type: ignore[method-assign]
    result = update_run(store, "run-1", build_succeeded, known=known)
    assert isinstance(result, Updated) and reads == []


def test_a_stale_known_record_costs_one_conflict_and_a_re_read() -> None:
    store = Racing()
    known = start(store)
    update_run(store, "run-1", build_succeeded)
    result = update_run(
        store, "run-1", lambda r: RunDelta(updated_at=STAMP, actor="me"), known=known
    )
    assert isinstance(result, Updated) and result.attempts == 2
    assert result.record.targets["build"].status == "succeeded"  # not rolled back


def test_a_store_without_append_gets_whole_records() -> None:
    store = WholeRecordOnly()
    start(store.inner)
    result = update_run(store, "run-1", build_succeeded)  # type: ignore[arg-type]
    assert isinstance(result, Updated) and store.puts == 1


def test_a_run_that_is_not_in_the_store_is_run_not_found() -> None:
    with pytest.raises(RunNotFoundError, match='no run "ghost" in the store'):
        update_run(MemoryStateStore(), "ghost", build_succeeded)


def test_a_store_error_is_raised_not_swallowed() -> None:
    store = Racing()
    start(store)

    def broken(*args: object, **kwargs: object) -> Written:
        raise OSError(28, "No space left on device")

    store.append_run = broken  # type: ignore[method-assign]
    with pytest.raises(OSError, match="No space left"):
        update_run(store, "run-1", build_succeeded)


def test_a_store_that_appends_gets_appends_even_without_newer_protocol_methods() -> None:
    class OldJournal:  # a third-party store written before list_locks existed
        def __init__(self) -> None:
            self.inner = MemoryStateStore()
            self.appends = 0

        def get_run(self, run_id: str) -> StoredRun | None:
            return self.inner.get_run(run_id)

        def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
            raise AssertionError("a journaling store must not be rewritten whole")

        def append_run(
            self, run_id: str, delta: RunDelta, *, expected_version: str
        ) -> Written | Conflict:
            self.appends += 1
            return self.inner.append_run(run_id, delta, expected_version=expected_version)

    store = OldJournal()
    record = sample_record()
    store.inner.create_run(record)
    result = update_run(
        store,  # type: ignore[arg-type]
        record.id,
        lambda r: RunDelta(updated_at=r.updated_at, status="failed"),
    )
    assert store.appends == 1 and result.record.status == "failed"
