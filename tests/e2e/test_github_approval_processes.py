"""The ``github_approval`` gate between real ``zuke`` processes and the fake GitHub.

One fake GitHub serves the module from this test process on 127.0.0.1 (``GITHUB_API_URL``
points the children at it); each test starts its own release, so each has its own issue.
People act through the fake's control calls (a comment typed in GitHub's UI). Every wait is
on an observable event: a process exiting, the wall clock passing a recorded deadline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.approval_support import (
    CLOSED,
    REPO,
    SECRET,
    SHA,
    STARTER,
    env_for,
    fake_github,
    issue_of,
    promoted,
    release,
    requests_on,
    said,
)
from tests.e2e.resume_support import (
    actions,
    fs_store,
    gate_deadline,
    lines,
    record_of,
    suspend,
    sweep,
    version_of,
    wait_past,
)
from tests.e2e.support import finish, spawn
from zuke._clock import iso, parse_iso

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gh() -> Iterator[FakeGitHub]:
    with fake_github() as fake:
        yield fake


def test_a_release_suspends_and_its_issue_appears_without_the_secret(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    gh.reset_stats()
    run_id, markers, number = release(tmp_path, gh)
    issue = issue_of(gh, run_id)
    assert issue["title"] == f"zuke: approve qa of run {run_id} ({SHA[:12]})"
    body = issue["body"]
    assert body.splitlines()[0] == f"<!-- zuke-approval run={run_id} gate=qa commit={SHA} -->"
    assert "`channel`: `beta`" in body
    assert "`maintain` role or higher" in body and f"the GitHub login `{STARTER}`" in body
    assert issue["state"] == "open" and issue["user"] == "github-actions[bot]"
    assert lines(markers / "staging") and not lines(markers / "promote")
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "suspended" and record.targets["qa"].status == "waiting"
    assert record.targets["qa"].meta["issue"] == number
    # The secret is nowhere on GitHub: not in an issue, a comment or any request it saw.
    seen_by_github = json.dumps([gh.issues(REPO), gh.comments(REPO, number), gh.requests])
    assert SECRET not in seen_by_github
    assert gh.token not in seen_by_github

    # A quiet sweep in a fresh process: one request, the batched look at every waiting gate.
    gh.reset_stats()
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert [(r["method"], r["path"], r["status"]) for r in gh.requests] == [
        ("POST", "/graphql", 200)]  # fmt: skip
    assert "0 of 1 approvals" in summary["runs"][0]["detail"]


def test_a_read_only_approve_gets_one_reply_across_two_sweeps(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, _, number = release(tmp_path, gh)
    gh.comment(REPO, number, "reader", "/approve")
    for _ in range(2):
        code, summary = sweep(tmp_path, env_for(gh))
        assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    (reply,) = said(gh, number)
    assert reply.startswith("Thank you, @reader. Your `/approve` did not count:")
    assert "`maintain` role or higher on `acme/app`, and yours is `read`" in reply
    assert record_of(fs_store(tmp_path), run_id).status == "suspended"
    assert issue_of(gh, run_id)["state"] == "open"


def test_a_maintainers_approve_resumes_the_release_and_closes_the_issue(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, markers, number = release(tmp_path, gh)
    comment_id = gh.comment(REPO, number, "maint", "/approve looks good")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "succeeded" and record.targets["promote"].status == "succeeded"
    # read_approval in the next target saw the approver, their role and their comment
    ((login, role, url),) = promoted(markers)[0]
    assert (login, role) == ("maint", "maintain")
    assert url.endswith(f"#issuecomment-{comment_id}")
    (closing,) = said(gh, number)
    assert closing.startswith(CLOSED) and "Approved by @maint (maintain)" in closing
    issue = issue_of(gh, run_id)
    assert (issue["state"], issue["state_reason"]) == ("closed", "completed")
    decision = record.targets["qa"].meta["decision"]
    assert decision["approved"] is True and decision["approvers"][0]["login"] == "maint"

    code, again = sweep(tmp_path, env_for(gh))  # a finished run is not asked again
    assert code == 0 and actions(again, run_id) == [], again
    assert len(said(gh, number)) == 1


def test_two_sweeps_at_once_resume_the_release_exactly_once(tmp_path: Path, gh: FakeGitHub) -> None:
    run_id, markers, number = release(tmp_path, gh)
    gh.comment(REPO, number, "maint", "/approve")
    argv = ["resume", "--check", "--json"]
    both = [spawn(argv, tmp_path, env_for(gh)) for _ in range(2)]
    results = [finish(p) for p in both]
    assert all(code == 0 for code, _ in results), results
    assert sum('"action": "resumed"' in out for _, out in results) == 1, results
    assert record_of(fs_store(tmp_path), run_id).status == "succeeded"
    assert len(promoted(markers)) == 1  # the release's effect ran once
    assert [b.startswith(CLOSED) for b in said(gh, number)] == [True]  # one closing comment
    closes = [r for r in requests_on(gh, number) if r["method"] == "PATCH"]
    assert len(closes) == 1 and issue_of(gh, run_id)["state"] == "closed"


def test_two_approvals_wait_for_a_second_distinct_approver(tmp_path: Path, gh: FakeGitHub) -> None:
    run_id, markers, number = release(tmp_path, gh, "--needed", "2")
    gh.comment(REPO, number, "maint", "/approve")
    gh.comment(REPO, number, "maint", "/approve again")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert "1 of 2 approvals (@maint)" in summary["runs"][0]["detail"]
    (reply,) = said(gh, number)
    assert "your approval is already counted; 1 more, by someone else, is needed" in reply

    gh.comment(REPO, number, "carol", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    assert [row[0] for row in promoted(markers)[0]] == ["maint", "carol"]
    assert "Approved by @maint (maintain), @carol (maintain)" in said(gh, number)[-1]


def test_no_self_approval_refuses_the_starter(tmp_path: Path, gh: FakeGitHub) -> None:
    run_id, _, number = release(tmp_path, gh)
    gh.comment(REPO, number, STARTER, "/approve")  # an admin, but the run's actor
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    (reply,) = said(gh, number)
    assert f"@{STARTER}" in reply and "cannot approve it (`no_self_approval()`)" in reply
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "suspended" and record.targets["qa"].meta["starter"] == STARTER


def test_a_deny_fails_the_gate_and_the_release_stops(tmp_path: Path, gh: FakeGitHub) -> None:
    run_id, markers, number = release(tmp_path, gh)
    gh.comment(REPO, number, "bob", "/deny not this week\nthe freeze is on")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 1, summary
    (entry,) = summary["runs"]
    assert (entry["id"], entry["action"], entry["result"]) == (run_id, "gate-failed", "failed")
    assert "denied by @bob (maintain): not this week" in entry["detail"]
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "failed" and record.targets["qa"].status == "failed"
    assert record.targets["promote"].status == "skipped"
    assert record.targets["qa"].meta["decision"]["deniedBy"]["login"] == "bob"
    assert not lines(markers / "promote")
    (closing,) = said(gh, number)
    assert "Denied by @bob (maintain): `not this week`" in closing
    issue = issue_of(gh, run_id)
    assert (issue["state"], issue["state_reason"]) == ("closed", "not_planned")


def test_a_deny_with_on_failure_rollback_runs_the_rollback_once(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, markers, number = release(tmp_path, gh, "--on-deny", "rollback")
    gh.comment(REPO, number, "bob", "/deny not this week")
    code, summary = sweep(tmp_path, env_for(gh))
    # one rule: a deny its declared rollback handled is no failure of the sweep (exit 0)
    assert code == 0, summary
    (entry,) = summary["runs"]
    assert (entry["id"], entry["action"], entry["result"]) == (run_id, "gate-failed", "cancelled")
    assert entry["handled"] and "ran rollback; the run is cancelled" in entry["detail"]
    assert "denied by @bob (maintain): not this week" in entry["detail"]
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "cancelled"
    assert record.targets["qa"].status == "failed"
    assert "denied by @bob (maintain): not this week" in (record.targets["qa"].error or "")
    assert record.targets["rollback"].status == "succeeded"
    assert len(lines(markers / "rollback")) == 1 and not lines(markers / "promote")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == [], summary
    assert len(lines(markers / "rollback")) == 1
    (closing,) = said(gh, number)
    assert "Denied by @bob (maintain)" in closing


def test_an_edit_after_the_comment_was_judged_or_the_decision_changes_nothing(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, markers, number = release(tmp_path, gh, "--needed", "2")
    first = gh.comment(REPO, number, "maint", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    gh.edit_comment(REPO, first, "/deny changed my mind")  # GitHub lists it again: since moved
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert "1 of 2 approvals (@maint)" in summary["runs"][0]["detail"]

    second = gh.comment(REPO, number, "carol", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    decided = record_of(fs_store(tmp_path), run_id).targets["qa"].meta["decision"]
    gh.edit_comment(REPO, second, "/deny too late")
    gh.comment(REPO, number, "bob", "/deny after the fact")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == [], summary
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "succeeded" and record.targets["qa"].meta["decision"] == decided
    assert decided["approved"] is True and [a["login"] for a in decided["approvers"]] == [
        "maint", "carol"]  # fmt: skip
    assert len(promoted(markers)) == 1 and len(said(gh, number)) == 1  # the closing comment


def test_an_owner_association_that_can_only_read_is_refused(tmp_path: Path, gh: FakeGitHub) -> None:
    run_id, _, number = release(tmp_path, gh)
    gh.comment(REPO, number, "ownerish", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    (reply,) = said(gh, number)
    assert "@ownerish" in reply and "yours is `read`" in reply
    assert record_of(fs_store(tmp_path), run_id).status == "suspended"


def test_the_gate_times_out_into_its_rollback_and_closes_the_issue(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, markers, number = release(tmp_path, gh, "--window", "3s")
    store = fs_store(tmp_path)
    wait_past(gate_deadline(record_of(store, run_id), "qa"), "the gate's deadline")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0, summary
    (entry,) = summary["runs"]
    assert (entry["id"], entry["action"], entry["result"]) == (run_id, "timed-out", "cancelled")
    record = record_of(store, run_id)
    assert record.targets["qa"].status == "failed"
    assert record.targets["rollback"].status == "succeeded"
    assert len(lines(markers / "rollback")) == 1 and not lines(markers / "promote")
    (timed_out,) = said(gh, number)
    assert timed_out.startswith(CLOSED) and "The gate timed out" in timed_out
    issue = issue_of(gh, run_id)
    assert (issue["state"], issue["state_reason"]) == ("closed", "not_planned")


def test_an_approve_on_time_swept_after_the_deadline_resumes_the_release(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, markers, number = release(tmp_path, gh, "--window", "3s")
    store = fs_store(tmp_path)
    gh.comment(REPO, number, "maint", "/approve")  # in time; nobody sweeps until later
    wait_past(gate_deadline(record_of(store, run_id), "qa"), "the gate's deadline")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0, summary
    (entry,) = summary["runs"]
    assert (entry["id"], entry["action"], entry["result"]) == (run_id, "resumed", "succeeded")
    record = record_of(store, run_id)
    assert record.targets["qa"].status == "succeeded" and "rollback" not in record.targets
    assert [row[0] for row in promoted(markers)[0]] == ["maint"]
    assert not lines(markers / "rollback")


def test_an_approve_after_the_deadline_does_not_save_the_gate(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, markers, number = release(tmp_path, gh, "--window", "3s")
    store = fs_store(tmp_path)
    deadline = parse_iso(gate_deadline(record_of(store, run_id), "qa") or "")
    assert deadline is not None
    # GitHub stamps whole seconds: a comment a good second past the deadline is late on it too
    wait_past(iso(deadline + 1500), "the gate's deadline and a second")
    gh.comment(REPO, number, "maint", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0, summary
    (entry,) = summary["runs"]
    assert (entry["id"], entry["action"], entry["result"]) == (run_id, "timed-out", "cancelled")
    assert len(lines(markers / "rollback")) == 1 and not lines(markers / "promote")
    assert "decision" not in record_of(store, run_id).targets["qa"].meta


def test_after_a_comment_each_quiet_sweep_is_one_batched_request_and_writes_nothing(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, _, number = release(tmp_path, gh)
    gh.advance_clock(60)  # a minute later, someone says something that is no command
    gh.comment(REPO, number, "carol", "Staging looks fine to me; waiting for QA.")
    store = fs_store(tmp_path)
    gh.reset_stats()
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    # the batched look (news), then the gate's own read from its cursor
    assert [(r["path"], r["status"]) for r in gh.requests] == [("/graphql", 200)] * 2
    version = version_of(store, run_id)  # the comment is judged (and the cursor kept) once

    for _ in range(2):
        gh.reset_stats()
        code, summary = sweep(tmp_path, env_for(gh))
        assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
        assert [(r["path"], r["status"]) for r in gh.requests] == [("/graphql", 200)]
        assert version_of(store, run_id) == version  # nothing new writes nothing
    assert said(gh, number) == []  # no command, no reply


def test_a_long_thread_is_read_once_and_the_next_sweeps_read_nothing_again(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, _, number = release(tmp_path, gh)
    store = fs_store(tmp_path)
    for n in range(160):
        gh.comment(REPO, number, "carol", f"note {n}")
    gh.reset_stats()
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert len(gh.requests) == 3  # the look, then two pages of the thread
    meta = record_of(store, run_id).targets["qa"].meta
    assert meta["lastId"] == gh.comments(REPO, number)[-1]["id"] and meta["cursor"]
    for _ in range(2):
        gh.reset_stats()
        code, summary = sweep(tmp_path, env_for(gh))
        assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
        assert len(gh.requests) == 1  # the look: nothing after the cursor
    assert record_of(store, run_id).targets["qa"].meta["cursor"] == meta["cursor"]


def test_a_comments_one_run_sweep_asks_github_five_times_and_no_other_gate(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    other, _, other_issue = release(tmp_path, gh)  # another release waits in the same store
    (tmp_path / "m2").mkdir()
    run_id = suspend(tmp_path, ["promote", "--markers", str(tmp_path / "m2")], env_for(gh))
    number = issue_of(gh, run_id)["number"]
    gh.comment(REPO, number, "maint", "/approve")
    gh.reset_stats()
    code, summary = sweep(tmp_path, env_for(gh), run_id)  # what the Action runs on the comment
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    assert actions(summary, other) == []
    asked = [(r["method"], r["endpoint"].split("{repo}")[-1], r["status"]) for r in gh.requests]
    assert asked == [
        ("POST", "POST /graphql", 200),  # the batched look: news on this one run's thread
        ("POST", "POST /graphql", 200),  # the thread after the gate's cursor
        ("GET", "/collaborators/{username}/permission", 200),
        ("POST", "/issues/{number}/comments", 201),  # the closing comment
        ("PATCH", "/issues/{number}", 200),  # closed
    ]
    assert requests_on(gh, other_issue) == []
