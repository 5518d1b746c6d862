"""A lost answer on the branch store, with a second writer landing between the loss and the look.

The transport lets GitHub (the fake) apply the marked commit and loses its
answer — a reset connection, a 502, GraphQL's timeout answer — and, before the
store looks whether it landed, another store (another process's, straight to
the fake) commits to the same run or key: a signal, a cancel, a claim broken,
the key taken over. The look must find the commit by its witness (the write id
in its message, on the branch's history): ``Written`` or ``LockAcquired`` with
what it made, never a conflict that makes the caller apply the change again,
and never a second commit. A commit lost *before* it reached GitHub is decided
"not landed" and re-decided on the new head. Across calls, a write whose look
failed too is looked up first when it is sent again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal

import httpx
import pytest

from fixtures.fake_github import FakeGitHub
from tests.gh.branch_support import BRANCH, REPO, branch_store
from zuke._clock import ManualClock
from zuke._errors import StoreUnavailableError
from zuke.state._protocol import Conflict, LockAcquired, Written
from zuke.state._unsure import UnsureWriteError
from zuke.state.records import RunDelta, RunEvent, Signal
from zuke.state.update import Updated, update_run
from zuke.testing.store_contract import sample_holder, sample_record
from zuke_gh import GitHubClient, RetryPolicy
from zuke_gh._branch_witness import PER_PAGE, write_id_of
from zuke_gh.branch_store import GitHubBranchStateStore

AT = "2026-01-02T03:04:05.000Z"
Loss = Literal["reset", "502", "timeout"]
TIMEOUT_ANSWER = {
    "data": None,
    "errors": [{"message": "Something went wrong while executing your query. This may be the "
                "result of a timeout, or it could be a GitHub bug."}],
}  # fmt: skip


class Losing(httpx.BaseTransport):
    """The client's transport to the fake; once armed, the next commit (a GraphQL mutation)
    is applied by the fake — or, ``before``, never sent — its answer lost, and ``meanwhile``
    run in between, as another process's write landing before the look."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self._armed: tuple[Loss, bool, Callable[[], object]] | None = None
        #: a commit held back (``late``): GitHub applies it just before the next one arrives
        self._held: httpx.Request | None = None
        self._late = False
        self.lost = 0
        #: requests after the loss, as ``METHOD path``: what the look cost
        self.after: list[str] = []

    def arm(self, meanwhile: Callable[[], object], *, loss: Loss = "reset",
            before: bool = False, late: bool = False) -> None:  # fmt: skip
        self._armed = (loss, before or late, meanwhile)
        self._late = late

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        mutation = request.url.path.endswith("/graphql") and b"mutation" in request.content
        if mutation and self._held is not None:  # the lost commit is applied late, first
            held, self._held = self._held, None
            self._inner.handle_request(held).read()
        if self._armed is None or not mutation:
            if self.lost:
                self.after.append(f"{request.method} {request.url.path}")
            return self._inner.handle_request(request)
        loss, before, meanwhile = self._armed
        self._armed = None
        if self._late:
            request.read()
            self._held = request
        elif not before:
            answer = self._inner.handle_request(request)
            answer.read()
            assert answer.status_code == 200 and "errors" not in answer.json(), answer.text
        self.lost += 1
        meanwhile()
        if loss == "502":
            return httpx.Response(502, json={"message": "Server Error"}, request=request)
        if loss == "timeout":
            return httpx.Response(200, json=TIMEOUT_ANSWER, request=request)
        raise httpx.ReadError("connection reset by peer", request=request)

    def close(self) -> None:
        self._inner.close()


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(clock=ManualClock(), repos=[REPO]) as fake:
        yield fake


@pytest.fixture
def losing() -> Losing:
    return Losing()


@pytest.fixture
def store(gh: FakeGitHub, losing: Losing) -> Iterator[GitHubBranchStateStore]:
    client = GitHubClient(token=gh.token, base_url=gh.url, transport=losing,
                          retry=RetryPolicy(jitter=0.0), sleep=lambda s: None)  # fmt: skip
    with GitHubBranchStateStore(client, REPO, sleep=lambda s: None) as s:
        yield s


@pytest.fixture
def other(gh: FakeGitHub) -> Iterator[GitHubBranchStateStore]:
    """The second writer: another process's store, straight to the fake."""
    with branch_store(gh) as s:
        yield s


def ours(gh: FakeGitHub) -> list[str]:
    """The headlines of the branch's commits, newest first."""
    return [c["message"].partition("\n")[0] for c in gh.log(REPO, BRANCH)]


def signal(other: GitHubBranchStateStore, run_id: str, name: str = "approved") -> None:
    """A signal delivered by another process (its own compare-and-swap loop)."""
    delta = RunDelta(updated_at=AT, signals={name: Signal(data={"by": "bob"}, received_at=AT)})
    assert isinstance(update_run(other, run_id, lambda r: delta), Updated)


@pytest.mark.parametrize("loss", ["reset", "502", "timeout"])
def test_a_put_whose_answer_was_lost_is_written_whatever_landed_after_it(
    gh: FakeGitHub, store: GitHubBranchStateStore, other: GitHubBranchStateStore,
    losing: Losing, loss: Loss,
) -> None:  # fmt: skip
    created = store.create_run(sample_record("r1"))
    assert isinstance(created, Written)
    losing.arm(lambda: signal(other, "r1"), loss=loss)
    suspended = replace(sample_record("r1"), status="suspended")
    put = store.put_run(suspended, expected_version=created.version)
    assert isinstance(put, Written), put  # not a Conflict: the signal landed after it
    assert losing.lost == 1
    assert ours(gh)[:3] == ["run r1: updated (suspended)", "run r1: suspended", "run r1: created"]
    found = other.get_run("r1")
    assert found is not None
    assert found.record.status == "suspended" and "approved" in found.record.signals
    # the look: the ref, the files at the moved head, one page of the history — no commit
    assert losing.after.count("POST /graphql") == 1
    assert [r for r in losing.after if r.endswith("/commits")] == [f"GET /repos/{REPO}/commits"]


def test_an_update_whose_answer_was_lost_is_applied_once(
    gh: FakeGitHub, store: GitHubBranchStateStore, other: GitHubBranchStateStore, losing: Losing
) -> None:
    """The engine's path (``update_run``): a conflict there re-reads and applies the change
    again — the audit event would be recorded twice, and the run told another process won."""
    assert isinstance(store.create_run(sample_record("r1")), Written)
    event = RunEvent(at=AT, tool="resume", actor="alice", detail="resumed by alice")
    losing.arm(lambda: signal(other, "r1"))
    updated = update_run(store, "r1", lambda r: RunDelta(updated_at=AT, events=(event,)))
    found = other.get_run("r1")
    assert found is not None
    assert found.record.events.count(event) == 1 and "approved" in found.record.signals
    assert isinstance(updated, Updated) and updated.attempts == 1  # no conflict was seen


def test_a_create_whose_answer_was_lost_is_written_though_another_process_moved_the_run(
    gh: FakeGitHub, store: GitHubBranchStateStore, other: GitHubBranchStateStore, losing: Losing
) -> None:
    losing.arm(lambda: signal(other, "r1"))
    created = store.create_run(sample_record("r1"))
    assert isinstance(created, Written)  # not "the run exists": it is ours
    assert ours(gh)[:2] == ["run r1: updated (running)", "run r1: created"]


def test_a_lock_acquired_whose_answer_was_lost_is_ours_though_broken_before_the_look(
    gh: FakeGitHub, store: GitHubBranchStateStore, other: GitHubBranchStateStore, losing: Losing
) -> None:
    """Without the witness the claim is gone at the look, so the key looks free and is taken
    again: a second grant, a second fence, for one acquisition."""
    losing.arm(lambda: other.break_lock("deploy"))
    got = store.acquire_lock("deploy", sample_holder("run-a"), 60_000)
    assert isinstance(got, LockAcquired)
    assert got.fence == 1
    assert ours(gh)[:2] == ["lock deploy: broken (was held by contract-suite)",
                            "lock deploy: acquired by contract-suite (fence 1)"]  # fmt: skip
    assert store.list_locks() == []  # broken: its holder learns it when it renews
    assert store.renew_lock("deploy", got.token, 60_000) is False


def test_a_lock_acquired_whose_answer_was_lost_is_ours_though_taken_over_before_the_look(
    gh: FakeGitHub, store: GitHubBranchStateStore, other: GitHubBranchStateStore, losing: Losing
) -> None:
    def taken_over() -> None:
        gh.advance_clock(5)  # GitHub's clock: the 1-second claim has lapsed
        assert isinstance(other.acquire_lock("deploy", sample_holder("run-b"), 60_000),
                          LockAcquired)  # fmt: skip

    losing.arm(taken_over)
    got = store.acquire_lock("deploy", sample_holder("run-a"), 1_000)
    assert isinstance(got, LockAcquired) and got.fence == 1
    [claim] = other.list_locks()
    assert (claim.holder.run_id, claim.fence) == ("run-b", 2)  # one grant each, in order


def test_a_release_whose_answer_was_lost_leaves_the_next_holders_claim_alone(
    gh: FakeGitHub, store: GitHubBranchStateStore, other: GitHubBranchStateStore, losing: Losing
) -> None:
    """A release looked up by content was already right (no later write makes a released
    claim ours again); on the witness's path it stays one release, and the next holder's
    claim is not released with it."""
    got = store.acquire_lock("deploy", sample_holder("run-a"), 60_000)
    assert isinstance(got, LockAcquired)
    taken: list[Any] = []
    losing.arm(lambda: taken.append(other.acquire_lock("deploy", sample_holder("run-b"), 60_000)))
    store.release_lock("deploy", got.token)
    assert isinstance(taken[0], LockAcquired)
    [claim] = store.list_locks()
    assert (claim.holder.run_id, claim.fence) == ("run-b", 2)
    assert sum(m.startswith("lock deploy: released") for m in ours(gh)) == 1


def test_a_commit_lost_before_it_reached_github_is_decided_on_the_new_head(
    gh: FakeGitHub, store: GitHubBranchStateStore, other: GitHubBranchStateStore, losing: Losing
) -> None:
    created = store.create_run(sample_record("r1"))
    assert isinstance(created, Written)
    losing.arm(lambda: signal(other, "r1"), before=True)
    put = store.put_run(replace(sample_record("r1"), status="suspended"),
                        expected_version=created.version)  # fmt: skip
    assert put == Conflict()  # a true one: the signal changed the record, ours never landed
    assert ours(gh)[0] == "run r1: updated (running)"
    losing.arm(lambda: signal(other, "r1", "other"), before=True)
    assert isinstance(store.create_run(sample_record("r2")), Written)  # another run: retried
    assert ours(gh)[:2] == ["run r2: created", "run r1: updated (running)"]


def test_a_lost_commit_that_github_applies_after_the_look_is_found_by_the_next_look(
    gh: FakeGitHub, store: GitHubBranchStateStore, losing: Losing
) -> None:
    """The look finds the head where it was (nothing landed yet), so the write is decided
    again on that head; GitHub then applies the lost commit just before the new one, which
    is refused as stale: the next look finds the first by its id. Without it the write would
    be decided a third time, on its own commit: a Conflict, and the run told another process
    changed it."""
    created = store.create_run(sample_record("r1"))
    assert isinstance(created, Written)
    losing.arm(lambda: None, late=True)
    suspended = replace(sample_record("r1"), status="suspended")
    put = store.put_run(suspended, expected_version=created.version)
    assert isinstance(put, Written), put
    assert ours(gh)[:2] == ["run r1: suspended", "run r1: created"]  # once
    found = store.get_run("r1")
    assert found is not None and found.version == put.version and found.record == suspended


def test_a_write_whose_look_failed_too_is_looked_up_first_when_sent_again(
    gh: FakeGitHub, store: GitHubBranchStateStore, other: GitHubBranchStateStore, losing: Losing
) -> None:
    """The commit's answer is lost and GitHub fails the look as well: the call fails unsure.
    The writer retries the same write (the same record, against the same version) after a
    signal landed: it is found by its witness — not a conflict, not a second commit."""
    created = store.create_run(sample_record("r1"))
    assert isinstance(created, Written)
    gh.inject(f"/repos/{REPO}/commits", 502, times=None)  # the history, for the look
    losing.arm(lambda: signal(other, "r1"))
    suspended = replace(sample_record("r1"), status="suspended")
    with pytest.raises(UnsureWriteError):
        store.put_run(suspended, expected_version=created.version)
    gh.clear_faults()
    signal(other, "r1", "later")
    again = store.put_run(suspended, expected_version=created.version)
    assert isinstance(again, Written)
    assert sum(m == "run r1: suspended" for m in ours(gh)) == 1
    found = other.get_run("r1")
    assert found is not None and {"approved", "later"} <= set(found.record.signals)
    # remembered once: the next write of it is decided afresh (a true conflict now)
    assert store.put_run(suspended, expected_version=created.version) == Conflict()


def test_every_commit_carries_a_write_id_and_the_look_walks_past_a_page(
    gh: FakeGitHub, store: GitHubBranchStateStore, other: GitHubBranchStateStore, losing: Losing
) -> None:
    """More than a page of commits between the loss and the look: the walk follows the
    history's next page, to the commit after the head it expected."""
    created = store.create_run(sample_record("r1"))
    assert isinstance(created, Written)

    def busy() -> None:
        for i in range(PER_PAGE + 5):
            assert isinstance(other.create_run(sample_record(f"o{i}")), Written)

    losing.arm(busy)
    put = store.put_run(replace(sample_record("r1"), actor="me"), expected_version=created.version)
    assert isinstance(put, Written)
    assert [r for r in losing.after if r.endswith("/commits")] == [f"GET /repos/{REPO}/commits"] * 2
    ids = [write_id_of(c["message"]) for c in gh.log(REPO, BRANCH)[:-1]]  # not the orphan README
    assert all(ids) and len(set(ids)) == len(ids)
    assert json.loads(gh.files(REPO, BRANCH)["active.json"])["runs"]["r1"]["status"] == "running"


def test_a_look_that_cannot_reach_the_expected_head_fails_unsure(
    gh: FakeGitHub, store: GitHubBranchStateStore, losing: Losing,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    created = store.create_run(sample_record("r1"))
    assert isinstance(created, Written)
    monkeypatch.setattr("zuke_gh._branch_witness.MAX_PAGES", 1)
    monkeypatch.setattr("zuke_gh._branch_witness.PER_PAGE", 2)

    def busy() -> None:
        with branch_store(gh) as other:
            for i in range(3):
                assert isinstance(other.create_run(sample_record(f"o{i}")), Written)

    losing.arm(busy)
    with pytest.raises(UnsureWriteError, match="cannot tell whether it landed"):
        store.put_run(replace(sample_record("r1"), actor="me"), expected_version=created.version)
    assert isinstance(UnsureWriteError("x"), StoreUnavailableError)  # the engine retries it
