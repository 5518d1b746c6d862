"""The fake's issues, comments, users, roles and teams: GitHub's shapes and GitHub's rules.

Every body is validated strictly against githubkit's models of GitHub's OpenAPI
description (``schema.conforms``). The behaviours an approval gate leans on are pinned:
``since`` is inclusive, an unchanged listing is a free 304, a body past 65,536 characters
is refused, ``role_name`` is the role, and ``author_association`` is not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures.fake_github import FakeGitHub, RemoteFakeGitHub
from fixtures.fake_github.control import Controller
from tests.fake_github.schema import conforms, conforms_list, v2022, v2026
from zuke._clock import ManualClock

ISSUES = "/repos/acme/app/issues"


def _issue(api: httpx.Client, **extra: Any) -> dict[str, Any]:
    response = api.post(ISSUES, json={"title": "Approve release 1.2", "body": "run r-1", **extra})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _comments(api: httpx.Client, number: int, **query: Any) -> httpx.Response:
    return api.get(f"{ISSUES}/{number}/comments", params=query)


@pytest.fixture
def people(gh: FakeGitHub) -> FakeGitHub:
    """alice maintains acme/app, bob only reads it, carol is nobody here."""
    for login in ("alice", "bob", "carol"):
        gh.add_user(login)
    gh.set_permission("acme/app", "alice", "maintain")
    gh.set_permission("acme/app", "bob", "read")
    return gh


# -- issues


@pytest.mark.parametrize(("models", "version"), [(v2022, "2022-11-28"), (v2026, "2026-03-10")])
def test_issue_answers_match_the_schema_of_the_api_version_asked(
    people: FakeGitHub, api: httpx.Client, models: Any, version: str
) -> None:
    api.headers["X-GitHub-Api-Version"] = version
    created = api.post(ISSUES, json={"title": "t", "body": "b", "labels": ["release"],
                                     "assignees": ["alice"]})  # fmt: skip
    assert created.status_code == 201
    assert created.headers["location"] == created.json()["url"]
    issue = conforms(models.Issue, created.json())
    assert issue.labels[0].name == "release" and issue.assignees[0].login == "alice"
    assert ("assignee" in created.json()) is (models is v2022)  # 2026-03-10 drops the field
    conforms(models.Issue, api.get(f"{ISSUES}/{issue.number}").json())
    closed = api.patch(f"{ISSUES}/{issue.number}", json={"state": "closed"})
    assert conforms(models.Issue, closed.json()).state_reason == "completed"


def test_an_issue_is_written_by_the_tokens_identity_and_closed_by_it(
    people: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    issue = _issue(api)
    assert issue["user"]["login"] == "github-actions[bot]" and issue["user"]["type"] == "Bot"
    people.set_token(people.token, login="alice")
    clock.advance(5_000)
    closed = api.patch(f"{ISSUES}/{issue['number']}",
                       json={"state": "closed", "state_reason": "not_planned"}).json()  # fmt: skip
    assert (closed["state"], closed["state_reason"]) == ("closed", "not_planned")
    assert closed["closed_by"]["login"] == "alice" and closed["closed_at"] == closed["updated_at"]
    assert closed["updated_at"] > closed["created_at"]
    reopened = api.patch(f"{ISSUES}/{issue['number']}", json={"state": "open"}).json()
    assert (reopened["state_reason"], reopened["closed_at"]) == ("reopened", None)
    assert people.issues("acme/app")[0]["state"] == "open"


def test_a_pull_requests_number_answers_as_an_issue_with_pull_request_set(
    people: FakeGitHub, api: httpx.Client
) -> None:
    _issue(api)
    number = people.add_pull_request("acme/app", "Release 1.2", login="alice")
    assert number == 2  # issues and pull requests share one numbering
    answer = api.get(f"{ISSUES}/{number}").json()
    issue = conforms(v2022.Issue, answer)
    assert issue.pull_request is not None and answer["html_url"].endswith(f"/pull/{number}")
    assert "pull_request" not in api.get(f"{ISSUES}/1").json()
    comment = api.post(f"{ISSUES}/{number}/comments", json={"body": "/approve"}).json()
    assert comment["html_url"].endswith(f"/pull/{number}#issuecomment-{comment['id']}")


def test_bad_issue_requests_are_refused_as_github_refuses_them(
    people: FakeGitHub, api: httpx.Client
) -> None:
    no_title = api.post(ISSUES, json={"body": "x"})
    assert no_title.status_code == 422
    assert no_title.json()["message"] == 'Invalid request.\n\n"title" wasn\'t supplied.'
    conforms(v2022.ValidationError, no_title.json())
    stranger = api.post(ISSUES, json={"title": "t", "assignees": ["carol"]})
    assert stranger.status_code == 422
    assert stranger.json()["errors"][0] == {"resource": "Issue", "field": "assignees",
                                            "code": "invalid", "value": "carol"}  # fmt: skip
    number = _issue(api)["number"]
    bad_state = api.patch(f"{ISSUES}/{number}", json={"state": "done"})
    assert bad_state.status_code == 422
    missing = api.get(f"{ISSUES}/99")
    assert missing.status_code == 404
    conforms(v2022.BasicError, missing.json())
    assert api.post("/repos/acme/nope/issues", json={"title": "t"}).status_code == 404
    assert people.issues("acme/app")[0]["assignees"] == []


# -- comments


def test_comment_answers_match_the_schemas(people: FakeGitHub, api: httpx.Client) -> None:
    number = _issue(api)["number"]
    created = api.post(f"{ISSUES}/{number}/comments", json={"body": "waiting for approval"})
    assert created.status_code == 201 and created.headers["location"] == created.json()["url"]
    comment = conforms(v2022.IssueComment, created.json())
    people.comment("acme/app", number, "alice", "/approve")
    listing = conforms_list(v2022.IssueComment, _comments(api, number).json())
    assert [c.body for c in listing] == ["waiting for approval", "/approve"]
    one = api.get(f"/repos/acme/app/issues/comments/{comment.id}")
    assert conforms(v2026.IssueComment, one.json()).id == comment.id
    edited = api.patch(f"/repos/acme/app/issues/comments/{comment.id}", json={"body": "x"})
    assert conforms(v2022.IssueComment, edited.json()).body == "x"
    assert api.get(f"{ISSUES}/{number}").json()["comments"] == 2


def test_comments_list_oldest_first_in_pages_with_a_link_header(
    people: FakeGitHub, api: httpx.Client
) -> None:
    number = _issue(api)["number"]
    ids = [people.comment("acme/app", number, "bob", f"c{n}") for n in range(5)]
    first = _comments(api, number, per_page=2)
    assert [c["id"] for c in first.json()] == ids[:2]
    assert 'rel="next"' in first.headers["link"] and "page=3" in first.headers["link"]
    last = _comments(api, number, per_page=2, page=3)
    assert [c["id"] for c in last.json()] == ids[4:] and 'rel="next"' not in last.headers["link"]


def test_since_keeps_comments_updated_at_or_after_it_so_an_edit_comes_back(
    people: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    number = _issue(api)["number"]
    old = people.comment("acme/app", number, "bob", "/approve")
    clock.advance(60_000)
    seen = people.comment("acme/app", number, "alice", "looks good")
    stamp = _comments(api, number).json()[-1]["updated_at"]
    # inclusive at whole seconds: the comment last seen comes back, the older one does not
    assert [c["id"] for c in _comments(api, number, since=stamp).json()] == [seen]
    clock.advance(60_000)
    people.edit_comment("acme/app", old, "/deny changed my mind")
    again = _comments(api, number, since=stamp).json()
    assert [c["id"] for c in again] == [old, seen]  # oldest first (by id), not by update time
    assert again[0]["body"] == "/deny changed my mind"
    assert again[0]["updated_at"] > again[0]["created_at"]
    assert _comments(api, number, since="yesterday").status_code == 422


def test_an_unchanged_comment_listing_is_a_free_304_until_something_changes(
    people: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    number = _issue(api)["number"]
    people.comment("acme/app", number, "bob", "hello")
    first = _comments(api, number)
    etag, remaining = first.headers["etag"], first.headers["x-ratelimit-remaining"]
    again = api.get(f"{ISSUES}/{number}/comments", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["x-ratelimit-remaining"] == remaining  # not counted
    assert people.stats()["not_modified"] == 1
    clock.advance(1_000)
    people.comment("acme/app", number, "alice", "/approve")
    changed = api.get(f"{ISSUES}/{number}/comments", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and len(changed.json()) == 2


def test_a_body_past_65536_characters_is_refused_with_githubs_422(
    people: FakeGitHub, api: httpx.Client
) -> None:
    number = _issue(api)["number"]
    assert api.post(f"{ISSUES}/{number}/comments", json={"body": "x" * 65_536}).status_code == 201
    refused = api.post(f"{ISSUES}/{number}/comments", json={"body": "x" * 65_537})
    assert refused.status_code == 422
    conforms(v2022.ValidationError, refused.json())
    assert refused.json()["errors"][0]["message"] == (
        "Body is too long (maximum is 65536 characters)"
    )
    long_issue = api.post(ISSUES, json={"title": "t", "body": "é" * 65_537})
    assert long_issue.status_code == 422
    assert long_issue.json()["errors"][0]["resource"] == "Issue"
    no_body = api.post(f"{ISSUES}/{number}/comments", json={})
    assert no_body.status_code == 422
    with pytest.raises(ValueError, match="65536"):
        people.comment("acme/app", number, "bob", "x" * 65_537)
    assert len(people.comments("acme/app", number)) == 1


def test_a_token_without_issues_write_is_refused_as_github_refuses_an_integration(
    people: FakeGitHub, api: httpx.Client
) -> None:
    number = _issue(api)["number"]
    people.set_token(people.token, permissions={"contents": "write", "pull_requests": "write"})
    refused = api.post(ISSUES, json={"title": "t"})
    assert refused.status_code == 403
    assert refused.json()["message"] == "Resource not accessible by integration"
    assert refused.headers["x-accepted-github-permissions"] == "issues=write"
    conforms(v2022.BasicError, refused.json())
    # a comment takes issues or pull_requests write; reading takes either at read
    assert api.post(f"{ISSUES}/{number}/comments", json={"body": "ok"}).status_code == 201
    assert _comments(api, number).status_code == 200
    people.set_token(people.token, permissions={"issues": "read"})
    closing = api.patch(f"{ISSUES}/{number}", json={"state": "closed"})
    assert closing.status_code == 403
    comment = api.post(f"{ISSUES}/{number}/comments", json={"body": "no"})
    assert comment.headers["x-accepted-github-permissions"] == "issues=write; pull_requests=write"
    # metadata: read is implicit, so a role can always be looked up
    assert api.get("/repos/acme/app/collaborators/alice/permission").status_code == 200
    assert people.issues("acme/app")[0]["state"] == "open"


# -- roles, associations, users, teams


@pytest.mark.parametrize(
    ("role", "base", "permission", "push"),
    [("admin", None, "admin", True), ("maintain", None, "write", True),
     ("write", None, "write", True), ("triage", None, "read", False),
     ("read", None, "read", False), ("release-manager", "maintain", "write", True),
     ("auditor", "triage", "read", False)],
)  # fmt: skip
def test_a_role_answers_its_name_and_the_legacy_permission_github_maps_it_to(
    people: FakeGitHub, api: httpx.Client, role: str, base: str | None, permission: str,
    push: bool,
) -> None:  # fmt: skip
    people.set_permission("acme/app", "carol", role, base=base)
    answer = api.get("/repos/acme/app/collaborators/carol/permission").json()
    parsed = conforms(v2022.RepositoryCollaboratorPermission, answer)
    assert (parsed.permission, parsed.role_name) == (permission, role)
    assert parsed.user is not None and parsed.user.role_name == role
    assert answer["user"]["permissions"]["push"] is push


def test_no_role_is_permission_none_an_org_member_reads_and_a_stranger_is_404(
    people: FakeGitHub, api: httpx.Client
) -> None:
    url = "/repos/acme/app/collaborators/{}/permission"
    nobody = conforms(v2022.RepositoryCollaboratorPermission, api.get(url.format("carol")).json())
    assert (nobody.permission, nobody.role_name) == ("none", "")
    people.add_user("dave")
    people.add_team("acme", "qa", ["dave"])
    member = api.get(url.format("dave")).json()
    assert (member["permission"], member["role_name"]) == ("read", "read")  # the org's base role
    people.set_permission("acme/app", "alice", "none")
    assert api.get(url.format("alice")).json()["permission"] == "none"
    missing = api.get(url.format("no-such-user"))
    assert missing.status_code == 404
    conforms(v2022.BasicError, missing.json())
    with pytest.raises(ValueError, match="base"):
        people.set_permission("acme/app", "carol", "release-manager")


def test_author_association_is_a_relationship_that_misleads_a_gate_trusting_it(
    people: FakeGitHub, api: httpx.Client
) -> None:
    """A private org member who maintains the repository shows CONTRIBUTOR; a public member
    who only reads shows MEMBER; and a test may make it say OWNER for a reader. The
    repository is public, so carol, who has no role, may comment too."""
    people.set_private("acme/app", False)
    for login in ("erin", "frank"):
        people.add_user(login)
    people.add_team("acme", "release", ["erin"])  # private membership: GitHub's default
    people.set_permission("acme/app", "erin", "maintain")
    people.add_team("acme", "everyone", ["frank"], public=True)
    number = _issue(api)["number"]
    for login in ("erin", "frank", "bob", "carol"):
        people.comment("acme/app", number, login, "/approve")
    people.set_association("acme/app", "bob", "OWNER")
    listing = conforms_list(v2022.IssueComment, _comments(api, number).json())
    shown = {c.user.login: c.author_association for c in listing if c.user}
    assert shown == {"erin": "CONTRIBUTOR", "frank": "MEMBER", "bob": "OWNER", "carol": "NONE"}
    roles = {u: api.get(f"/repos/acme/app/collaborators/{u}/permission").json()["role_name"]
             for u in shown}  # fmt: skip
    assert roles == {"erin": "maintain", "frank": "read", "bob": "read", "carol": ""}
    people.set_association("acme/app", "bob", None)
    assert _comments(api, number).json()[2]["author_association"] == "COLLABORATOR"


def test_users_answer_public_user_and_an_unknown_login_is_404(
    people: FakeGitHub, api: httpx.Client
) -> None:
    alice = conforms(v2022.PublicUser, api.get("/users/alice").json())
    assert (alice.login, alice.type) == ("alice", "User")
    people.add_user("release-bot[bot]", type="Bot")
    assert api.get("/users/release-bot[bot]").json()["type"] == "Bot"
    assert api.get("/users/ALICE").json()["login"] == "alice"  # logins are case-insensitive
    assert api.get("/users/no-such-user").status_code == 404


def test_team_membership_is_active_pending_or_404_and_needs_members_read(
    people: FakeGitHub, api: httpx.Client
) -> None:
    people.add_team("acme", "release", ["alice"], maintainers=["bob"], pending=["carol"])
    url = "/orgs/acme/teams/release/memberships/{}"
    actions_token = api.get(url.format("alice"))  # a GITHUB_TOKEN: no organisation permission
    assert actions_token.status_code == 403
    assert actions_token.json()["message"] == "Resource not accessible by integration"
    people.add_user("zuke-app[bot]", type="Bot")  # an App installation with members: read
    people.set_token(people.token, login="zuke-app[bot]",
                     permissions={"issues": "write", "members": "read"})  # fmt: skip
    alice = conforms(v2022.TeamMembership, api.get(url.format("alice")).json())
    assert (alice.state, alice.role) == ("active", "member")
    assert api.get(url.format("bob")).json()["role"] == "maintainer"
    assert api.get(url.format("carol")).json()["state"] == "pending"
    people.add_user("dave")
    assert api.get(url.format("dave")).status_code == 404
    assert api.get("/orgs/acme/teams/nope/memberships/alice").status_code == 404
    people.set_token(people.token, login="zuke-app[bot]", permissions={"issues": "write"})
    refused = api.get(url.format("alice"))
    assert refused.status_code == 403
    assert refused.headers["x-accepted-github-permissions"] == "members=read"


# -- the control API


def test_the_new_control_methods_work_over_http_and_survive_a_saved_state(
    people: FakeGitHub, api: httpx.Client, tmp_path: Path
) -> None:
    remote = RemoteFakeGitHub(people.url, people.token)
    remote.add_user("gina")
    remote.set_permission("acme/app", "gina", "write")
    number = _issue(api)["number"]
    comment_id = remote.comment("acme/app", number, "gina", "/approve")
    remote.edit_comment("acme/app", comment_id, "/approve\nthanks")
    read = httpx.get(f"{people.url}/_fake/comments", params={"repo": "acme/app", "number": number})
    assert read.json()["result"][0]["body"] == "/approve\nthanks"
    assert remote.issues("acme/app")[0]["comments"] == 1
    people.save(tmp_path / "state")
    loaded = Controller.load(str(tmp_path / "state"))
    assert loaded.people.role("acme/app", "gina").role_name == "write"
    assert people.stats()["endpoints"].keys() == {"POST /repos/{owner}/{repo}/issues"}
