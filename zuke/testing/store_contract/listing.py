"""Listing scenarios: ``list_runs`` filters (target, status, since, build), order and limit.

Every fixture run plans a fresh target name, so a shared backend's other runs
never match a scenario's query.
"""

from __future__ import annotations

from dataclasses import replace

from zuke.state._protocol import RunQuery, StateStore, Written
from zuke.state.records import RunDelta, RunRecord, RunStatus
from zuke.testing.store_contract.support import ContractBase, fresh, sample_record


class ListingScenarios(ContractBase):
    """What ``list_runs`` returns, and that it agrees with ``get_run``."""

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
