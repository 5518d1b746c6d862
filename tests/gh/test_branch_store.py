"""The branch store's own behaviour on the fake GitHub: layout, CAS, cost, history, errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from fixtures.fake_github import FakeGitHub
from tests.gh.branch_support import BRANCH, REPO, Cost, branch_store
from zuke._clock import ManualClock
from zuke._engine.claims import lease_ttl_ms
from zuke._errors import CorruptRecordError, StateError, StoreUnavailableError
from zuke.state._protocol import Conflict, LockAcquired, LockHeld, RunQuery, Written
from zuke.state.memory import MemoryStateStore
from zuke.state.resolve import configured_store
from zuke.testing.store_contract import sample_holder, sample_record
from zuke_gh import GitHubClient, RetryPolicy
from zuke_gh._branch_files import run_path
from zuke_gh.branch_store import GitHubBranchStateStore

GRAPHQL = "POST /graphql"


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(clock=ManualClock(), repos=[REPO]) as fake:
        yield fake


@pytest.fixture
def store(gh: FakeGitHub) -> Iterator[GitHubBranchStateStore]:
    with branch_store(gh) as s:
        yield s


def test_the_first_write_creates_an_orphan_branch_holding_the_record_and_the_index(
    gh: FakeGitHub, store: GitHubBranchStateStore
) -> None:
    assert store.list_runs() == [] and store.get_run("r1") is None  # no branch yet: empty
    assert gh.head(REPO, BRANCH) is None
    record = sample_record("r1")
    written = store.create_run(record)
    assert isinstance(written, Written)
    log = gh.log(REPO, BRANCH)
    headlines = [c["message"].partition("\n")[0] for c in log]  # the body: the write id
    assert headlines == ["run r1: created", "zuke state: branch created"]
    assert log[-1]["parents"] == []  # an orphan: none of the repository's history
    files = gh.files(REPO, BRANCH)
    assert sorted(files) == ["README.md", "active.json", run_path("r1")]
    assert "zuke runs list" in files["README.md"] and "Do not edit" in files["README.md"]
    assert json.loads(files["active.json"])["runs"]["r1"]["status"] == "running"
    assert run_path("r1").startswith("runs/") and run_path("r1").count("/") == 2
    stored = store.get_run("r1")
    assert stored is not None and stored.record == record and stored.version == written.version


def test_an_uncontended_write_costs_one_request_and_one_commit_and_reads_are_conditional(
    gh: FakeGitHub, store: GitHubBranchStateStore
) -> None:
    first = store.create_run(sample_record("r1"))
    assert isinstance(first, Written)
    cost = Cost(gh)
    record = replace(sample_record("r1"), status="suspended")
    second = store.put_run(record, expected_version=first.version)
    assert isinstance(second, Written)
    assert cost.take() == (1, 0, 1)  # the view follows the store's own commits
    assert [s.status for s in store.list_runs()] == ["suspended"]
    assert cost.take() == (1, 0, 0)  # a listing: the ref (moved by our commit); active.json known
    assert [s.status for s in store.list_runs(RunQuery(status="suspended"))] == ["suspended"]
    assert cost.take() == (1, 1, 0)  # unchanged: a 304, which costs no rate limit
    store.get_run("r1")
    store.get_run("r1")
    assert cost.take() == (2, 2, 0)  # nothing moved, the record is known: free 304s (a poll)


def test_a_processs_first_write_costs_two_requests_the_head_and_its_tree_in_one_query(
    gh: FakeGitHub, store: GitHubBranchStateStore
) -> None:
    first = store.create_run(sample_record("r1"))
    assert isinstance(first, Written)
    with branch_store(gh) as fresh:  # another process: no view of the branch yet
        cost = Cost(gh)
        record = replace(sample_record("r1"), status="suspended")
        assert isinstance(fresh.put_run(record, expected_version=first.version), Written)
        assert cost.take() == (2, 0, 1)  # one query (head + tree), one commit
        assert isinstance(fresh.create_run(sample_record("r2")), Written)
        assert cost.take() == (2, 0, 1)  # is there a run r2? one read by path, then the commit
    with branch_store(gh) as engine:  # the engine's order in a new process: lease, then record
        lease = engine.acquire_lock("zuke-run-r3", sample_holder("r3"), 1_000)
        assert isinstance(lease, LockAcquired)
        assert cost.take() == (3, 0, 1)  # the ref (GitHub's clock), one query, the commit
        assert isinstance(engine.create_run(sample_record("r3")), Written)
        assert cost.take() == (1, 0, 1)  # the lease's query read the run's path too
    stored = store.get_run("r1")
    assert stored is not None and stored.record.status == "suspended"


def test_a_head_moved_by_another_record_is_retried_and_a_changed_record_conflicts(
    gh: FakeGitHub, store: GitHubBranchStateStore
) -> None:
    mine = store.create_run(sample_record("mine"))
    assert isinstance(mine, Written)
    with branch_store(gh) as other:
        assert isinstance(other.create_run(sample_record("theirs")), Written)
        cost = Cost(gh)
        moved = store.put_run(
            replace(sample_record("mine"), actor="me"), expected_version=mine.version
        )
        assert isinstance(moved, Written)  # the head moved, the record did not: transparent
        assert gh.stats()["endpoints"][GRAPHQL] == 3  # stale commit, re-read, commit
        assert cost.take()[2] == 1
        found = other.get_run("mine")
        assert found is not None and found.record.actor == "me"
        assert isinstance(other.put_run(found.record, expected_version=found.version), Written)
    stale = store.put_run(sample_record("mine"), expected_version=moved.version)
    assert stale == Conflict()
    assert {s.id for s in store.list_runs()} == {"mine", "theirs"}  # nothing lost


def test_a_stale_lock_is_judged_by_githubs_clock_and_taken_over_with_a_higher_fence(
    gh: FakeGitHub,
) -> None:
    ours = ManualClock()
    with branch_store(gh, clock=ours) as first, branch_store(gh, clock=ours) as second:
        held = first.acquire_lock("deploy-api", sample_holder("run-a"), 60_000)
        assert isinstance(held, LockAcquired)
        ours.advance(3_600_000)  # the runner's clock says it expired long ago: irrelevant
        assert isinstance(
            second.acquire_lock("deploy-api", sample_holder("run-b"), 60_000), LockHeld
        )
        gh.advance_clock(62)  # GitHub's clock: now it has
        taken = second.acquire_lock("deploy-api", sample_holder("run-b"), 60_000)
        assert isinstance(taken, LockAcquired) and taken.fence > held.fence
        assert first.renew_lock("deploy-api", held.token, 60_000) is False
        [entry] = second.list_locks()
        assert (entry.key, entry.holder.run_id, entry.fence) == ("deploy-api", "run-b", taken.fence)
        assert entry.expires_at >= gh.now_ms() + 60_000  # granted from GitHub's clock
    messages = [c["message"].partition("\n")[0] for c in gh.log(REPO, BRANCH)]
    assert messages[:2] == [
        "lock deploy-api: taken over by contract-suite (expired, held by contract-suite) (fence 2)",
        "lock deploy-api: acquired by contract-suite (fence 1)",
    ]


def test_history_says_what_changed_and_prune_deletes_through_the_same_cas(
    gh: FakeGitHub, store: GitHubBranchStateStore
) -> None:
    created = store.create_run(sample_record("r1"))
    assert isinstance(created, Written)
    store.put_run(
        replace(sample_record("r1"), status="suspended"), expected_version=created.version
    )
    lock = store.acquire_lock("zuke-run-r1", sample_holder("r1"), 1_000)
    assert isinstance(lock, LockAcquired)
    store.release_lock("zuke-run-r1", lock.token)
    store.delete_run("r1")
    assert [c["message"].partition("\n")[0] for c in gh.log(REPO, BRANCH)][:5] == [
        "run r1: deleted",
        "lock zuke-run-r1: released by contract-suite",
        "lock zuke-run-r1: acquired by contract-suite (fence 1)",
        "run r1: suspended",
        "run r1: created",
    ]
    files = gh.files(REPO, BRANCH)
    assert run_path("r1") not in files
    assert json.loads(files["active.json"])["runs"] == {}
    assert json.loads(files["locks.json"]) == {"fenceFloor": 1, "claims": {}}  # fence kept
    store.delete_run("r1")  # absent: nothing to commit
    assert len(gh.log(REPO, BRANCH)) == 6


def test_a_secondary_rate_limit_on_a_commit_is_waited_out(gh: FakeGitHub) -> None:
    waits: list[float] = []
    client = GitHubClient(token=gh.token, base_url=gh.url, sleep=waits.append)
    with GitHubBranchStateStore(client, REPO) as store:
        store.create_run(sample_record("r0"))
        gh.inject(GRAPHQL, 403, retry_after=7)
        assert isinstance(store.create_run(sample_record("r1")), Written)
    assert waits == [7.0]


def test_a_corrupt_record_file_is_one_clear_error(
    gh: FakeGitHub, store: GitHubBranchStateStore
) -> None:
    store.create_run(sample_record("r1"))
    with GitHubClient(token=gh.token, base_url=gh.url) as client:
        head = gh.head(REPO, BRANCH)
        client.graphql(
            "mutation($input: CreateCommitOnBranchInput!) { createCommitOnBranch(input: $input) "
            "{ commit { oid } } }",
            {"input": {
                "branch": {"repositoryNameWithOwner": REPO, "branchName": BRANCH},
                "message": {"headline": "vandal"}, "expectedHeadOid": head,
                "fileChanges": {"additions": [{"path": run_path("r1"), "contents": "e30K"}]},
            }},
        )  # fmt: skip
    with pytest.raises(
        CorruptRecordError, match=rf"run 'r1' \({run_path('r1')} on the state branch\)"
    ):
        store.get_run("r1")


def test_failures_are_one_line_naming_what_to_do_and_never_the_token(gh: FakeGitHub) -> None:
    no_retry = RetryPolicy(max_attempts=1)
    missing = GitHubBranchStateStore(
        GitHubClient(token=gh.token, base_url=gh.url, retry=no_retry), "acme/nope"
    )
    with missing, pytest.raises(StoreUnavailableError, match="'acme/nope'") as gone:
        missing.create_run(sample_record("r1"))
    bad = GitHubBranchStateStore(
        GitHubClient(token="ghp_wrongTOKEN123", base_url=gh.url, retry=no_retry), REPO
    )
    with bad, pytest.raises(StoreUnavailableError, match="401") as denied:
        bad.list_runs()
    with branch_store(gh, retry=no_retry) as store:
        gh.inject("/repos/*/git/ref/*", 403, message="Resource not accessible by integration")
        with pytest.raises(StoreUnavailableError, match="contents: write") as forbidden:
            store.get_run("r1")
    unreachable = GitHubBranchStateStore(
        GitHubClient(token=gh.token, base_url="http://127.0.0.1:9", retry=no_retry), REPO
    )
    with unreachable, pytest.raises(StoreUnavailableError, match="could not reach GitHub") as far:
        unreachable.get_run("r1")
    for caught in (gone, denied, forbidden, far):
        text = str(caught.value)
        assert "\n" not in text and text.startswith("state: ")
        assert gh.token not in text and "wrongTOKEN" not in text


def test_zuke_state_names_the_store_through_the_entry_point(gh: FakeGitHub) -> None:
    env = {"ZUKE_STATE": f"github://{REPO}?branch=runs-state", "GITHUB_API_URL": gh.url,
           "GITHUB_TOKEN": gh.token}  # fmt: skip
    store = configured_store(env)
    assert isinstance(store, GitHubBranchStateStore)
    with store:
        assert (store.repository, store.branch, repr(store)) == (
            REPO, "runs-state", f"github://{REPO}?branch=runs-state"
        )  # fmt: skip
        store.create_run(sample_record("r1"))
    assert gh.head(REPO, "runs-state") is not None
    for spec in (
        "github://acme?branch=x",
        "github://acme/app?color=red",
        "github://a/b?branch=a..b",
    ):
        with pytest.raises(StateError):
            configured_store({**env, "ZUKE_STATE": spec})


def test_the_run_lease_defaults_to_the_stores_ten_minutes_unless_the_environment_says(
    store: GitHubBranchStateStore,
) -> None:
    assert store.checkpointed is True
    assert lease_ttl_ms({}, store) == 600_000
    assert lease_ttl_ms({"ZUKE_RUN_LEASE_TTL": "90s"}, store) == 90_000
    assert lease_ttl_ms({}, MemoryStateStore()) == 60_000
    assert lease_ttl_ms({}) == 60_000
