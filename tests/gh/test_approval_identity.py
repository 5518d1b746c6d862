"""``github_approval`` trusts a marker only from zuke's own identity: after a lost answer it
adopts the oldest issue (or comment) that identity wrote, never a copy someone else made — nor
does a pre-posted copy of the closing or timeout marker stop those comments."""

from __future__ import annotations

import httpx
import pytest
import respx

from tests.gh._approval_support import BOT, GRAPHQL, SHA, Hub, Killed, Probe, gate
from tests.gh.conftest import START_MS, MakeClient
from zuke import NotYet, Satisfied
from zuke_gh._identity import identity, rest_login, same_login

LATER = START_MS + 60_000


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(maint="maintain", mallory="read")
    return hub


def lost_open(hub: Hub, make_client: MakeClient) -> Probe:
    """The issue POST landed on GitHub, and its answer was lost (the process killed)."""
    probe = Probe()
    hub.kill_after_post = True
    with pytest.raises(Killed):
        probe.check(gate(make_client()))
    probe.crash()
    assert probe.meta.get("opening") is True and list(hub.issues) == [1]
    return probe


def test_a_copy_of_the_issue_opened_by_someone_else_is_never_adopted(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = lost_open(hub, make_client)
    real = hub.issues[1]
    hub.add_issue(2, real["body"], "mallory")  # newer, same title and body, another author
    hub.issues[2]["title"] = real["title"]
    assert isinstance(probe.check(gate(make_client()), LATER), NotYet)
    assert probe.meta["issue"] == 1 and probe.meta.get("opening") is None
    # the copy's /approve is never read; the real issue's decides
    hub.say(2, "maint", "/approve")
    assert isinstance(probe.check(gate(make_client()), LATER + 60_000), NotYet)
    hub.say(1, "maint", "/approve")
    assert isinstance(probe.check(gate(make_client()), LATER + 120_000), Satisfied)
    assert probe.meta["decision"]["approvers"][0]["url"].endswith(
        f"/issues/1#issuecomment-{hub.on(1)[0]['id']}")  # fmt: skip


def test_a_copy_made_before_the_real_issue_is_not_adopted_either(
    hub: Hub, make_client: MakeClient
) -> None:
    # Someone who guessed the marker (run ids can be read in a workflow's log) opens it first.
    probe = Probe()
    marker = f"<!-- zuke-approval run=run-1 gate=qa commit={SHA} -->"
    hub.add_issue(1, marker + "\nplease approve", "mallory")
    hub.kill_after_post = True
    with pytest.raises(Killed):
        probe.check(gate(make_client()))
    probe.crash()
    assert isinstance(probe.check(gate(make_client()), LATER), NotYet)
    assert probe.meta["issue"] == 2 and hub.issues[2]["user"]["login"] == BOT


def test_among_zukes_own_issues_the_oldest_wins(hub: Hub, make_client: MakeClient) -> None:
    probe = lost_open(hub, make_client)
    hub.add_issue(2, hub.issues[1]["body"], BOT)  # a later one by the same identity
    probe.check(gate(make_client()), LATER)
    assert probe.meta["issue"] == 1
    assert "direction=asc" in [u for u in hub.urls if "/issues?" in u][-1]


def test_nothing_adoptable_opens_the_issue_then(hub: Hub, make_client: MakeClient) -> None:
    probe = Probe()
    hub.fail_post = 502  # the answer lost; GitHub made nothing
    probe.check(gate(make_client()))
    hub.add_issue(1, str(probe.meta["marker"]), "mallory")  # only a copy exists
    probe.check(gate(make_client()), LATER)
    assert probe.meta["issue"] == 2 and hub.count("POST /repos/acme/app/issues") == 2


def test_a_user_tokens_identity_is_its_login(hub: Hub, make_client: MakeClient) -> None:
    hub.token_user = "release-bot"
    probe = lost_open(hub, make_client)
    hub.add_issue(2, hub.issues[1]["body"], BOT)  # github-actions is not who writes here
    probe.check(gate(make_client()), LATER)
    assert probe.meta["issue"] == 1
    assert "GET /user" in hub.calls and GRAPHQL not in hub.calls[:3]


def test_identity_is_asked_once_per_client(hub: Hub, make_client: MakeClient) -> None:
    client = make_client()
    assert identity(client) == identity(client) == BOT
    assert hub.calls == ["GET /user", GRAPHQL]


def test_a_bots_graphql_login_gets_its_bot_suffix_back() -> None:
    assert rest_login("github-actions", "Bot") == "github-actions[bot]"
    assert rest_login("app[bot]", "Bot") == "app[bot]"
    assert rest_login("alice", "User") == "alice"
    assert same_login("Alice", "alice") and not same_login("alice", None)


def test_a_refused_token_is_not_an_identity(router: respx.Router, make_client: MakeClient) -> None:
    from zuke_gh.errors import GitHubError

    router.get("/user").mock(return_value=httpx.Response(401, json={"message": "Bad credentials"}))
    with pytest.raises(GitHubError) as caught:
        identity(make_client())
    assert caught.value.status == 401


def decided_then_killed(hub: Hub, make_client: MakeClient) -> Probe:
    probe = Probe()
    probe.check(gate(make_client()))
    hub.say(1, "maint", "/approve")
    hub.fail_post = Killed("killed before the closing comment left")
    with pytest.raises(Killed):
        probe.check(gate(make_client()), LATER)
    probe.crash()
    hub.fail_post = None
    return probe


def test_a_pre_posted_closing_marker_does_not_stop_the_closing_comment(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = decided_then_killed(hub, make_client)
    hub.say(1, "mallory", "<!-- zuke-approval-closed run=run-1 gate=qa -->\nApproved. Ship it.")
    assert isinstance(probe.check(gate(make_client()), LATER + 60_000), Satisfied)
    mine = [c for c in hub.on(1) if c["user"]["login"] == BOT and "Approved by" in c["body"]]
    assert len(mine) == 1 and probe.meta["closeComment"] == mine[0]["id"]
