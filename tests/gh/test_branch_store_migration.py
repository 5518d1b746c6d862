"""A branch in the first layout migrates on its next write; a deleted branch is refused.

The first layout kept every run's entry in ``index.json`` and records at
``runs/<id>.json``; a busy repository's ``index.json`` passed the 512,000-byte
``Blob.text`` cut and the store could not read it any more. Seeded here
straight into the fake's git objects, as such a branch would be.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from fixtures.fake_github import FakeGitHub
from tests.gh.branch_support import BRANCH, REPO, UNLIMITED, branch_store
from zuke._clock import ManualClock
from zuke._errors import StoreUnavailableError
from zuke.state._protocol import LockAcquired, RunQuery, Written
from zuke.state.records import RunRecord
from zuke.testing.store_contract import sample_holder, sample_record
from zuke_gh._branch_files import blob_sha, record_bytes, run_path
from zuke_gh._branch_index import index_entry

BLOB = "GET /repos/{owner}/{repo}/git/blobs/{sha}"


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(clock=ManualClock(), repos=[REPO], **UNLIMITED) as fake:
        yield fake


def old_layout(gh: FakeGitHub, records: list[RunRecord]) -> dict[str, str]:
    """Seed the first layout; the runs' versions (blob SHAs) by id."""
    files: dict[str, str | None] = {}
    versions = {}
    for record in records:
        data = record_bytes(record)
        files[f"runs/{record.id}.json"] = data.decode()
        versions[record.id] = blob_sha(data)
    index = {"runs": {r.id: index_entry(r) for r in sorted(records, key=lambda r: r.id)}}
    files["index.json"] = json.dumps(index, indent=2) + "\n"
    # the first layout kept every released run lease (one per run ever made)
    leases = {f"zuke-run-{r.id}": {"fence": n + 1} for n, r in enumerate(records)}
    files["locks.json"] = json.dumps({"fenceFloor": 0, "claims": leases})
    gh.commit_files(REPO, BRANCH, files, "zuke state: the first layout")
    return versions


def finished(n: int) -> RunRecord:
    at = f"2026-01-01T00:{n:02d}:00.000Z"
    return replace(sample_record(f"old{n:02d}"), status="succeeded", created_at=at, updated_at=at)


def test_an_old_layout_is_read_and_migrated_by_the_next_write(gh: FakeGitHub) -> None:
    waiting = replace(sample_record("s1"), status="suspended", created_at="2026-01-02T00:00:00Z")
    versions = old_layout(gh, [*(finished(n) for n in range(5)), waiting])
    with branch_store(gh) as store:
        assert [s.id for s in store.list_runs(RunQuery(limit=2))] == ["s1", "old04"]
        found = store.get_run("s1")
        assert found is not None and found.version == versions["s1"]
        moved = store.put_run(replace(waiting, status="running"), expected_version=found.version)
        assert isinstance(moved, Written)
        files = gh.files(REPO, BRANCH)
        assert "index.json" not in files and "runs/s1.json" not in files
        assert run_path("s1") in files and "README.md" in files
        assert list(json.loads(files["active.json"])["runs"]) == ["s1"]
        assert len(json.loads(files["index/1.json"])["runs"]) == 5
        assert [s.id for s in store.list_runs()] == [
            "s1",
            *(f"old{n:02d}" for n in range(4, -1, -1)),
        ]
        old = store.get_run("old02")  # still at its old path
        assert old is not None and old.version == versions["old02"]
        store.delete_run("old02")
    with branch_store(gh) as fresh:
        assert fresh.get_run("old02") is None
        assert len(fresh.list_runs(RunQuery(status="succeeded"))) == 4
        assert "runs/old02.json" not in gh.files(REPO, BRANCH)


def test_an_old_index_past_the_blob_text_cut_is_read_whole_and_repaired(gh: FakeGitHub) -> None:
    gh.configure(blob_text_limit=2_000)
    old_layout(gh, [finished(n) for n in range(20)])
    assert len(gh.files(REPO, BRANCH)["index.json"]) > 2_000
    with branch_store(gh) as store:
        assert len(store.list_runs()) == 20  # the cut index, read whole by its blob SHA
        assert gh.stats()["endpoints"].get(BLOB, 0) >= 1
        lock = store.acquire_lock("deploy-api", sample_holder("x"), 60_000)
        assert isinstance(lock, LockAcquired)  # any write migrates
    files = gh.files(REPO, BRANCH)
    assert "index.json" not in files and "active.json" in files
    locks = json.loads(files["locks.json"])
    assert list(locks["claims"]) == ["deploy-api"]  # released leases forgotten...
    assert locks["fenceFloor"] == 20  # ...their fences in the floor: none goes back
    with branch_store(gh) as again:
        lease = again.acquire_lock("zuke-run-old19", sample_holder("old19"), 60_000)
        assert isinstance(lease, LockAcquired) and lease.fence == 21
    gh.reset_stats()
    with branch_store(gh) as fresh:
        assert len(fresh.list_runs()) == 20
        assert fresh.get_run("old07") is not None


def test_a_deleted_branch_is_refused_never_re_created_and_init_force_keeps_fences(
    gh: FakeGitHub,
) -> None:
    with branch_store(gh) as first:
        first.create_run(replace(sample_record("waiting"), status="suspended"))
        held = first.acquire_lock("deploy-api", sample_holder("a"), 600_000)
        assert isinstance(held, LockAcquired)
        assert gh.delete_branch(REPO, BRANCH)
        with pytest.raises(StoreUnavailableError, match="was deleted"):
            first.renew_lock("deploy-api", held.token, 600_000)
    with branch_store(gh) as second:  # a new process: it never saw the branch
        for attempt in (
            lambda: second.acquire_lock("deploy-api", sample_holder("b"), 600_000),
            lambda: second.get_run("waiting"),
            lambda: second.list_runs(),
            lambda: second.create_run(sample_record("new")),
            lambda: second.initialize(),
        ):
            with pytest.raises(StoreUnavailableError) as caught:
                attempt()
            text = str(caught.value)
            assert "\n" not in text and "was deleted" in text and "zuke state init --force" in text
        assert gh.head(REPO, BRANCH) is None  # nothing re-created over the lost state
        now = gh.now_ms()
        assert "created afresh" in second.initialize(force=True)
        assert json.loads(gh.files(REPO, BRANCH)["locks.json"])["fenceFloor"] >= now // 1000 * 1000
        again = second.acquire_lock("deploy-api", sample_holder("b"), 600_000)
        assert isinstance(again, LockAcquired) and again.fence > held.fence
        assert second.initialize().endswith("exists")
