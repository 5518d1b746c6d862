"""The state-store contract: scenarios every :class:`~zuke.state.StateStore` must pass.

Zuke runs this suite against its own stores, and ships it so that anyone
writing a store (or a server behind the HTTP store) can run it against theirs.
Plug a store in by subclassing :class:`StateStoreContract` in a pytest module
whose class name starts with ``Test``::

    from zuke.testing.store_contract import StateStoreContract

    class TestMyStore(StateStoreContract):
        @pytest.fixture
        def store(self) -> StateStore:
            return MyStore(...)

Hooks a subclass may override:

- ``store`` (fixture, required) — the store under test, fresh or shared.
- ``lapse(store, ttl_ms)`` — on return, a lock taken with ``ttl_ms`` before the
  call must be expired by the *store's* clock. The default advances the store's
  ``clock`` attribute when it is a :class:`~zuke._clock.ManualClock` (no waiting),
  else sleeps ``ttl_ms + lapse_margin_ms`` of wall time (a remote server).
- ``concurrent_store(store, index)`` — the store thread ``index`` of a race uses;
  default the same object. Return separate clients to race separate connections.
- class attributes ``lock_ttl_ms`` (TTL of locks the suite lets lapse; keep it
  short for a wall-clock server), ``lapse_margin_ms``, ``live_ttl_ms`` (TTL of
  locks that must stay live), ``racers`` (threads per race) and
  ``renews_expired_claims`` (set ``False`` only if your store documents that an
  expired claim cannot be renewed even before anyone else acquires it).

Every scenario uses fresh uuid-suffixed run ids, lock keys and target names, so
the suite is safe against a shared, persistent backend. ``append_run``
scenarios are skipped unless the store is a :class:`~zuke.state.JournalingStateStore`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import reduce
from typing import ClassVar, TypeVar

import pytest

from zuke._clock import ManualClock
from zuke._errors import UnsafeIdError
from zuke.state._protocol import (
    RUN_LEASE_PREFIX,
    Conflict,
    JournalingStateStore,
    LockAcquired,
    LockEntry,
    LockHeld,
    LockHolder,
    RunQuery,
    StateStore,
    StoredRun,
    Written,
)
from zuke.state.lock_rules import MAX_TTL_MS
from zuke.state.records import (
    EffectRecord,
    EventOutcome,
    GraphNode,
    RunDelta,
    RunEvent,
    RunRecord,
    RunStatus,
    Signal,
    TargetRecord,
    WaitingFor,
    apply_delta,
)

T = TypeVar("T")

UNSAFE_IDS: tuple[str, ...] = ("../x", "a/b", "a b", "", "..", ".", "x\x00y", "../../etc/passwd")


def fresh(prefix: str = "contract") -> str:
    """A unique, safe id."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def sample_record(
    run_id: str | None = None,
    *,
    status: RunStatus = "running",
    created_at: str = "2026-01-02T03:04:05.678Z",
    targets: tuple[str, ...] = ("build", "test"),
) -> RunRecord:
    """A plausible minimal record: every target ``pending``, optional fields absent."""
    return RunRecord(
        id=run_id or fresh("run"),
        build="ContractBuild",
        root_target=targets[-1],
        status=status,
        actor="contract-suite",
        created_at=created_at,
        updated_at=created_at,
        graph=tuple(
            GraphNode(name, depends_on=(targets[i - 1],) if i else ())
            for i, name in enumerate(targets)
        ),
        targets={name: TargetRecord() for name in targets},
    )


def sample_holder(run_id: str = "run-1", *, run_url: str | None = None) -> LockHolder:
    return LockHolder(
        actor="contract-suite", run_id=run_id, since="2026-01-02T03:04:05.678Z", run_url=run_url
    )


def rich_record(run_id: str) -> RunRecord:
    """A record with every optional field set and fields this zuke does not know."""
    return RunRecord(
        id=run_id,
        build="ContractBuild",
        build_id="acme/widgets",
        root_target="deploy",
        status="suspended",
        actor="alice",
        created_at="2026-01-02T03:04:05.678Z",
        updated_at="2026-01-02T03:09:00.000Z",
        graph=(GraphNode("build"), GraphNode("deploy", depends_on=("build",))),
        params={"version": "1.2.3", "env": "prod"},
        targets={
            "build": TargetRecord(
                status="succeeded",
                meta={"artifact": "widgets-1.2.3.tgz", "sizes": [1, 2]},
                started_at="2026-01-02T03:04:06.000Z",
                ended_at="2026-01-02T03:05:00.000Z",
                effects={"upload": EffectRecord(status="done", attempts=1)},
            ),
            "deploy": TargetRecord(
                status="waiting",
                waiting_for=WaitingFor(
                    trigger="approval",
                    deadline="2026-01-03T00:00:00.000Z",
                    on_timeout="rollback",
                    on_timeout_is_target=True,
                ),
            ),
        },
        signals={
            "approval": Signal(data={"by": "bob", "ok": True}, received_at="2026-01-02T03:08Z")
        },
        events=(
            RunEvent(at="2026-01-02T03:07:00.000Z", tool="signal", actor="bob", args={"n": "1"}),
            RunEvent(
                at="2026-01-02T03:08:00.000Z",
                tool="cancel",
                actor="eve",
                outcome="denied",
                detail="not an owner",
            ),
        ),
        degraded=True,
        deadline_at="2026-01-05T00:00:00.000Z",
        intended_terminal="cancelled",
        extra={"x-future-field": {"nested": [1, "two", None]}, "schemaHint": 7},
    )


def _race(n: int, action: Callable[[int], T]) -> list[T]:
    """Run ``action(i)`` on ``n`` threads released together by a barrier."""
    barrier = threading.Barrier(n)
    results: list[T | None] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = action(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    assert all(r is not None for r in results), "a racer did not finish"
    return [r for r in results if r is not None]


class StateStoreContract:
    """Subclass in a ``Test*`` class and provide the ``store`` fixture."""

    lock_ttl_ms: ClassVar[int] = 200
    lapse_margin_ms: ClassVar[int] = 150
    live_ttl_ms: ClassVar[int] = 3_600_000
    racers: ClassVar[int] = 8
    renews_expired_claims: ClassVar[bool] = True

    # ------------------------------------------------------------------ hooks

    @pytest.fixture
    def store(self) -> StateStore:
        raise NotImplementedError(
            f"{type(self).__name__} must define a `store` fixture returning the store under test"
        )

    def lapse(self, store: StateStore, ttl_ms: int) -> None:
        """Make a lock taken with ``ttl_ms`` expire by the store's clock."""
        clock = getattr(store, "clock", None)
        if isinstance(clock, ManualClock):
            clock.advance(ttl_ms + 1)
            return
        time.sleep((ttl_ms + self.lapse_margin_ms) / 1000)

    def concurrent_store(self, store: StateStore, index: int) -> StateStore:
        """The store racer ``index`` uses in the concurrency scenarios."""
        return store

    # ------------------------------------------------------------------ helpers

    def _created(self, store: StateStore, record: RunRecord) -> str:
        result = store.create_run(record)
        assert isinstance(result, Written), f"create_run({record.id!r}) returned {result!r}"
        return result.version

    def _stored(self, store: StateStore, run_id: str) -> StoredRun:
        stored = store.get_run(run_id)
        assert stored is not None, f"get_run({run_id!r}) returned None after a write"
        return stored

    def _journaling(self, store: StateStore) -> JournalingStateStore:
        if not isinstance(store, JournalingStateStore):
            pytest.skip("the store does not implement append_run")
        return store

    def _acquired(self, store: StateStore, key: str, ttl_ms: int, who: str = "a") -> LockAcquired:
        result = store.acquire_lock(key, sample_holder(who), ttl_ms)
        assert isinstance(result, LockAcquired), f"acquire_lock({key!r}) returned {result!r}"
        return result

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

        results = _race(self.racers, write)
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

        results = _race(self.racers, append)
        winners = [i for i, r in enumerate(results) if isinstance(r, Written)]
        assert len(winners) == 1, results
        assert self._stored(store, record.id).record.actor == f"writer-{winners[0]}"

    # ------------------------------------------------------------------ listing

    def _listing_fixture(self, store: StateStore) -> tuple[str, list[RunRecord]]:
        """Runs sharing a fresh target name (so a shared backend's other runs never match)."""
        target = fresh("target")
        stamps = ["2030-01-01T00:00:01.000Z", "2030-01-01T00:00:03.000Z"]
        shape: list[tuple[str, RunStatus, str]] = [
            ("a", "succeeded", stamps[0]),
            ("b", "failed", stamps[1]),
            ("c", "succeeded", stamps[1]),
            ("d", "running", "2030-01-01T00:00:02.000Z"),
        ]
        runs = [
            sample_record(
                f"{fresh('list')}-{suffix}", status=status, created_at=stamp, targets=("a", target)
            )
            for suffix, status, stamp in shape
        ]
        for run in runs:
            self._created(store, run)
        self._created(store, sample_record(fresh("other"), created_at=stamps[1]))
        return target, runs

    def test_list_runs_filters_by_target(self, store: StateStore) -> None:
        target, runs = self._listing_fixture(store)
        listed = store.list_runs(RunQuery(target=target))
        assert sorted(s.id for s in listed) == sorted(r.id for r in runs)
        assert store.list_runs(RunQuery(target=fresh("no-such-target"))) == []

    def test_list_runs_orders_newest_first_by_created_at_then_id(self, store: StateStore) -> None:
        target, runs = self._listing_fixture(store)
        newest_first = sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)
        assert store.list_runs(RunQuery(target=target)) == [r.summary() for r in newest_first]
        # the two runs created at the same instant come out highest id first
        same = [s.id for s in store.list_runs(RunQuery(target=target))][:2]
        assert same == sorted(same, reverse=True)

    def test_list_runs_filters_by_status(self, store: StateStore) -> None:
        target, runs = self._listing_fixture(store)
        listed = store.list_runs(RunQuery(target=target, status="succeeded"))
        expected = [r for r in runs if r.status == "succeeded"]
        assert sorted(s.id for s in listed) == sorted(r.id for r in expected)
        everywhere = store.list_runs(RunQuery(status="succeeded"))
        assert all(s.status == "succeeded" for s in everywhere)
        assert {r.id for r in expected} <= {s.id for s in everywhere}

    def test_list_runs_filters_by_since_inclusively(self, store: StateStore) -> None:
        target, runs = self._listing_fixture(store)
        listed = store.list_runs(RunQuery(target=target, since="2030-01-01T00:00:02.000Z"))
        expected = [r for r in runs if r.created_at >= "2030-01-01T00:00:02.000Z"]
        assert sorted(s.id for s in listed) == sorted(r.id for r in expected)
        assert len(listed) == 3

    def test_list_runs_applies_the_limit_after_ordering(self, store: StateStore) -> None:
        target, runs = self._listing_fixture(store)
        newest_first = sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)
        listed = store.list_runs(RunQuery(target=target, limit=2))
        assert [s.id for s in listed] == [r.id for r in newest_first[:2]]
        assert store.list_runs(RunQuery(target=target, limit=0)) == []

    def test_list_runs_shows_the_status_after_appends(self, store: StateStore) -> None:
        journal = self._journaling(store)
        target, runs = self._listing_fixture(store)
        running = next(r for r in runs if r.status == "running")
        version = self._stored(store, running.id).version
        delta = RunDelta(updated_at="2030-01-02T00:00:00.000Z", status="cancelled")
        assert isinstance(journal.append_run(running.id, delta, expected_version=version), Written)
        listed = store.list_runs(RunQuery(target=target, status="cancelled"))
        assert [(s.id, s.updated_at) for s in listed] == [(running.id, delta.updated_at)]

    def test_list_runs_filters_by_build(self, store: StateStore) -> None:
        target = fresh("target")
        mine, other = fresh("Build"), fresh("Build")
        runs = [
            replace(sample_record(fresh("build"), targets=("a", target)), build=build)
            for build in (mine, other, mine)
        ]
        for run in runs:
            self._created(store, run)
        listed = store.list_runs(RunQuery(build=mine))
        assert sorted(s.id for s in listed) == sorted(r.id for r in runs if r.build == mine)
        assert all(s.build == mine for s in listed)
        both = store.list_runs(RunQuery(build=mine, target=target, status="running", limit=1))
        assert [s.id for s in both] == [max(r.id for r in runs if r.build == mine)]
        assert store.list_runs(RunQuery(build=fresh("NoSuchBuild"))) == []

    def _stamped(self, store: StateStore, stamps: tuple[str, ...]) -> tuple[str, list[RunRecord]]:
        target = fresh("target")
        runs = [sample_record(fresh("since"), created_at=t, targets=(target,)) for t in stamps]
        for run in runs:
            self._created(store, run)
        return target, runs

    def test_list_runs_compares_since_as_a_time_not_as_text(self, store: StateStore) -> None:
        # As text "…00:00:00.500Z" sorts before "…00:00:00Z"; as a time it is after it.
        target, runs = self._stamped(
            store, ("2031-01-15T00:00:00.500Z", "2031-01-14T23:59:59.999Z")
        )
        listed = store.list_runs(RunQuery(target=target, since="2031-01-15T00:00:00Z"))
        assert [s.id for s in listed] == [runs[0].id]
        exact = store.list_runs(RunQuery(target=target, since="2031-01-15T00:00:00.500Z"))
        assert [s.id for s in exact] == [runs[0].id], "since is inclusive"

    def test_list_runs_since_accepts_an_offset(self, store: StateStore) -> None:
        target, runs = self._stamped(
            store, ("2031-01-15T00:00:00.500Z", "2031-01-14T23:59:59.999Z")
        )
        # 05:30 at +05:30 is midnight UTC.
        listed = store.list_runs(RunQuery(target=target, since="2031-01-15T05:30:00+05:30"))
        assert [s.id for s in listed] == [runs[0].id]
        earlier = store.list_runs(RunQuery(target=target, since="2031-01-14T18:29:59.999-05:30"))
        assert sorted(s.id for s in earlier) == sorted(r.id for r in runs)

    def test_list_runs_summaries_match_the_stored_records(self, store: StateStore) -> None:
        journal = self._journaling(store)
        target, runs = self._listing_fixture(store)
        version = self._stored(store, runs[0].id).version
        for i in range(3):  # changes that are neither status nor actor still show
            delta = RunDelta(updated_at=f"2030-01-05T00:00:0{i}.000Z", degraded=True)
            result = journal.append_run(runs[0].id, delta, expected_version=version)
            assert isinstance(result, Written)
            version = result.version
        listed = store.list_runs(RunQuery(target=target))
        assert listed == sorted(
            (self._stored(store, r.id).record.summary() for r in runs),
            key=lambda s: (s.created_at, s.id),
            reverse=True,
        )
        assert listed[-1].updated_at == "2030-01-05T00:00:02.000Z"

    # ------------------------------------------------------------------ locks

    def test_acquire_grants_a_token_and_a_second_acquire_names_the_holder(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        holder = sample_holder("run-first", run_url="https://ci.example/runs/1")
        first = store.acquire_lock(key, holder, self.live_ttl_ms)
        assert isinstance(first, LockAcquired)
        assert first.token
        second = store.acquire_lock(key, sample_holder("run-second"), self.live_ttl_ms)
        assert second == LockHeld(holder=holder)

    def test_a_holder_without_a_run_url_round_trips(self, store: StateStore) -> None:
        key = fresh("lock")
        self._acquired(store, key, self.live_ttl_ms, who="run-first")
        held = store.acquire_lock(key, sample_holder("run-second"), self.live_ttl_ms)
        assert held == LockHeld(holder=sample_holder("run-first"))
        assert held.holder.run_url is None

    def test_renew_with_the_right_token_is_true_and_with_a_wrong_token_false(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        acquired = self._acquired(store, key, self.live_ttl_ms)
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True
        assert store.renew_lock(key, "not-the-token", self.live_ttl_ms) is False
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True

    def test_a_renewal_extends_the_claim(self, store: StateStore) -> None:
        key = fresh("lock")
        acquired = self._acquired(store, key, self.lock_ttl_ms)
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True
        self.lapse(store, self.lock_ttl_ms)
        assert isinstance(store.acquire_lock(key, sample_holder("b"), self.live_ttl_ms), LockHeld)

    def test_release_then_acquire_works(self, store: StateStore) -> None:
        key = fresh("lock")
        acquired = self._acquired(store, key, self.live_ttl_ms)
        store.release_lock(key, acquired.token)
        again = self._acquired(store, key, self.live_ttl_ms, who="b")
        assert again.token != acquired.token
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is False

    def test_release_with_a_wrong_token_leaves_the_lock_held(self, store: StateStore) -> None:
        key = fresh("lock")
        acquired = self._acquired(store, key, self.live_ttl_ms)
        store.release_lock(key, "not-the-token")
        assert isinstance(store.acquire_lock(key, sample_holder("b"), self.live_ttl_ms), LockHeld)
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True

    def test_an_expired_lock_is_taken_over_and_the_evicted_token_cannot_renew(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        evicted = self._acquired(store, key, self.lock_ttl_ms)
        self.lapse(store, self.lock_ttl_ms)
        taker = store.acquire_lock(key, sample_holder("taker"), self.live_ttl_ms)
        assert isinstance(taker, LockAcquired)
        assert taker.token != evicted.token
        assert store.renew_lock(key, evicted.token, self.live_ttl_ms) is False
        store.release_lock(key, evicted.token)  # a no-op: it is not the holder any more
        assert store.acquire_lock(key, sample_holder("c"), self.live_ttl_ms) == LockHeld(
            holder=sample_holder("taker")
        )

    def test_an_expired_claim_is_renewable_until_someone_acquires_it(
        self, store: StateStore
    ) -> None:
        if not self.renews_expired_claims:
            pytest.skip("this store does not renew expired claims")
        key = fresh("lock")
        acquired = self._acquired(store, key, self.lock_ttl_ms)
        self.lapse(store, self.lock_ttl_ms)
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True
        assert isinstance(store.acquire_lock(key, sample_holder("b"), self.live_ttl_ms), LockHeld)

    def test_concurrent_acquire_of_a_free_key_has_exactly_one_winner(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")

        def acquire(i: int) -> LockAcquired | LockHeld:
            racer = self.concurrent_store(store, i)
            return racer.acquire_lock(key, sample_holder(f"racer-{i}"), self.live_ttl_ms)

        results = _race(self.racers, acquire)
        winners = [i for i, r in enumerate(results) if isinstance(r, LockAcquired)]
        assert len(winners) == 1, results
        for r in results:
            if isinstance(r, LockHeld):
                assert r.holder.run_id == f"racer-{winners[0]}"

    def test_fence_strictly_increases_across_acquire_release_acquire(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        fences = []
        for _ in range(3):
            acquired = self._acquired(store, key, self.live_ttl_ms)
            fences.append(acquired.fence)
            store.release_lock(key, acquired.token)
        assert fences[0] < fences[1] < fences[2], fences

    def test_fence_strictly_increases_across_an_expiry_takeover(self, store: StateStore) -> None:
        key = fresh("lock")
        first = self._acquired(store, key, self.lock_ttl_ms)
        self.lapse(store, self.lock_ttl_ms)
        second = self._acquired(store, key, self.live_ttl_ms, who="b")
        assert second.fence > first.fence

    def test_fence_strictly_increases_across_deleting_the_holders_run(
        self, store: StateStore
    ) -> None:
        record = sample_record(fresh())
        lease = RUN_LEASE_PREFIX + record.id
        fences = []
        for _ in range(2):
            self._created(store, record)
            released = self._acquired(store, lease, self.live_ttl_ms, who=record.id)
            store.release_lock(lease, released.token)
            expired = self._acquired(store, lease, self.lock_ttl_ms, who=record.id)
            self.lapse(store, self.lock_ttl_ms)
            store.delete_run(record.id)  # what `runs prune` does
            fences += [released.fence, expired.fence]
        after = self._acquired(store, lease, self.live_ttl_ms, who="next")
        fences.append(after.fence)
        assert fences == sorted(set(fences)), fences

    def test_list_locks_lists_live_and_expired_claims_but_not_released_ones(
        self, store: StateStore
    ) -> None:
        run_id = fresh("run")
        live, expired, released = (fresh(f"lock-{name}") for name in ("a", "b", "c"))
        held = self._acquired(store, live, self.live_ttl_ms, who=run_id)
        lapsed = self._acquired(store, expired, self.lock_ttl_ms, who=run_id)
        gone = self._acquired(store, released, self.live_ttl_ms, who=run_id)
        store.release_lock(released, gone.token)
        self.lapse(store, self.lock_ttl_ms)
        listed = store.list_locks()
        assert [e.key for e in listed] == sorted(e.key for e in listed)
        mine = {e.key: e for e in listed if e.key in (live, expired, released)}
        assert sorted(mine) == sorted([live, expired])
        assert mine[live].holder == sample_holder(run_id)
        assert mine[live].fence == held.fence
        assert mine[expired].fence == lapsed.fence
        assert mine[live].expires_at > mine[expired].expires_at

    def test_list_locks_filters_by_the_holders_run(self, store: StateStore) -> None:
        mine, theirs = fresh("run"), fresh("run")
        keys = [fresh("lock") for _ in range(3)]
        for key, who in zip(keys, (mine, theirs, mine), strict=True):
            self._acquired(store, key, self.live_ttl_ms, who=who)
        listed = store.list_locks(run_id=mine)
        assert listed == [
            LockEntry(key=e.key, holder=sample_holder(mine), expires_at=e.expires_at, fence=e.fence)
            for e in listed
        ]
        assert [e.key for e in listed] == sorted([keys[0], keys[2]])
        assert store.list_locks(run_id=fresh("run")) == []

    def test_ttls_from_one_ms_to_366_days_are_accepted_and_longer_ones_refused(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        first = self._acquired(store, key, 1)
        assert store.renew_lock(key, first.token, MAX_TTL_MS) is True
        with pytest.raises(ValueError, match="ttl"):
            store.renew_lock(key, first.token, MAX_TTL_MS + 1)
        with pytest.raises(ValueError, match="ttl"):
            store.acquire_lock(fresh("lock"), sample_holder(), MAX_TTL_MS + 1)
        self._acquired(store, fresh("lock"), MAX_TTL_MS)

    def test_renew_and_release_of_an_absent_lock_are_safe(self, store: StateStore) -> None:
        key = fresh("lock")
        assert store.renew_lock(key, "no-such-token", self.live_ttl_ms) is False
        store.release_lock(key, "no-such-token")
        self._acquired(store, key, self.live_ttl_ms)

    @pytest.mark.parametrize("ttl", [0, -5])
    def test_a_non_positive_ttl_is_rejected(self, store: StateStore, ttl: int) -> None:
        key = fresh("lock")
        with pytest.raises(ValueError, match="ttl"):
            store.acquire_lock(key, sample_holder(), ttl)
        acquired = self._acquired(store, key, self.live_ttl_ms)
        with pytest.raises(ValueError, match="ttl"):
            store.renew_lock(key, acquired.token, ttl)

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

    @pytest.mark.parametrize("bad", UNSAFE_IDS)
    def test_unsafe_lock_keys_are_rejected_by_every_method(
        self, store: StateStore, bad: str
    ) -> None:
        calls: list[Callable[[], object]] = [
            lambda: store.acquire_lock(bad, sample_holder(), self.live_ttl_ms),
            lambda: store.renew_lock(bad, "token", self.live_ttl_ms),
            lambda: store.release_lock(bad, "token"),
        ]
        for call in calls:
            with pytest.raises(UnsafeIdError):
                call()
