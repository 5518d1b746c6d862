"""Record and journal scenarios: create, get, put and delete under compare-and-swap, appends.

Also the run-id safety scenario: every method refuses an unsafe run id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import reduce

import pytest

from zuke._errors import UnsafeIdError
from zuke.state._protocol import Conflict, JournalingStateStore, StateStore, Written
from zuke.state.records import EventOutcome, RunDelta, RunEvent, Signal, TargetRecord, apply_delta
from zuke.testing.store_contract.support import (
    UNSAFE_IDS,
    ContractBase,
    fresh,
    race,
    rich_record,
    sample_record,
)


class RunScenarios(ContractBase):
    """Records round-trip, versions decide every write, appends fold in order."""

    # ------------------------------------------------------------------ records

    def test_create_then_get_round_trips_the_record(self, store: StateStore) -> None:
        record = rich_record(fresh())
        version = self._created(store, record)
        stored = self._stored(store, record.id)
        assert stored.record == record
        assert stored.version == version

    def test_a_minimal_record_round_trips_with_optional_fields_absent(
        self, store: StateStore
    ) -> None:
        record = sample_record(fresh())
        self._created(store, record)
        got = self._stored(store, record.id).record
        assert got == record
        assert (got.build_id, got.deadline_at, got.intended_terminal) == (None, None, None)
        assert got.extra == {}
        assert got.targets["build"].waiting_for is None

    def test_get_of_a_missing_run_is_none(self, store: StateStore) -> None:
        assert store.get_run(fresh()) is None

    def test_create_of_an_existing_id_conflicts(self, store: StateStore) -> None:
        record = sample_record(fresh())
        self._created(store, record)
        assert isinstance(store.create_run(sample_record(record.id, status="failed")), Conflict)
        assert self._stored(store, record.id).record.status == "running"

    def test_put_at_the_current_version_lands_and_returns_a_new_version(
        self, store: StateStore
    ) -> None:
        record = sample_record(fresh())
        version = self._created(store, record)
        result = store.put_run(sample_record(record.id, status="failed"), expected_version=version)
        assert isinstance(result, Written)
        assert result.version != version
        stored = self._stored(store, record.id)
        assert (stored.record.status, stored.version) == ("failed", result.version)

    def test_put_at_a_stale_version_conflicts(self, store: StateStore) -> None:
        record = sample_record(fresh())
        stale = self._created(store, record)
        assert isinstance(store.put_run(record, expected_version=stale), Written)
        result = store.put_run(sample_record(record.id, status="failed"), expected_version=stale)
        assert isinstance(result, Conflict)
        assert self._stored(store, record.id).record.status == "running"

    def test_put_of_a_missing_run_conflicts(self, store: StateStore) -> None:
        record = sample_record(fresh())
        assert isinstance(store.put_run(record, expected_version="1"), Conflict)
        assert store.get_run(record.id) is None

    def test_a_recreated_run_does_not_accept_the_old_version(self, store: StateStore) -> None:
        record = sample_record(fresh())
        old = self._created(store, record)
        store.delete_run(record.id)
        self._created(store, record)
        assert isinstance(store.put_run(record, expected_version=old), Conflict)

    def test_delete_is_idempotent(self, store: StateStore) -> None:
        record = sample_record(fresh())
        self._created(store, record)
        store.delete_run(record.id)
        assert store.get_run(record.id) is None
        store.delete_run(record.id)
        store.delete_run(fresh())
        assert store.get_run(record.id) is None

    def test_events_round_trip_in_order(self, store: StateStore) -> None:
        outcomes: tuple[EventOutcome, ...] = ("ok", "denied", "error")
        events = tuple(
            RunEvent(
                at=f"2026-01-02T03:04:{i:02d}.000Z",
                tool=("signal", "cancel", "resume")[i % 3],
                actor=f"actor-{i}",
                outcome=outcomes[i % 3],
                args={"i": str(i)} if i % 2 else {},
                detail=None if i % 2 else f"detail {i}",
            )
            for i in range(12)
        )
        record = replace(sample_record(fresh()), events=events)
        version = self._created(store, record)
        assert self._stored(store, record.id).record.events == events
        more = (RunEvent(at="2026-01-02T04:00:00.000Z", tool="resume", actor="z"),)
        grown = replace(record, events=events + more)
        assert isinstance(store.put_run(grown, expected_version=version), Written)
        assert self._stored(store, record.id).record.events == events + more

    def test_two_concurrent_writers_at_one_version_exactly_one_wins(
        self, store: StateStore
    ) -> None:
        record = sample_record(fresh())
        version = self._created(store, record)

        def write(i: int) -> Written | Conflict:
            mine = replace(record, actor=f"writer-{i}")
            return self.concurrent_store(store, i).put_run(mine, expected_version=version)

        results = race(self.racers, write)
        winners = [i for i, r in enumerate(results) if isinstance(r, Written)]
        assert len(winners) == 1, results
        assert sum(isinstance(r, Conflict) for r in results) == self.racers - 1
        stored = self._stored(store, record.id)
        assert stored.record.actor == f"writer-{winners[0]}"
        winner = results[winners[0]]
        assert isinstance(winner, Written)
        assert stored.version == winner.version

    # ------------------------------------------------------------------ journal

    def test_append_applies_the_delta_and_bumps_the_version(self, store: StateStore) -> None:
        journal = self._journaling(store)
        record = sample_record(fresh())
        version = self._created(store, record)
        delta = RunDelta(
            updated_at="2026-01-02T03:05:00.000Z",
            status="suspended",
            targets={"build": TargetRecord(status="running", started_at="2026-01-02T03:04:59Z")},
            signals={"go": Signal(data=[1, 2], received_at="2026-01-02T03:05:00.000Z")},
            events=(RunEvent(at="2026-01-02T03:05:00.000Z", tool="signal", actor="bob"),),
        )
        result = journal.append_run(record.id, delta, expected_version=version)
        assert isinstance(result, Written)
        assert result.version != version
        stored = self._stored(store, record.id)
        assert stored.record == apply_delta(record, delta)
        assert stored.version == result.version

    def test_append_at_a_stale_version_conflicts(self, store: StateStore) -> None:
        journal = self._journaling(store)
        record = sample_record(fresh())
        stale = self._created(store, record)
        first = RunDelta(updated_at="2026-01-02T03:05:00.000Z", status="suspended")
        assert isinstance(journal.append_run(record.id, first, expected_version=stale), Written)
        second = RunDelta(updated_at="2026-01-02T03:06:00.000Z", status="failed")
        assert isinstance(journal.append_run(record.id, second, expected_version=stale), Conflict)
        assert self._stored(store, record.id).record.status == "suspended"

    def test_append_to_a_missing_run_conflicts(self, store: StateStore) -> None:
        journal = self._journaling(store)
        delta = RunDelta(updated_at="2026-01-02T03:05:00.000Z")
        assert isinstance(journal.append_run(fresh(), delta, expected_version="1"), Conflict)

    def test_many_appends_then_get_folds_them_all_in_order(self, store: StateStore) -> None:
        journal = self._journaling(store)
        names = tuple(f"t{i}" for i in range(10))
        record = sample_record(fresh(), targets=names)
        version = self._created(store, record)
        deltas = [
            RunDelta(
                updated_at=f"2026-01-02T04:{i // 60:02d}:{i % 60:02d}.000Z",
                status="suspended" if i % 7 == 3 else None,
                degraded=True if i == 40 else None,
                targets={names[i % 10]: TargetRecord(status="running", meta={"step": i})},
                signals={f"s{i % 4}": Signal(data=i, received_at="2026-01-02T04:00:00Z")},
                events=(RunEvent(at=f"{i}", tool="step", actor="engine", args={"i": str(i)}),),
            )
            for i in range(60)
        ]
        for delta in deltas:
            result = journal.append_run(record.id, delta, expected_version=version)
            assert isinstance(result, Written)
            version = result.version
        stored = self._stored(store, record.id)
        assert stored.record == reduce(apply_delta, deltas, record)
        assert [e.args["i"] for e in stored.record.events] == [str(i) for i in range(60)]
        assert stored.version == version

    def test_a_put_after_appends_replaces_the_whole_record(self, store: StateStore) -> None:
        journal = self._journaling(store)
        record = sample_record(fresh())
        version = self._created(store, record)
        delta = RunDelta(updated_at="2026-01-02T05:00:00.000Z", status="suspended")
        appended = journal.append_run(record.id, delta, expected_version=version)
        assert isinstance(appended, Written)
        replacement = sample_record(record.id, status="succeeded", targets=("only",))
        put = store.put_run(replacement, expected_version=appended.version)
        assert isinstance(put, Written)
        assert self._stored(store, record.id).record == replacement
        assert isinstance(journal.append_run(record.id, delta, expected_version=version), Conflict)

    def test_concurrent_appends_at_one_version_exactly_one_wins(self, store: StateStore) -> None:
        self._journaling(store)
        record = sample_record(fresh())
        version = self._created(store, record)

        def append(i: int) -> Written | Conflict:
            journal = self.concurrent_store(store, i)
            assert isinstance(journal, JournalingStateStore)
            delta = RunDelta(updated_at=f"2026-01-02T05:00:{i:02d}.000Z", actor=f"writer-{i}")
            return journal.append_run(record.id, delta, expected_version=version)

        results = race(self.racers, append)
        winners = [i for i, r in enumerate(results) if isinstance(r, Written)]
        assert len(winners) == 1, results
        assert self._stored(store, record.id).record.actor == f"writer-{winners[0]}"

    # ------------------------------------------------------------------ safety

    @pytest.mark.parametrize("bad", UNSAFE_IDS)
    def test_unsafe_run_ids_are_rejected_by_every_method(self, store: StateStore, bad: str) -> None:
        record = sample_record("placeholder")
        bad_record = replace(record, id=bad)
        calls: list[Callable[[], object]] = [
            lambda: store.get_run(bad),
            lambda: store.create_run(bad_record),
            lambda: store.put_run(bad_record, expected_version="1"),
            lambda: store.delete_run(bad),
        ]
        if isinstance(store, JournalingStateStore):
            delta = RunDelta(updated_at="2026-01-02T03:04:05.678Z")
            calls.append(lambda: store.append_run(bad, delta, expected_version="1"))
        for call in calls:
            with pytest.raises(UnsafeIdError):
                call()
