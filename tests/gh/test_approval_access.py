"""``github_approval`` when GitHub refuses the token itself: a 401, a 403 that is no rate limit
or a repository it does not show raise ``GitHubAccessError`` (the sweep goes red naming the
credential and the permission), while a rate limit or an outage stays a wait."""

from __future__ import annotations

import httpx
import pytest
import respx

from tests.gh._approval_support import SHA, Hub, Probe, gate
from tests.gh.conftest import START_MS, TOKEN, MakeClient
from zuke import NotYet, WaitFailed
from zuke._errors import TriggerAccessError
from zuke_gh import GitHubClient, RetryPolicy
from zuke_gh.errors import GitHubAccessError

LATER = START_MS + 60_000


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(maint="maintain")
    return hub


def opened(hub: Hub, make_client: MakeClient) -> Probe:
    probe = Probe()
    probe.check(gate(make_client()))
    return probe


def test_a_401_on_the_thread_is_an_access_error_naming_the_tokens_source(
    hub: Hub, router: respx.Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = Probe()
    env = {"GH_TOKEN": TOKEN, "GITHUB_API_URL": "https://api.github.com"}
    client = GitHubClient.from_env(env, transport=httpx.MockTransport(router.handler))
    probe.check(gate(client))
    hub.graphql_status = 401
    with pytest.raises(GitHubAccessError) as caught:
        probe.check(gate(client), LATER)
    said = str(caught.value)
    assert isinstance(caught.value, TriggerAccessError)
    assert said.startswith("github_approval acme/app#1: GitHub answered 401 to POST /graphql")
    assert "the token is invalid, expired or revoked: check GH_TOKEN" in said
    assert TOKEN not in said


def test_a_refused_permission_read_names_what_the_token_needs(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = opened(hub, make_client)
    hub.say(1, "maint", "/approve")
    hub.refused.add("/repos/acme/app/collaborators/maint/permission")
    before = dict(probe.meta)
    with pytest.raises(GitHubAccessError) as caught:
        probe.check(gate(make_client()), LATER)
    said = str(caught.value)
    assert "403 to GET /repos/acme/app/collaborators/maint/permission" in said
    assert "`metadata: read` on the repository" in said
    assert "actions: write" not in said  # not the client's generic hint
    probe.crash()
    assert probe.meta == before  # nothing judged: the command is read again once it can be


def test_a_team_membership_github_refuses_names_members_read(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    probe.check(gate(make_client(), lambda a: a.teams("acme/release")))
    hub.say(1, "maint", "/approve")
    hub.refused.add("/orgs/acme/teams/release/memberships/maint")
    with pytest.raises(GitHubAccessError) as caught:
        probe.check(gate(make_client(), lambda a: a.teams("acme/release")), LATER)
    assert "`members: read`" in str(caught.value) and "users()" in str(caught.value)


def test_a_repository_github_does_not_show_is_an_access_error(
    hub: Hub, router: respx.Router, make_client: MakeClient
) -> None:
    probe = opened(hub, make_client)
    missing = "Could not resolve to a Repository with the name 'acme/app'."
    error = {"type": "NOT_FOUND", "path": ["repository"], "message": missing}
    answer = {"data": {"repository": None}, "errors": [error]}
    router.post("/graphql").mock(return_value=httpx.Response(200, json=answer))
    with pytest.raises(GitHubAccessError) as caught:
        probe.check(gate(make_client()), LATER)
    said = str(caught.value)
    assert "Could not resolve to a Repository" in said
    assert "does not exist, or the token given to GitHubClient cannot see it" in said


def test_a_thread_that_is_gone_fails_the_gate(hub: Hub, make_client: MakeClient) -> None:
    probe = opened(hub, make_client)
    probe.meta["issue"] = 99
    answer = probe.check(gate(make_client()), LATER)
    assert isinstance(answer, WaitFailed) and "the thread is gone" in answer.reason


@pytest.mark.parametrize("status", [429, 502])
def test_a_rate_limit_or_an_outage_stays_a_wait(
    hub: Hub, router: respx.Router, make_client: MakeClient, status: int
) -> None:
    probe = opened(hub, make_client)
    router.post("/graphql").mock(return_value=httpx.Response(
        status, json={"message": "API rate limit exceeded" if status == 429 else "bad gateway"},
        headers={"retry-after": "3600"} if status == 429 else {}))  # fmt: skip
    answer = probe.check(gate(make_client(retry=RetryPolicy(max_attempts=1))), LATER)
    assert isinstance(answer, NotYet) and "could not ask GitHub about the comments" in (
        answer.reason or "")  # fmt: skip


def test_a_403_rate_limit_is_no_access_error(
    hub: Hub, router: respx.Router, make_client: MakeClient
) -> None:
    probe = opened(hub, make_client)
    router.post("/graphql").mock(return_value=httpx.Response(
        403, json={"message": "You have exceeded a secondary rate limit"},
        headers={"retry-after": "3600"}))  # fmt: skip
    answer = probe.check(gate(make_client(retry=RetryPolicy(max_attempts=1))), LATER)
    assert isinstance(answer, NotYet)


def test_a_repository_github_does_not_show_when_looking_for_a_lost_issue_is_an_access_error(
    hub: Hub, router: respx.Router, make_client: MakeClient
) -> None:
    probe = Probe()
    hub.fail_post = 502  # the answer lost: the next check looks for the issue
    probe.check(gate(make_client()))
    router.get("/repos/acme/app/issues").mock(
        return_value=httpx.Response(404, json={"message": "Not Found"})
    )
    with pytest.raises(GitHubAccessError) as caught:
        probe.check(gate(make_client()), LATER)
    assert "404 to GET /repos/acme/app/issues" in str(caught.value)
    assert probe.meta.get("opening") is True  # still owed a look, not failed
