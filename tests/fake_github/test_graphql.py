"""The fake's GraphQL: GitHub's schema (a slice), aliases, point costs and node limits,
issue comments for a batched reader, GitHub's error shapes, and ``createCommitOnBranch``'s
path uniqueness. Real HTTP to the running fake."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from fixtures.fake_github import FakeGitHub
from zuke._clock import ManualClock

ISSUES = "/repos/acme/app/issues"
FIELDS = "nodes { databaseId author { login __typename } body createdAt updatedAt lastEditedAt }"
MUTATION = """mutation($input: CreateCommitOnBranchInput!) {
  createCommitOnBranch(input: $input) { commit { oid url } }
}"""


def _ask(api: httpx.Client, query: str, **variables: Any) -> dict[str, Any]:
    answer = api.post("/graphql", json={"query": query, "variables": variables})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _batch(numbers: list[int], after: dict[int, str] | None = None) -> str:
    def one(n: int) -> str:
        cursor = f', after: "{after[n]}"' if after and n in after else ""
        return (f"i{n}: issue(number: {n}) {{ comments(first: 100{cursor}) {{ {FIELDS} "
                "pageInfo { hasNextPage endCursor } } }")  # fmt: skip

    parts = [one(n) for n in numbers]
    return ("query { rateLimit { cost remaining used limit nodeCount } "
            'repository(owner: "acme", name: "app") { ' + " ".join(parts) + " } }")  # fmt: skip


def _issues(api: httpx.Client, count: int) -> list[int]:
    """``count`` issues opened by the token (past GitHub's 80 writes a minute: the test's
    set-up lifts the limit, see ``gh.configure`` in the callers)."""
    return [api.post(ISSUES, json={"title": f"t{i}"}).json()["number"] for i in range(count)]


def test_one_aliased_query_reads_100_issues_comments_for_one_point(
    gh: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    gh.add_user("maint")
    gh.set_permission("acme/app", "maint", "maintain")
    gh.configure(writes_per_minute=500)
    numbers = _issues(api, 100)
    ours = api.post(f"{ISSUES}/{numbers[0]}/comments", json={"body": "waiting"}).json()
    clock.advance(1_000)
    theirs = gh.comment("acme/app", numbers[0], "maint", "/approve")
    gh.reset_stats()
    body = _ask(api, _batch(numbers))
    assert "errors" not in body, body
    data = body["data"]
    assert data["rateLimit"]["cost"] == 1 and data["rateLimit"]["nodeCount"] == 100 * 100
    assert data["rateLimit"]["remaining"] == 5000 - 1 and data["rateLimit"]["used"] == 1
    first = data["repository"][f"i{numbers[0]}"]["comments"]
    assert [n["databaseId"] for n in first["nodes"]] == [ours["id"], theirs]  # REST ids
    bot, person = (n["author"] for n in first["nodes"])
    assert bot == {"login": "github-actions", "__typename": "Bot"}  # no [bot] in GraphQL
    assert person == {"login": "maint", "__typename": "User"}
    assert first["nodes"][1]["lastEditedAt"] is None
    assert first["pageInfo"]["hasNextPage"] is False
    assert all(data["repository"][f"i{n}"]["comments"]["nodes"] == [] for n in numbers[1:])
    stats = gh.stats()
    assert stats["requests"] == 1 and stats["graphql_points_by_token"] == {"token-1": 1}


@pytest.mark.parametrize(("issues", "cost"), [(1, 1), (149, 1), (150, 2), (250, 3)])
def test_the_cost_is_connections_requested_over_100_rounded_at_least_1(
    gh: FakeGitHub, api: httpx.Client, issues: int, cost: int
) -> None:
    numbers = list(range(1, issues + 1))
    gh.configure(graphql_rate_limit=10)
    body = _ask(api, _batch(numbers))  # missing issues are errors, but still priced
    assert gh.stats()["graphql_points"] == cost
    assert body["data"]["rateLimit"]["cost"] == cost


def test_a_query_the_budget_cannot_pay_for_is_rate_limited(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    numbers = _issues(api, 3)
    gh.configure(graphql_rate_limit=3)
    assert "errors" not in _ask(api, _batch(numbers * 0 + numbers[:1]))  # 1 point
    limited = api.post("/graphql", json={"query": _batch(list(range(1, 251)))})  # 3 points
    assert limited.status_code == 200 and limited.json()["errors"][0]["type"] == "RATE_LIMITED"
    assert limited.headers["x-ratelimit-remaining"] == "0"
    assert "errors" not in _ask(api, _batch(numbers[:1]))  # 1 more still fits


def test_connections_need_first_or_last_at_most_100(gh: FakeGitHub, api: httpx.Client) -> None:
    (number,) = _issues(api, 1)
    no_bound = _ask(api, 'query { repository(owner: "acme", name: "app") { '
                    f"issue(number: {number}) {{ comments {{ totalCount }} }} }} }}")  # fmt: skip
    assert "data" not in no_bound
    assert no_bound["errors"][0]["type"] == "MISSING_PAGINATION_BOUNDARIES"
    said = "You must provide a `first` or `last` value to properly paginate the `comments`"
    assert no_bound["errors"][0]["message"] == said + " connection."
    too_many = _ask(api, 'query($n: Int!) { repository(owner: "acme", name: "app") { '
                    f"issue(number: {number}) {{ comments(first: $n) {{ totalCount }} }} }} }}",
                    n=101)  # fmt: skip
    assert too_many["errors"][0]["type"] == "EXCESSIVE_PAGINATION"
    assert too_many["errors"][0]["message"] == ("Requesting 101 records on the `comments` "
                                                "connection exceeds the `first` limit of 100 "
                                                "records.")  # fmt: skip


def test_cursors_walk_a_long_thread_and_edits_show_last_edited_at(
    gh: FakeGitHub, api: httpx.Client, clock: ManualClock
) -> None:
    gh.add_user("maint")
    gh.set_permission("acme/app", "maint", "maintain")
    (number,) = _issues(api, 1)
    ids = gh.flood("acme/app", number, "maint", 250)
    seen: list[int] = []
    after: dict[int, str] = {}
    while True:
        comments = _ask(api, _batch([number], after))["data"]["repository"][f"i{number}"][
            "comments"
        ]
        seen += [n["databaseId"] for n in comments["nodes"]]
        if not comments["pageInfo"]["hasNextPage"]:
            break
        after[number] = comments["pageInfo"]["endCursor"]
    assert seen == ids
    clock.advance(5_000)
    gh.edit_comment("acme/app", ids[0], "/approve")
    node = _ask(api, _batch([number]))["data"]["repository"][f"i{number}"]["comments"]["nodes"][0]
    assert node["lastEditedAt"] == node["updatedAt"] != node["createdAt"]
    bad = _ask(api, _batch([number], {number: "not-a-cursor"}))
    assert bad["errors"][0]["type"] == "INVALID_CURSOR_ARGUMENTS"


def test_errors_have_githubs_shapes(gh: FakeGitHub, api: httpx.Client) -> None:
    (number,) = _issues(api, 1)
    pull = gh.add_pull_request("acme/app", "a change", login="github-actions[bot]")
    fields = (
        f"a: issue(number: 99) {{ number }} b: issue(number: {number}) {{ number }} "
        f"c: issue(number: {pull}) {{ number }} d: pullRequest(number: {pull}) "
        f"{{ number }} e: issueOrPullRequest(number: {pull}) {{ __typename }}"
    )
    missing = _ask(api, f'query {{ repository(owner: "acme", name: "app") {{ {fields} }} }}')
    repo = missing["data"]["repository"]
    assert (repo["a"], repo["b"], repo["c"]) == (None, {"number": number}, None)
    assert repo["d"] == {"number": pull} and repo["e"] == {"__typename": "PullRequest"}
    first = missing["errors"][0]
    assert (first["type"], first["path"]) == ("NOT_FOUND", ["repository", "a"])
    assert first["message"] == "Could not resolve to an Issue with the number of 99."
    assert first["locations"][0]["line"] == 1
    unknown = _ask(api, 'query { repository(owner: "acme", name: "app") { stargazerCount } }')
    assert unknown == {"errors": [{
        "extensions": {"code": "undefinedField", "typeName": "Repository",
                       "fieldName": "stargazerCount"},
        "locations": [{"line": 1, "column": 50}],
        "message": "Field 'stargazerCount' doesn't exist on type 'Repository'"}]}  # fmt: skip
    nowhere = _ask(api, 'query { repository(owner: "acme", name: "nope") { id } }')
    assert nowhere["data"] == {"repository": None}
    assert nowhere["errors"][0]["message"] == (
        "Could not resolve to a Repository with the name 'acme/nope'."
    )
    assert "errors" in _ask(api, "query { repository(owner: ")  # a syntax error


def test_tokens_and_identities_hold_in_graphql_too(gh: FakeGitHub, api: httpx.Client) -> None:
    (number,) = _issues(api, 1)
    assert _ask(api, "query { viewer { login } }")["data"]["viewer"]["login"] == (
        "github-actions[bot]"
    )  # the viewer keeps [bot] (fullsend-ai/fullsend#1953)
    gh.set_token(gh.token, permissions={"contents": "read"})
    refused = _ask(api, _batch([number]))
    assert refused["errors"][0]["type"] == "FORBIDDEN"
    assert refused["errors"][0]["message"] == "Resource not accessible by integration"
    gh.add_repo("acme/private")
    gh.set_token(gh.token, repositories=["acme/app"])
    hidden = _ask(api, 'query { repository(owner: "acme", name: "private") { id } }')
    assert hidden["errors"][0]["type"] == "NOT_FOUND"


def _change(gh: FakeGitHub, additions: list[str], deletions: list[str]) -> dict[str, Any]:
    return {"branch": {"repositoryNameWithOwner": "acme/app", "branchName": "main"},
            "message": {"headline": "write"}, "expectedHeadOid": gh.head("acme/app", "main"),
            "fileChanges": {
                "additions": [{"path": p, "contents": base64.b64encode(b"x").decode()}
                              for p in additions],
                "deletions": [{"path": p} for p in deletions]}}  # fmt: skip


def test_create_commit_on_branch_refuses_a_path_given_twice(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    before = gh.head("acme/app", "main")
    for additions, deletions in ((["a.md", "a.md"], []), (["README.md"], ["README.md"])):
        refused = _ask(api, MUTATION, input=_change(gh, additions, deletions))
        assert refused["data"] == {"createCommitOnBranch": None}
        error = refused["errors"][0]
        assert error["type"] == "UNPROCESSABLE" and error["path"] == ["createCommitOnBranch"]
        assert additions[0] in error["message"]
    assert gh.head("acme/app", "main") == before and gh.stats()["commits"] == 0
    done = _ask(api, MUTATION, input=_change(gh, ["a.md", "b.md"], ["README.md"]))
    assert "errors" not in done
    assert sorted(gh.files("acme/app", "main")) == ["a.md", "b.md"]


def test_a_commit_is_authored_by_the_token_and_committed_by_github(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    done = _ask(api, MUTATION, input=_change(gh, ["a.md"], []))
    sha = done["data"]["createCommitOnBranch"]["commit"]["oid"]
    commit = api.get(f"/repos/acme/app/git/commits/{sha}").json()
    assert commit["author"]["name"] == "github-actions[bot]"
    assert commit["author"]["email"] == "41898282+github-actions[bot]@users.noreply.github.com"
    assert (commit["committer"]["name"], commit["committer"]["email"]) == (
        "GitHub",
        "noreply@github.com",
    )
    gh.set_token(gh.token, permissions={"contents": "read"})
    refused = _ask(api, MUTATION, input=_change(gh, ["b.md"], []))
    assert refused["errors"][0]["type"] == "FORBIDDEN"


def test_a_comments_full_database_id_is_its_rest_id_as_a_bigint_string(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    # GitHub's IssueComment has fullDatabaseId (BigInt) beside databaseId, which "does not
    # support 64-bit signed integer identifiers" (docs.github.com GraphQL breaking changes).
    (number,) = _issues(api, 1)
    made = api.post(f"{ISSUES}/{number}/comments", json={"body": "hello"}).json()
    query = """query($n: Int!) { repository(owner: "acme", name: "app") { issue(number: $n) {
      comments(first: 1) { nodes { databaseId fullDatabaseId } } } } }"""
    body = _ask(api, query, n=number)
    assert "errors" not in body, body
    (node,) = body["data"]["repository"]["issue"]["comments"]["nodes"]
    assert node == {"databaseId": made["id"], "fullDatabaseId": str(made["id"])}
