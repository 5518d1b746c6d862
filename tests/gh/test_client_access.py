"""The client says when GitHub refuses the token itself (``GitHubAccessError``: a 401, a 403
that is no rate limit), names where its token came from, and keeps what GitHub says is left
of each hourly budget (the read budget a sweep asks)."""

from __future__ import annotations

import httpx
import pytest
import respx

from tests.gh.conftest import TOKEN, MakeClient
from zuke._errors import TriggerAccessError
from zuke_gh import GitHubClient, RetryPolicy
from zuke_gh._rate import PLAN_SHARE, RateReadings
from zuke_gh.errors import GitHubAccessError, GitHubError, refused


@pytest.mark.parametrize(
    ("status", "message", "headers", "access"),
    [
        (401, "Bad credentials", {}, True),
        (403, "Resource not accessible by integration", {}, True),
        (403, "You have exceeded a secondary rate limit", {"retry-after": "3600"}, False),
        (403, "API rate limit exceeded", {"x-ratelimit-remaining": "0"}, False),
        (404, "Not Found", {}, False),
        (429, "Too many", {"retry-after": "3600"}, False),
    ],
)
def test_only_a_refused_token_is_an_access_error(
    router: respx.Router, make_client: MakeClient, status: int, message: str,
    headers: dict[str, str], access: bool,
) -> None:  # fmt: skip
    router.get("/repos/acme/app").mock(
        return_value=httpx.Response(status, json={"message": message}, headers=headers)
    )
    with pytest.raises(GitHubError) as caught:
        make_client(retry=RetryPolicy(max_attempts=1)).get("/repos/acme/app")
    assert isinstance(caught.value, GitHubAccessError) is access
    assert isinstance(caught.value, TriggerAccessError) is access
    assert refused(caught.value) is access
    assert TOKEN not in str(caught.value)


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"GH_TOKEN": "a", "GITHUB_TOKEN": "b"}, "GH_TOKEN"),
        ({"GITHUB_TOKEN": "b"}, "GITHUB_TOKEN"),
        ({}, "no token (set GH_TOKEN or GITHUB_TOKEN)"),
    ],
)
def test_a_client_from_the_environment_names_its_tokens_source(
    env: dict[str, str], name: str
) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with GitHubClient.from_env(env, transport=transport) as client:
        assert client.token_name == name


def test_an_apps_client_names_the_app() -> None:
    from zuke_gh.app_token import AppTokenSource
    from zuke_gh.client import token_name

    app = object.__new__(AppTokenSource)  # what from_env builds for ZUKE_GH_APP_ID
    assert token_name({"ZUKE_GH_APP_ID": "123"}, app) == "the GitHub App 123 (ZUKE_GH_APP_ID)"
    assert token_name({"GH_TOKEN": "x"}, "y") == "no token (set GH_TOKEN or GITHUB_TOKEN)"


def test_the_client_keeps_what_github_says_is_left_of_each_budget(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get("/repos/acme/app").mock(return_value=httpx.Response(200, json={}, headers={
        "x-ratelimit-limit": "1000", "x-ratelimit-remaining": "250",
        "x-ratelimit-reset": "1700003600", "x-ratelimit-resource": "core"}))  # fmt: skip
    client = make_client()
    assert client.rates.affords("core", 1000)  # nothing heard yet: afforded
    client.get("/repos/acme/app")
    reading = client.rates.reading("core")
    assert reading is not None and (reading.used, reading.limit) == (750, 1000)
    assert client.rates.affords("core", 50) and not client.rates.affords("core", 51)
    assert client.rates.affords("graphql", 10_000)  # another resource: its own budget
    said = client.rates.refusal("core", "reading")
    assert "250 of 1000 left until 2023-11-14T23:13:20" in said and "80%" in said


def test_an_answer_without_the_headers_changes_nothing() -> None:
    rates = RateReadings()
    rates.note(httpx.Headers({"x-ratelimit-limit": "x"}))
    rates.note(httpx.Headers({}))
    assert rates.reading("core") is None and PLAN_SHARE == 0.8
