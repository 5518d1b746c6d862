"""Adversaries and second writers on the fake GitHub: other people's issues and tokens,
comment floods, edits and deletions, roles that change while a gate waits, and the
pagination a reader must walk to see all of it. Real HTTP; bodies schema-checked."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fixtures.fake_github import FakeGitHub, RemoteFakeGitHub
from tests.fake_github.schema import conforms, conforms_list, v2022
from zuke._clock import ManualClock

ISSUES = "/repos/acme/app/issues"
MARKER = "<!-- zuke-approval run=r-1 gate=qa -->"


def _as(gh: FakeGitHub, token: str) -> httpx.Client:
    """Another client sending exactly what ``api`` sends, but for ``token``."""
    headers = {"Authorization": f"Bearer {token}", "X-GitHub-Api-Version": "2022-11-28"}
    return httpx.Client(base_url=gh.url, headers=headers, timeout=10)


@pytest.fixture
def crowd(gh: FakeGitHub) -> FakeGitHub:
    """maint maintains acme/app; mallory has a token of her own and no role; the repo is
    public, so she may open issues and comment as anyone may."""
    gh.add_user("maint")
    gh.set_permission("acme/app", "maint", "maintain")
    gh.set_private("acme/app", False)
    return gh


def test_anyone_opens_an_issue_copying_a_marker_and_their_labels_are_dropped(
    crowd: FakeGitHub, api: httpx.Client
) -> None:
    real = api.post(ISSUES, json={"title": "Approve r-1", "body": MARKER, "labels": ["zuke"]})
    assert real.json()["labels"][0]["name"] == "zuke"  # the workflow's token may label
    with _as(crowd, crowd.add_user_token("mallory")) as mallory:
        copy = mallory.post(ISSUES, json={"title": "Approve r-1", "body": MARKER,
                                          "labels": ["zuke"], "assignees": ["maint"]})  # fmt: skip
        assert copy.status_code == 201
        made = conforms(v2022.Issue, copy.json())
        assert made.user is not None and (made.user.login, made.user.type) == ("mallory", "User")
        assert (made.labels, made.assignees) == ([], [])  # "silently dropped"
        assert made.author_association == "NONE"
        # she may not close or retitle the workflow's issue, only her own
        theirs = mallory.patch(f"{ISSUES}/{real.json()['number']}", json={"state": "closed"})
        assert theirs.status_code == 403
        assert mallory.patch(f"{ISSUES}/{made.number}", json={"title": "mine"}).status_code == 200
    crowd.add_user("eve")
    other = crowd.open_issue("acme/app", "Approve r-1", login="eve", body=MARKER, labels=["zuke"])
    summary = crowd.issues("acme/app")[-1]
    assert (summary["number"], summary["user"], summary["labels"]) == (other, "eve", [])
    crowd.edit_issue("acme/app", other, body=MARKER + "\nedited")
    assert crowd.issues("acme/app")[-1]["body"].endswith("edited")


def test_a_private_repository_needs_a_role_even_to_open_an_issue(crowd: FakeGitHub) -> None:
    crowd.set_private("acme/app", True)
    crowd.add_user("eve")
    with pytest.raises(Exception, match="cannot see the private"):
        crowd.open_issue("acme/app", "x", login="eve")
    crowd.set_permission("acme/app", "eve", "read")
    assert crowd.open_issue("acme/app", "x", login="eve") == 1


def test_a_flood_is_many_comments_within_a_second_in_id_and_time_order(
    crowd: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    number = api.post(ISSUES, json={"title": "t"}).json()["number"]
    before = crowd.now_ms()
    ids = crowd.flood("acme/app", number, "maint", 120, body="noise {i}")
    assert len(ids) == 120 and ids == sorted(ids)
    listed = crowd.comments("acme/app", number)
    stamps = [c["created_ms"] for c in listed]
    assert stamps == sorted(stamps) and stamps[-1] - stamps[0] < 1000
    assert crowd.now_ms() >= stamps[-1] >= before  # GitHub's clock is past the burst
    assert listed[7]["body"] == "noise 7"
    remote = RemoteFakeGitHub(crowd.url, crowd.token)
    assert len(remote.flood("acme/app", number, "maint", 3)) == 3  # the same over HTTP


def test_a_comment_is_edited_and_deleted_by_its_author_or_a_maintainer_only(
    crowd: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    number = api.post(ISSUES, json={"title": "t"}).json()["number"]
    ours = api.post(f"{ISSUES}/{number}/comments", json={"body": "waiting"}).json()
    mallory_token = crowd.add_user_token("mallory")
    with _as(crowd, mallory_token) as mallory:
        hers = mallory.post(f"{ISSUES}/{number}/comments", json={"body": "/approve"}).json()
        url = f"/repos/acme/app/issues/comments/{ours['id']}"
        assert mallory.patch(url, json={"body": "/approve"}).status_code == 403
        assert mallory.delete(url).status_code == 403
        clock.advance(2_000)
        edited = mallory.patch(f"/repos/acme/app/issues/comments/{hers['id']}",
                               json={"body": "/deny"})  # fmt: skip
        assert edited.status_code == 200
        after = conforms(v2022.IssueComment, edited.json())
        assert after.updated_at > after.created_at and after.body == "/deny"
    with _as(crowd, crowd.add_user_token("maint")) as maint:  # write access moderates
        assert maint.delete(f"/repos/acme/app/issues/comments/{hers['id']}").status_code == 204
    assert api.get(f"/repos/acme/app/issues/comments/{hers['id']}").status_code == 404
    assert [c["id"] for c in api.get(f"{ISSUES}/{number}/comments").json()] == [ours["id"]]
    assert api.get(f"{ISSUES}/{number}").json()["comments"] == 1
    crowd.delete_comment("acme/app", ours["id"])  # someone in the UI
    assert api.get(f"{ISSUES}/{number}/comments").json() == []
    assert crowd.stats()["endpoints"]["DELETE /repos/{owner}/{repo}/issues/comments/{comment_id}"]


def test_roles_and_team_memberships_change_while_a_gate_waits(
    crowd: FakeGitHub, api: httpx.Client
) -> None:
    crowd.add_user("zuke-app[bot]", type="Bot")
    grant = {"members": "read", "issues": "write"}
    crowd.set_token(crowd.token, login="zuke-app[bot]", permissions=grant)
    crowd.add_team("acme", "release", ["maint"])
    team = "/orgs/acme/teams/release/memberships/maint"
    permission = "/repos/acme/app/collaborators/maint/permission"
    assert api.get(team).json()["state"] == "active"
    assert api.get(permission).json()["role_name"] == "maintain"
    crowd.set_team_membership("acme", "release", "maint", role=None)  # left the team
    assert api.get(team).status_code == 404
    crowd.set_permission("acme/app", "maint", "triage")  # demoted
    answer = conforms(v2022.RepositoryCollaboratorPermission, api.get(permission).json())
    assert (answer.role_name, answer.permission) == ("triage", "read")
    crowd.set_team_membership("acme", "release", "maint", role="maintainer", state="pending")
    assert api.get(team).json() == {"url": api.get(team).json()["url"],
                                    "role": "maintainer", "state": "pending"}  # fmt: skip


def test_author_association_keeps_misleading_after_a_role_change(
    crowd: FakeGitHub, api: httpx.Client
) -> None:
    number = api.post(ISSUES, json={"title": "t"}).json()["number"]
    crowd.comment("acme/app", number, "maint", "/approve")
    crowd.add_team("acme", "release", ["maint"])  # a private org member now: CONTRIBUTOR
    shown = api.get(f"{ISSUES}/{number}/comments").json()[0]["author_association"]
    assert shown == "CONTRIBUTOR"  # though she maintains the repository


# -- pagination


def _pages(api: httpx.Client, path: str, **query: Any) -> list[httpx.Response]:
    answers = [api.get(path, params=query)]
    while 'rel="next"' in answers[-1].headers.get("link", ""):
        links = {}
        for part in answers[-1].headers["link"].split(", "):
            url, rel = part.split("; ")
            links[rel] = url.strip("<>")
        answers.append(api.get(links['rel="next"']))
    return answers


def test_link_headers_walk_every_page_at_most_100_a_page(
    crowd: FakeGitHub, api: httpx.Client
) -> None:
    number = api.post(ISSUES, json={"title": "t"}).json()["number"]
    ids = crowd.flood("acme/app", number, "maint", 250)
    pages = _pages(api, f"{ISSUES}/{number}/comments", per_page=500)  # clamped to 100
    assert [len(p.json()) for p in pages] == [100, 100, 50]
    assert [c["id"] for p in pages for c in p.json()] == ids
    link = pages[1].headers["link"]
    rels = [part.split('rel="')[1].rstrip('"') for part in link.split(", ")]
    assert rels == ["prev", "next", "last", "first"]
    assert "page=3" in link.split(", ")[2] and "per_page=500" in link
    assert api.get(f"{ISSUES}/{number}/comments", params={"page": 99}).json() == []
    conforms_list(v2022.IssueComment, pages[2].json())


def test_an_unchanged_first_page_is_a_304_while_the_last_page_grows(
    crowd: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    """The blind-cursor hazard (issue 24 §3): a burst fills page 1, then page 1's ETag never
    changes again; what arrives later is only on the last page. ETags are per page and per
    token."""
    number = api.post(ISSUES, json={"title": "t"}).json()["number"]
    crowd.flood("acme/app", number, "maint", 100)
    path = f"{ISSUES}/{number}/comments"
    page1 = api.get(path, params={"per_page": 100})
    clock.advance(5_000)
    crowd.comment("acme/app", number, "maint", "/approve")
    again = api.get(
        path, params={"per_page": 100}, headers={"If-None-Match": page1.headers["etag"]}
    )
    assert again.status_code == 304  # the /approve is not on page 1
    page2 = api.get(path, params={"per_page": 100, "page": 2})
    assert [c["body"] for c in page2.json()] == ["/approve"]
    assert page2.headers["etag"] != page1.headers["etag"]
    with _as(crowd, crowd.add_user_token("maint")) as other:
        assert (
            other.get(
                path, params={"per_page": 100}, headers={"If-None-Match": page1.headers["etag"]}
            ).status_code
            == 200
        )


def test_the_repository_comment_listing_sorts_and_filters_since(
    crowd: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    a = api.post(ISSUES, json={"title": "a"}).json()["number"]
    b = api.post(ISSUES, json={"title": "b"}).json()["number"]
    first = crowd.comment("acme/app", a, "maint", "one")
    clock.advance(2_000)
    second = crowd.comment("acme/app", b, "maint", "two")
    clock.advance(2_000)
    crowd.edit_comment("acme/app", first, "one, edited")
    listing = "/repos/acme/app/issues/comments"
    assert [c["id"] for c in api.get(listing).json()] == [first, second]  # ascending id
    by_update = api.get(listing, params={"sort": "updated", "direction": "desc"}).json()
    assert [c["id"] for c in by_update] == [first, second]
    by_creation = api.get(listing, params={"sort": "created", "direction": "asc"}).json()
    assert [c["id"] for c in by_creation] == [first, second]
    newest = api.get(listing, params={"sort": "created"}).json()
    assert [c["id"] for c in newest] == [second, first]
    stamp = by_update[0]["updated_at"]
    assert [c["id"] for c in api.get(listing, params={"since": stamp}).json()] == [first]
    assert api.get(listing, params={"sort": "comments"}).status_code == 422
    assert api.get(f"{ISSUES}/{a}/comments", params={"sort": "created"}).status_code == 422
    conforms_list(v2022.IssueComment, by_update)
