"""The fake's ``pinIssue`` mutation and the ``labels`` filter of the issues listing: what the
release dashboard leans on, held to GitHub's documented rules (see ``gql_pins.py``)."""

from __future__ import annotations

from typing import Any

import httpx

from fixtures.fake_github import FakeGitHub

ISSUES = "/repos/acme/app/issues"
PIN = "mutation($id: ID!) { pinIssue(input: {issueId: $id}) { issue { number isPinned } } }"


def _open(api: httpx.Client, title: str, labels: list[str] | None = None) -> dict[str, Any]:
    answer = api.post(ISSUES, json={"title": title, "labels": labels or []})
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _pin(api: httpx.Client, node: str) -> dict[str, Any]:
    answer = api.post("/graphql", json={"query": PIN, "variables": {"id": node}})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_an_issue_is_pinned_by_its_node_id_once_and_at_most_three_a_repository(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    made = [_open(api, f"issue {n}") for n in range(4)]
    first = _pin(api, made[0]["node_id"])
    assert first["data"]["pinIssue"]["issue"] == {"number": made[0]["number"], "isPinned": True}
    assert _pin(api, made[0]["node_id"])["data"]["pinIssue"]["issue"]["isPinned"]  # again: same
    for issue in made[1:3]:
        assert "errors" not in _pin(api, issue["node_id"])
    fourth = _pin(api, made[3]["node_id"])
    assert fourth["errors"][0]["type"] == "UNPROCESSABLE"
    assert [i["pinned"] for i in gh.issues("acme/app")] == [True, True, True, False]


def test_pinning_needs_issues_write_and_a_users_write_access(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    node = _open(api, "dashboard")["node_id"]
    gh.set_token(gh.token, permissions={"issues": "read", "metadata": "read"})
    refused = _pin(api, node)
    assert refused["errors"][0]["type"] == "FORBIDDEN"
    gh.add_user("tri")
    gh.set_permission("acme/app", "tri", "triage")
    token = gh.add_user_token("tri")
    api.headers["Authorization"] = f"Bearer {token}"
    assert _pin(api, node)["errors"][0]["type"] == "FORBIDDEN"  # triage is not write
    unknown = _pin(api, "I_kwnothing")
    assert unknown["errors"][0]["type"] == "NOT_FOUND"
    assert not any(i["pinned"] for i in gh.issues("acme/app"))


def test_the_labels_filter_keeps_issues_carrying_every_label_named(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    _open(api, "a", ["zuke"])
    _open(api, "b", ["zuke", "release"])
    _open(api, "c")

    def titles(labels: str) -> list[str]:
        answer = api.get(ISSUES, params={"labels": labels, "direction": "asc"})
        assert answer.status_code == 200, answer.text
        return [i["title"] for i in answer.json()]

    assert titles("ZUKE") == ["a", "b"]  # label names are case-insensitive
    assert titles("zuke,release") == ["b"]
    assert titles("nothing") == []
    assert api.get(ISSUES, params={"milestone": "1"}).status_code == 422  # still not modelled
