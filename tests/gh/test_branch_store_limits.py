"""The branch store inside GitHub's real limits, on a fake that enforces them.

Each test fails on a store that ignores the limit: an empty tree (422), an
empty repository (409), ``Blob.text`` cut at ``blob_text_limit`` (here small,
so small data reaches it), a head conflict reported without ``STALE_DATA``,
and files that must not grow with the runs ever made.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from fixtures.fake_github import FakeGitHub
from tests.gh.branch_support import BRANCH, REPO, UNLIMITED, Cost, branch_store
from zuke._clock import ManualClock
from zuke._errors import StoreRefusedError
from zuke.state._protocol import LockAcquired, RunQuery, Written
from zuke.state.records import RunRecord, RunStatus, TargetRecord
from zuke.testing.store_contract import sample_holder, sample_record
from zuke_gh import _branch_index
from zuke_gh._branch_files import run_path
from zuke_gh.branch_store import GitHubBranchStateStore

GRAPHQL = "POST /graphql"
BLOB = "GET /repos/{owner}/{repo}/git/blobs/{sha}"


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(clock=ManualClock(), repos=[REPO], **UNLIMITED) as fake:
        yield fake


@pytest.fixture
def store(gh: FakeGitHub) -> Iterator[GitHubBranchStateStore]:
    with branch_store(gh) as s:
        yield s


def stamped(run_id: str, n: int, status: RunStatus = "succeeded") -> RunRecord:
    """A record created at minute ``n`` (so listings have a known order)."""
    at = f"2026-01-01T{n // 60:02d}:{n % 60:02d}:00.000Z"
    return replace(sample_record(run_id), status=status, created_at=at, updated_at=at)


def endpoints(gh: FakeGitHub) -> dict[str, int]:
    return dict(gh.stats()["endpoints"])


def test_an_empty_repository_is_one_line_saying_to_push_a_first_commit(gh: FakeGitHub) -> None:
    gh.add_repo("acme/empty", empty=True)
    with branch_store(gh) as s, GitHubBranchStateStore(s.client, "acme/empty") as empty:
        assert empty.list_runs() == [] and empty.get_run("r1") is None
        with pytest.raises(StoreRefusedError) as caught:  # not retried: someone must act
            empty.create_run(sample_record("r1"))
    text = str(caught.value)
    assert "\n" not in text and text.startswith("state: ")
    assert "no commits yet" in text and "push a first commit to its default branch (main)" in text
    assert gh.refs("acme/empty") == {}  # nothing made


def test_a_missing_default_branch_is_named_before_any_branch_is_made(gh: FakeGitHub) -> None:
    gh.add_repo("acme/odd", default_branch="trunk", empty=True)
    gh.commit_files("acme/odd", "dev", {"README.md": "x"})  # has commits, but no trunk
    odd = GitHubBranchStateStore(branch_store(gh).client, "acme/odd")
    with odd, pytest.raises(StoreRefusedError, match="default branch 'trunk' does not exist"):
        odd.create_run(sample_record("r1"))
    assert list(gh.refs("acme/odd")) == ["refs/heads/dev"]


def test_the_branch_starts_with_a_readme_and_a_marker_tag(
    gh: FakeGitHub, store: GitHubBranchStateStore
) -> None:
    store.create_run(sample_record("r1"))
    [*_, first] = gh.log(REPO, BRANCH)
    assert first["parents"] == [] and first["message"] == "zuke state: branch created"
    assert gh.refs(REPO)[f"refs/tags/zuke-state/{BRANCH}"] == first["sha"]


def test_no_index_file_outgrows_a_shard_and_listings_stop_early(
    gh: FakeGitHub, store: GitHubBranchStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_branch_index, "SHARD_CAP", 2_000)
    gh.configure(blob_text_limit=4_000)
    for n in range(30):
        assert isinstance(store.create_run(stamped(f"r{n:02d}", n)), Written)
    waiting = stamped("w1", 100, "suspended")
    assert isinstance(store.create_run(waiting), Written)
    files = gh.files(REPO, BRANCH)
    shards = sorted(p for p in files if p.startswith("index/"))
    assert len(shards) >= 4, shards
    assert all(len(files[p].encode()) < 4_000 for p in [*shards, "active.json", "locks.json"]
               if p in files)  # fmt: skip
    assert list(json.loads(files["active.json"])["runs"]) == ["w1"]
    assert "index.json" not in files

    with branch_store(gh) as fresh:  # a new process: no view, no cache
        Cost(gh)
        assert [s.id for s in fresh.list_runs(RunQuery(status="suspended"))] == ["w1"]
        assert endpoints(gh) == {GRAPHQL: 1}  # a sweep's listing: active.json alone
        Cost(gh)
        newest = fresh.list_runs(RunQuery(limit=3))
        assert [s.id for s in newest] == ["w1", "r29", "r28"]
        assert endpoints(gh)[GRAPHQL] <= 2 and BLOB not in endpoints(gh)
        everything = fresh.list_runs()
    assert [s.id for s in everything] == ["w1", *(f"r{n:02d}" for n in reversed(range(30)))]


def test_a_record_past_the_blob_text_cut_is_read_whole_through_the_blobs_api(
    gh: FakeGitHub, store: GitHubBranchStateStore
) -> None:
    gh.configure(blob_text_limit=5_000)
    base = sample_record("wide")
    rows = {f"deploy[item-{i:04d}].ship": TargetRecord(status="succeeded") for i in range(400)}
    wide = replace(base, targets={**base.targets, **rows})
    written = store.create_run(wide)
    assert isinstance(written, Written)
    assert len(gh.files(REPO, BRANCH)[run_path("wide")].encode()) > 5_000
    with branch_store(gh) as fresh:
        Cost(gh)
        found = fresh.get_run("wide")
        assert endpoints(gh).get(BLOB) == 1  # isTruncated: the exact version, read whole
    assert found is not None and found.record == wide and found.version == written.version


@pytest.mark.parametrize("form", ["untyped", "is-at"])
def test_a_head_conflict_without_stale_data_is_still_a_moved_head(
    gh: FakeGitHub, store: GitHubBranchStateStore, form: str
) -> None:
    gh.configure(stale_head_form=form)
    mine = store.create_run(sample_record("mine"))
    assert isinstance(mine, Written)
    with branch_store(gh) as other:
        assert isinstance(other.create_run(sample_record("theirs")), Written)
    moved = store.put_run(replace(sample_record("mine"), actor="me"), expected_version=mine.version)
    assert isinstance(moved, Written)  # re-read and re-decided, not "store unavailable"
    assert {s.id for s in store.list_runs()} == {"mine", "theirs"}


def test_a_released_run_lease_is_forgotten_and_fences_never_go_back(
    store: GitHubBranchStateStore, gh: FakeGitHub
) -> None:
    fences = []
    for n in range(3):
        held = store.acquire_lock(f"zuke-run-r{n}", sample_holder(f"r{n}"), 60_000)
        assert isinstance(held, LockAcquired)
        fences.append(held.fence)
        store.release_lock(f"zuke-run-r{n}", held.token)
    build_lock = store.acquire_lock("deploy-api", sample_holder("r9"), 60_000)
    assert isinstance(build_lock, LockAcquired)
    locks = json.loads(gh.files(REPO, BRANCH)["locks.json"])
    assert list(locks["claims"]) == ["deploy-api"]  # no lease of a finished run stays
    assert fences == sorted(set(fences)) and build_lock.fence > fences[-1]
    assert locks["fenceFloor"] == fences[-1]
