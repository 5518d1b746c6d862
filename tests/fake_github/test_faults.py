"""Injected faults, auth, and GitHub's primary and content-creation rate limits in the fake."""

from __future__ import annotations

import httpx

from fixtures.fake_github import FakeGitHub
from tests.fake_github.schema import conforms_list, v2022
from tests.fake_github.support import DISPATCH, dispatch, put_file
from zuke._clock import iso

RUNS = "/repos/acme/app/actions/runs"


def test_a_5xx_is_answered_the_asked_number_of_times_then_the_endpoint_works(gh, api) -> None:
    gh.inject("/repos/*/actions/runs", status=502, times=2)
    assert [api.get(RUNS).status_code for _ in range(3)] == [502, 502, 200]
    assert gh.faults()[0]["hits"] == 2


def test_a_secondary_rate_limit_carries_retry_after(gh: FakeGitHub, api: httpx.Client) -> None:
    gh.inject("GET /repos/{owner}/{repo}/actions/runs", status=403, retry_after=30)
    gh.inject(RUNS, status=429, retry_after=5)
    first, second = api.get(RUNS), api.get(RUNS)
    assert (first.status_code, first.headers["retry-after"]) == (403, "30")
    assert "secondary rate limit" in first.json()["message"]
    assert (second.status_code, second.headers["retry-after"]) == (429, "5")


def test_a_fault_before_the_handler_dispatches_nothing(gh: FakeGitHub, api) -> None:
    gh.inject(DISPATCH, status=502, method="POST")
    assert dispatch(api).status_code == 502
    assert gh.runs() == []


def test_a_fault_after_the_handler_loses_the_answer_but_not_the_dispatch(gh, api) -> None:
    gh.inject(DISPATCH, status=502, after=True)
    assert dispatch(api).status_code == 502
    assert len(gh.dispatched()) == 1


def test_the_primary_rate_limit_refuses_past_the_budget_until_its_reset(gh, api, clock) -> None:
    gh.configure(rate_limit=3)
    answers = [api.get(RUNS) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 403]
    refused = answers[-1]
    assert refused.json()["message"].startswith("API rate limit exceeded")
    assert refused.headers["x-ratelimit-remaining"] == "0"
    assert int(refused.headers["x-ratelimit-reset"]) == clock.now_ms() // 1000 + 3600
    gh.advance_clock(3600)
    assert api.get(RUNS).status_code == 200


def test_content_creation_is_limited_per_minute_and_hour(gh: FakeGitHub, api, clock) -> None:
    gh.configure(writes_per_minute=2, writes_per_hour=3, write_limit_status=429)
    assert [put_file(api, f"f{i}", "x").status_code for i in range(3)] == [201, 201, 429]
    limited = put_file(api, "f2", "x")
    assert 0 < int(limited.headers["retry-after"]) <= 60
    gh.advance_clock(61)
    assert put_file(api, "f2", "x").status_code == 201
    assert put_file(api, "f3", "x").status_code == 429  # the hour's three are spent
    assert gh.stats()["commits"] == 3


def test_requests_without_a_configured_token_get_401(gh: FakeGitHub) -> None:
    missing = httpx.get(f"{gh.url}{RUNS}")
    assert (missing.status_code, missing.json()["message"]) == (401, "Requires authentication")
    wrong = httpx.get(f"{gh.url}{RUNS}", headers={"Authorization": "token nope"})
    assert (wrong.status_code, wrong.json()["message"]) == (401, "Bad credentials")
    legacy = httpx.get(f"{gh.url}{RUNS}", headers={"Authorization": f"token {gh.token}"})
    assert legacy.status_code == 200


def test_ghes_paths_under_api_v3_are_served_too(gh: FakeGitHub, api: httpx.Client) -> None:
    assert api.get(f"/api/v3{RUNS}").status_code == 200
    query = '{ repository(owner: "acme", name: "app") { ref(qualifiedName: "nope") { name } } }'
    assert api.post("/api/graphql", json={"query": query}).json() == {
        "data": {"repository": {"ref": None}}
    }


QUERY = {"query": 'query { repository(owner: "acme", name: "app") { ref(qualifiedName: "main") '
         "{ target { oid } } } }"}  # fmt: skip


def test_graphql_has_its_own_points_budget_answered_200_rate_limited(gh, api, clock) -> None:
    """GitHub: REST and GraphQL have separate primary limits; past GraphQL's the status is
    still 200, with an error and ``x-ratelimit-remaining: 0`` (docs "Rate limits and query
    limits for the GraphQL API"; github/docs#22607)."""
    gh.configure(graphql_rate_limit=2, rate_limit=100)
    answers = [api.post("/graphql", json=QUERY) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert "errors" not in answers[0].json()
    assert answers[0].headers["x-ratelimit-resource"] == "graphql"
    limited = answers[-1]
    said = "API rate limit exceeded for user ID 1."
    assert limited.json() == {"errors": [{"type": "RATE_LIMITED", "message": said}]}
    assert limited.headers["x-ratelimit-remaining"] == "0"
    assert int(limited.headers["x-ratelimit-reset"]) == clock.now_ms() // 1000 + 3600
    assert api.get(RUNS).status_code == 200  # REST's budget is apart
    gh.advance_clock(3600)
    assert "errors" not in api.post("/graphql", json=QUERY).json()


def test_a_200_fault_on_graphql_is_a_rate_limited_answer_or_a_secondary_one(gh, api, clock) -> None:
    gh.inject("/graphql", status=200, retry_after=42)
    gh.inject("/graphql", status=200, retry_after=7,
              message="You have exceeded a secondary rate limit.")  # fmt: skip
    primary, secondary, fine = (api.post("/graphql", json=QUERY) for _ in range(3))
    assert primary.status_code == 200 and primary.json()["errors"][0]["type"] == "RATE_LIMITED"
    assert int(primary.headers["x-ratelimit-reset"]) == clock.now_ms() // 1000 + 42
    assert secondary.status_code == 200 and secondary.headers["retry-after"] == "7"
    assert "secondary rate limit" in secondary.json()["errors"][0]["message"]
    assert "errors" not in fine.json()


def test_writes_closer_than_the_configured_gap_are_refused(gh: FakeGitHub, api, clock) -> None:
    """GitHub asks for at least a second between writes (docs "Best practices for using the
    REST API"); the fake enforces it when ``write_min_gap_ms`` is set."""
    gh.configure(write_min_gap_ms=1000)
    assert put_file(api, "a", "x").status_code == 201
    refused = put_file(api, "b", "x")
    assert (refused.status_code, refused.headers["retry-after"]) == (403, "1")
    gh.advance_clock(1)
    assert put_file(api, "b", "x").status_code == 201
    assert api.get(RUNS).status_code == 200  # reads are not writes


def test_the_commit_listing_pages_newest_first_and_filters_by_since(gh, api, clock) -> None:
    for i in range(5):
        assert put_file(api, f"f{i}", "x", branch="main").status_code == 201
        gh.advance_clock(60)
    since = gh.now_ms() - 150_000  # the last two commits (and not the README seed)
    page = api.get("/repos/acme/app/commits", params={"sha": "main", "since": iso(since)})
    assert [c["commit"]["message"] for c in page.json()] == ["write f4", "write f3"]
    first = api.get("/repos/acme/app/commits", params={"per_page": 2})
    assert len(first.json()) == 2 and 'rel="next"' in first.headers["link"]
    conforms_list(v2022.Commit, first.json())  # OpenAPI ``commit``, strictly
    assert api.get("/repos/acme/app/commits", params={"sha": "nope"}).status_code == 404
