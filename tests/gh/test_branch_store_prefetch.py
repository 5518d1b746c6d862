"""A sweep's GraphQL cost does not grow with the runs waiting (issue 16, "a sweep's cost").

A sweep lists the suspended runs (``active.json``), then reads each one. The store
reads the listed records together, in batched queries, and keeps texts by blob
SHA, so 100 waiting runs cost a handful of GraphQL points, not 101 (a repository
``GITHUB_TOKEN`` has 1,000 an hour). The fake counts a GraphQL request as one
point (a query with no connection costs the minimum: GitHub docs, "Rate limits
and query limits for the GraphQL API"). A record whose blob changed is never
answered from what was read before.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from fixtures.fake_github import FakeGitHub
from tests.gh.branch_support import REPO, UNLIMITED, Cost, branch_store
from tests.gh.test_branch_store_migration import old_layout
from zuke._clock import ManualClock
from zuke.state._protocol import RunQuery, StoredRun, Written
from zuke.state.records import RunRecord, TargetRecord
from zuke.testing.store_contract import sample_record
from zuke_gh import _branch_reader
from zuke_gh._branch_texts import TextCache
from zuke_gh.branch_store import GitHubBranchStateStore

GRAPHQL = "POST /graphql"
BLOB = "GET /repos/{owner}/{repo}/git/blobs/{sha}"
WAITING = 100


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(clock=ManualClock(), repos=[REPO], **UNLIMITED) as fake:
        yield fake


def waiting(run_id: str) -> RunRecord:
    return replace(sample_record(run_id), status="suspended")


def suspend(gh: FakeGitHub, count: int) -> dict[str, str]:
    """``count`` suspended runs on the branch: id -> version."""
    versions = {}
    with branch_store(gh) as writer:
        for n in range(count):
            written = writer.create_run(waiting(f"w{n:03d}"))
            assert isinstance(written, Written)
            versions[f"w{n:03d}"] = written.version
    return versions


def endpoints(gh: FakeGitHub) -> dict[str, int]:
    return dict(gh.stats()["endpoints"])


def sweep_reads(store: GitHubBranchStateStore) -> dict[str, StoredRun]:
    """What a sweep reads: the suspended runs, then each one's record."""
    found = {}
    for summary in store.list_runs(RunQuery(status="suspended")):
        stored = store.get_run(summary.id)
        assert stored is not None
        found[summary.id] = stored
    return found


class Spy:
    """The variables (paths asked) of each GraphQL query a store sends."""

    def __init__(self, store: GitHubBranchStateStore) -> None:
        self.asked: list[int] = []
        real = store.client.graphql

        def graphql(query: str, variables: dict[str, Any], **kwargs: Any) -> Any:
            self.asked.append(sum(1 for k in variables if k[:1] in ("e", "p")))
            return real(query, variables, **kwargs)

        store.client.graphql = graphql  # type: ignore[method-assign,assignment]


def test_a_sweep_over_100_waiting_runs_costs_a_bounded_number_of_graphql_points(
    gh: FakeGitHub,
) -> None:
    versions = suspend(gh, WAITING)
    with branch_store(gh) as fresh:  # a sweep is a fresh process
        spy = Spy(fresh)
        Cost(gh)
        found = sweep_reads(fresh)
        spent = endpoints(gh)
    assert {i: s.version for i, s in found.items()} == versions
    assert all(s.record == waiting(i) for i, s in found.items())
    # the listing, the records' SHAs and sizes, their texts fifty a query (was 1 + 100)
    assert spent[GRAPHQL] <= 3 + WAITING // 50
    assert BLOB not in spent
    assert max(spy.asked) <= _branch_reader.SIZES_PER_QUERY  # every answer bounded
    texts_asked = spy.asked[2:]  # after the listing and the SHAs
    assert texts_asked and max(texts_asked) <= _branch_reader.TEXTS_PER_QUERY


def test_a_sweep_over_a_few_waiting_runs_reads_their_records_in_one_query(
    gh: FakeGitHub,
) -> None:
    versions = suspend(gh, _branch_reader.DIRECT_TEXTS)
    with branch_store(gh) as fresh:
        Cost(gh)
        found = sweep_reads(fresh)
        assert endpoints(gh)[GRAPHQL] == 2  # the listing, then every record at once
    assert {i: s.version for i, s in found.items()} == versions


def test_a_listing_alone_reads_no_record(gh: FakeGitHub) -> None:
    suspend(gh, 5)
    with branch_store(gh) as fresh:
        Cost(gh)
        assert len(fresh.list_runs(RunQuery(status="suspended"))) == 5
        assert endpoints(gh) == {GRAPHQL: 1}  # `zuke runs list` pays nothing for a sweep


def test_a_prefetched_text_is_never_served_for_a_run_whose_blob_changed(gh: FakeGitHub) -> None:
    suspend(gh, 6)
    with branch_store(gh) as sweep, branch_store(gh) as other:
        assert sweep_reads(sweep)  # every record read (and kept by SHA) at this head
        changed = replace(waiting("w003"), actor="someone-else")
        before = other.get_run("w003")
        assert before is not None
        written = other.put_run(changed, expected_version=before.version)
        assert isinstance(written, Written)
        now = sweep.get_run("w003")
        assert now is not None and now.record == changed and now.version == written.version
        # and a change between the listing and the first read: read at the new head
        listed = sweep.list_runs(RunQuery(status="suspended"))
        again = replace(changed, actor="third")
        assert isinstance(other.put_run(again, expected_version=written.version), Written)
        first = sweep.get_run(listed[0].id)
        assert first is not None and first.record == waiting(listed[0].id)
        moved = sweep.get_run("w003")
        assert moved is not None and moved.record == again


def test_after_another_writer_an_unchanged_record_is_not_read_again(gh: FakeGitHub) -> None:
    suspend(gh, 20)
    with branch_store(gh) as sweep, branch_store(gh) as other:
        listed = sweep.list_runs(RunQuery(status="suspended"))
        assert sweep.get_run(listed[0].id) is not None  # the prefetch
        assert isinstance(other.create_run(sample_record("elsewhere")), Written)  # head moves
        Cost(gh)
        for summary in listed:
            stored = sweep.get_run(summary.id)
            assert stored is not None and stored.record == waiting(summary.id)
        # one query learns the new head's SHAs; every text is the one kept by SHA
        assert endpoints(gh).get(GRAPHQL) == 1


def test_a_record_past_the_text_cut_is_read_whole_only_when_it_is_needed(gh: FakeGitHub) -> None:
    gh.configure(blob_text_limit=3_000)
    base = waiting("wide")
    rows = {f"deploy[item-{i:04d}].ship": TargetRecord(status="succeeded") for i in range(200)}
    wide = replace(base, targets={**base.targets, **rows})
    suspend(gh, 4)
    with branch_store(gh) as writer:
        assert isinstance(writer.create_run(wide), Written)
    with branch_store(gh) as sweep:
        listed = [s.id for s in sweep.list_runs(RunQuery(status="suspended"))]
        assert "wide" in listed
        Cost(gh)
        for run_id in (i for i in listed if i != "wide"):
            assert sweep.get_run(run_id) is not None
        assert BLOB not in endpoints(gh)  # its cut text is not read whole for the others
        Cost(gh)
        found = sweep.get_run("wide")
        spent = endpoints(gh)
        assert spent.get(BLOB) == 1 and GRAPHQL not in spent  # its SHA is known: read whole
    assert found is not None and found.record == wide


def test_records_still_at_their_first_layout_paths_are_prefetched_there(gh: FakeGitHub) -> None:
    versions = old_layout(gh, [waiting(f"old{n}") for n in range(8)])
    with branch_store(gh) as fresh:
        Cost(gh)
        found = sweep_reads(fresh)
        assert endpoints(gh)[GRAPHQL] <= 4  # the listing (and index.json), SHAs, texts
    assert {i: s.version for i, s in found.items()} == versions
    assert all(s.record == waiting(i) for i, s in found.items())


def test_the_text_cache_is_bounded_by_characters_least_recently_used_first_out() -> None:
    cache = TextCache(max_chars=100, max_item_chars=60)
    cache.put("a", "x" * 40)
    cache.put("b", "y" * 40)
    assert cache.get("a") == "x" * 40  # a is now the most recently used
    cache.put("c", "z" * 40)  # 120 > 100: b goes
    assert cache.get("b") is None and cache.get("a") and cache.get("c")
    assert cache.chars == 80
    cache.put("big", "w" * 61)  # one wide record would push the rest out: not kept
    assert cache.get("big") is None and len(cache) == 2
