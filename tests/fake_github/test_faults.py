"""Injected faults, auth, and GitHub's primary and content-creation rate limits in the fake."""

from __future__ import annotations

import httpx

from fixtures.fake_github import FakeGitHub
from tests.fake_github.support import DISPATCH, dispatch, put_file

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
