"""The fake's "List repository issues": what an approval gate that lost the answer to its
POST reads to find the issue it opened (pull requests included, ``since`` on updates)."""

from __future__ import annotations

import httpx

from fixtures.fake_github import FakeGitHub
from tests.fake_github.schema import conforms_list, v2022
from zuke._clock import ManualClock

ISSUES = "/repos/acme/app/issues"


def _open(api: httpx.Client, title: str) -> int:
    made = api.post(ISSUES, json={"title": title, "body": f"body of {title}"})
    assert made.status_code == 201, made.text
    number: int = made.json()["number"]
    return number


def test_issues_list_newest_first_with_pull_requests_and_match_the_schema(
    gh: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    gh.add_user("alice")
    first = _open(api, "one")
    clock.advance(1000)
    pull = gh.add_pull_request("acme/app", "a change", login="alice")
    clock.advance(1000)
    last = _open(api, "two")
    answer = api.get(ISSUES)
    assert answer.status_code == 200
    listed = conforms_list(v2022.Issue, answer.json())
    assert [i.number for i in listed] == [last, pull, first]  # created, newest first
    assert ["pull_request" in raw for raw in answer.json()] == [False, True, False]
    asc = api.get(ISSUES, params={"direction": "asc", "per_page": 2})
    assert [i["number"] for i in asc.json()] == [first, pull]
    assert 'rel="next"' in asc.headers["link"]
    assert [i["number"] for i in api.get(ISSUES, params={"creator": "alice"}).json()] == [pull]


def test_state_and_since_filter_on_the_issue_and_its_updates(
    gh: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    gh.add_user("bob")
    gh.set_permission("acme/app", "bob", "read")
    old, closed = _open(api, "old"), _open(api, "closed")
    assert api.patch(f"{ISSUES}/{closed}", json={"state": "closed"}).status_code == 200
    assert [i["number"] for i in api.get(ISSUES).json()] == [old]  # open by default
    everything = api.get(ISSUES, params={"state": "all"}).json()
    assert sorted(i["number"] for i in everything) == [old, closed]
    clock.advance(60_000)
    recent = _open(api, "recent")
    stamp = api.get(f"{ISSUES}/{recent}").json()["updated_at"]
    # since is on updated_at, inclusive at whole seconds: a comment brings an issue back
    assert [i["number"] for i in api.get(ISSUES, params={"since": stamp}).json()] == [recent]
    clock.advance(1000)
    gh.comment("acme/app", old, "bob", "bump")
    again = api.get(ISSUES, params={"since": stamp, "sort": "updated"}).json()
    assert [i["number"] for i in again] == [old, recent]


def test_bad_or_unmodelled_filters_are_refused_not_ignored(api: httpx.Client) -> None:
    for query in ({"state": "merged"}, {"sort": "comments"}, {"direction": "up"},
                  {"since": "yesterday"}, {"milestone": "1"}):  # fmt: skip
        answer = api.get(ISSUES, params=query)
        assert answer.status_code == 422, (query, answer.text)
        assert answer.json()["errors"][0]["field"] == next(iter(query))
