"""``github_approval``: the approval issue — opened once, durably first, found again after a
crash, owed when GitHub certainly did nothing, refused with a hint; or a comment on a named
thread."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from tests.gh._approval_support import BOT, GRAPHQL, SHA, Hub, Killed, Probe, gate
from tests.gh.conftest import START_MS, MakeClient
from zuke import NotYet, WaitFailed
from zuke_gh import RetryPolicy
from zuke_gh._approval_text import parse_marker


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    monkeypatch.setenv("GITHUB_RUN_ID", "777")
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/app")
    monkeypatch.delenv("ZUKE_BUILD_ID", raising=False)
    return Hub(router)


def test_the_first_check_persists_the_marker_then_opens_one_issue_that_says_what_and_how(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe(params={"env": "prod", "note": "@everyone <b>x</b>"})
    posts: list[str] = []
    trigger = gate(make_client(), lambda a: a.approvals(2).no_self_approval())
    answer = probe.check(trigger)
    assert isinstance(answer, NotYet) and "0 of 2 approvals" in (answer.reason or "")
    posts = [c for c in hub.calls if c.startswith("POST")]
    assert posts == ["POST /repos/acme/app/issues"]
    # The marker, the commit and the starter were durable before the POST.
    assert probe.events[0] == "persist"
    issue = hub.issues[1]
    marker = f"<!-- zuke-approval run=run-1 gate=qa commit={SHA} -->"
    assert issue["body"].splitlines()[0] == marker
    assert parse_marker(issue["body"]) == {"run": "run-1", "gate": "qa", "commit": SHA}
    body = issue["body"]
    for said in ("`qa`", "`run-1`", f"`{SHA}`",
                 "`https://github.com/acme/app/actions/runs/777`",
                 "`env`: `prod`", "`write` role or higher on `acme/app`",
                 "except @starter", "2 approvals by different people", "`/approve`",
                 "`/deny <reason>`", "2023-11-17T22:13:20"):  # fmt: skip
        assert said in body, said
    # A parameter's value is shown as code: no mention, no HTML of its own.
    assert "`@everyone <b>x</b>`" in body
    assert probe.meta["issue"] == 1 and probe.meta["starter"] == "starter"
    assert probe.meta["repo"] == "acme/app" and probe.meta["commit"] == SHA

    # The check that opened it asked nothing more; another process (a fresh trigger and client,
    # the same record) only reads the comments.
    assert hub.calls == ["POST /repos/acme/app/issues"]
    again = probe.check(gate(make_client()), START_MS + 60_000)
    assert isinstance(again, NotYet)
    assert hub.calls == ["POST /repos/acme/app/issues", GRAPHQL]


def test_a_crash_after_the_issue_was_made_finds_it_by_its_marker_instead_of_opening_another(
    hub: Hub, make_client: MakeClient
) -> None:
    hub.add_issue(1, "someone else's issue <!-- zuke-approval run=run-2 gate=qa commit=x -->")
    probe = Probe()
    hub.kill_after_post = True
    with pytest.raises(Killed):
        probe.check(gate(make_client()))
    probe.crash()
    assert probe.meta.get("opening") is True and "issue" not in probe.meta

    answer = probe.check(gate(make_client()), START_MS + 60_000)
    assert isinstance(answer, NotYet)
    assert hub.count("POST /repos/acme/app/issues") == 1  # never a second issue
    assert hub.count("GET /repos/acme/app/issues") == 1  # one listing found it
    assert probe.meta["issue"] == 2 and probe.meta.get("opening") is None


def test_a_crash_before_the_issue_was_made_looks_once_then_opens_it(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    hub.fail_post = Killed("killed before the POST left")
    with pytest.raises(Killed):
        probe.check(gate(make_client()))
    probe.crash()
    assert not hub.issues

    probe.check(gate(make_client()), START_MS + 60_000)
    assert list(hub.issues) == [1]
    # who the token writes as (an installation token: its bot, by GraphQL), then the look
    assert hub.calls == ["POST /repos/acme/app/issues", "GET /user", GRAPHQL,
                         "GET /repos/acme/app/issues", "POST /repos/acme/app/issues"]  # fmt: skip


def test_an_open_that_never_reached_github_is_owed_and_made_at_the_next_check_without_looking(
    hub: Hub, make_client: MakeClient
) -> None:
    hub.fail_post = httpx.ConnectError("connection refused")
    probe = Probe()
    trigger = gate(make_client(retry=RetryPolicy(max_attempts=1)))
    answer = probe.check(trigger)
    assert isinstance(answer, NotYet) and "a later check opens it" in (answer.reason or "")
    assert probe.meta["opening"] is False
    probe.check(trigger, START_MS + 60_000)
    assert list(hub.issues) == [1]
    assert "GET /repos/acme/app/issues" not in hub.calls  # nothing to look for
    assert probe.events.count("persist") == 2  # the intent is durable again before the POST


def test_an_open_whose_answer_was_lost_is_looked_for_and_never_made_twice(
    hub: Hub, make_client: MakeClient
) -> None:
    hub.fail_post = 502
    probe = Probe()
    answer = probe.check(gate(make_client()))
    assert isinstance(answer, NotYet) and "looks for it" in (answer.reason or "")
    hub.add_issue(1, str(probe.meta["marker"]), BOT)  # it had landed after all
    probe.check(gate(make_client()), START_MS + 60_000)
    assert probe.meta["issue"] == 1
    assert hub.count("POST /repos/acme/app/issues") == 1


@pytest.mark.parametrize(
    ("status", "hint"), [(410, "Issues are disabled"), (403, "`issues: write`")]
)
def test_a_refused_open_fails_the_gate_with_what_to_do(
    hub: Hub, make_client: MakeClient, status: int, hint: str
) -> None:
    hub.fail_post = status
    answer = Probe().check(gate(make_client()))
    assert isinstance(answer, WaitFailed)
    assert "GitHub refused to open the approval issue" in answer.reason and hint in answer.reason
    # this call's hint alone: not the client's generic one about dispatches and the state branch
    assert "actions: write" not in answer.reason and "contents: write" not in answer.reason


def test_a_named_thread_that_is_not_there_fails_the_gate_naming_it(
    hub: Hub, make_client: MakeClient
) -> None:
    hub.fail_post = 404
    answer = Probe().check(gate(make_client(), lambda a: a.on_issue(9)))
    assert isinstance(answer, WaitFailed)
    assert "GitHub refused to comment on #9" in answer.reason
    assert "Check that #9 exists in acme/app" in answer.reason


def test_on_pull_request_comments_on_the_thread_counts_only_later_comments_and_never_closes_it(
    hub: Hub, make_client: MakeClient
) -> None:
    hub.roles.update(old="write", maint="maintain")
    hub.add_issue(42)
    earlier = hub.say(42, "old", "/approve")  # before the gate asked: it does not count
    probe = Probe()
    trigger = gate(make_client(), lambda a: a.on_pull_request(42))
    answer = probe.check(trigger)
    assert isinstance(answer, NotYet)
    assert hub.count("POST /repos/acme/app/issues") == 0
    request = hub.on(42)[-1]
    assert request["body"].startswith("<!-- zuke-approval run=run-1 gate=qa")
    assert probe.meta["issue"] == 42 and probe.meta["requestId"] == request["id"]

    # A comment from before the gate asked, edited since (listed again): still not counted.
    hub.edit(earlier["id"], "/approve\nedited")
    assert isinstance(probe.check(trigger, START_MS + 30_000), NotYet)
    hub.say(42, "maint", "/approve")
    passed = probe.check(trigger, START_MS + 60_000)
    assert not isinstance(passed, (NotYet, WaitFailed))
    assert [a["login"] for a in probe.meta["decision"]["approvers"]] == ["maint"]
    assert "Approved by @maint (maintain)" in hub.on(42)[-1]["body"]
    assert hub.issues[42]["state"] == "open"  # someone's pull request is never closed
    assert not any(c.startswith("PATCH") for c in hub.calls)


def test_a_repository_left_out_is_github_repository_when_the_issue_opens_and_stays_recorded(
    hub: Hub, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zuke_gh import github_approval

    client = make_client()
    trigger = github_approval(lambda a: a.client(lambda: client))
    probe = Probe()
    probe.check(trigger)
    assert probe.meta["repo"] == "acme/app" and hub.issues
    monkeypatch.setenv("GITHUB_REPOSITORY", "other/place")  # a sweep elsewhere: the record wins
    probe.check(trigger, START_MS + 60_000)
    assert hub.queries[-1]["variables"]["owner"] == "acme"
    assert hub.queries[-1]["variables"]["name"] == "app"
    assert not [c for c in hub.calls if "other/place" in c]

    monkeypatch.delenv("GITHUB_REPOSITORY")
    nowhere = Probe().check(trigger)
    assert isinstance(nowhere, WaitFailed)
    assert nowhere.reason == (
        'github_approval: no repository: set a.repo("owner/name") or GITHUB_REPOSITORY'
    )


def test_the_issue_title_names_the_gate_run_and_commit(hub: Hub, make_client: MakeClient) -> None:
    Probe().check(gate(make_client()))
    assert hub.issues[1]["title"] == f"zuke: approve qa of run run-1 ({SHA[:12]})"
    assert json.dumps(hub.issues[1]).count("zuke-approval run=run-1") == 1
