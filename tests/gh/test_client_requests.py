"""What every request carries, where it goes (github.com, Enterprise, GraphQL),
what comes back, and the one-line errors for failures."""

from __future__ import annotations

import httpx
import pytest
import respx

from tests.gh.conftest import API, DATE, START_MS, TOKEN, MakeClient
from zuke import ZukeError
from zuke_gh import GitHubClient, GitHubError, StaticToken

DISPATCH = "/repos/{owner}/{repo}/actions/workflows/{workflow}/dispatches"


def test_a_request_carries_the_bearer_token_api_version_accept_and_user_agent(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get("/user").respond(200, json={"login": "me"})
    answer = make_client().get("/user")
    sent = route.calls.last.request.headers
    assert sent["authorization"] == f"Bearer {TOKEN}"
    assert sent["x-github-api-version"] == "2022-11-28"
    assert sent["accept"] == "application/vnd.github+json"
    assert sent["user-agent"].startswith("zuke-gh/")
    assert answer.status == 200 and answer.body == {"login": "me"}


def test_without_a_token_no_authorization_header_is_sent(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get("/zen").respond(200, json={})
    make_client(token=None).get("/zen")
    make_client(token="").get("/zen")
    assert all("authorization" not in call.request.headers for call in route.calls)


def test_the_api_version_and_accept_header_can_be_chosen(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get("/zen").respond(200, json={})
    client = make_client(api_version="2026-03-10")
    client.get("/zen", headers={"Accept": "application/vnd.github.raw+json"})
    sent = route.calls.last.request.headers
    assert sent["x-github-api-version"] == "2026-03-10"
    assert sent["accept"] == "application/vnd.github.raw+json"


def test_a_caller_header_cannot_replace_the_authorization(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get("/zen").respond(200, json={})
    make_client().get("/zen", headers={"Authorization": "Bearer other"})
    assert route.calls.last.request.headers["authorization"] == f"Bearer {TOKEN}"


def test_a_token_source_is_asked_before_every_request(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get("/zen").respond(200, json={})
    tokens = iter(["first-token-aaaaaaaa", "second-token-bbbbbbb"])

    class Rotating:
        def token(self) -> str | None:
            return next(tokens)

    client = make_client(token=Rotating())
    client.get("/zen")
    client.get("/zen")
    sent = [call.request.headers["authorization"] for call in route.calls]
    assert sent == ["Bearer first-token-aaaaaaaa", "Bearer second-token-bbbbbbb"]


def test_query_params_json_bodies_and_the_server_clock_reach_the_caller(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.post("/repos/acme/app/actions/workflows/e2e.yml/dispatches").respond(
        204, headers={"Date": DATE}
    )
    answer = make_client().post(
        DISPATCH,
        owner="acme",
        repo="app",
        workflow="e2e.yml",
        json={"ref": "main", "inputs": {"zuke_marker": "zuke:r1:e2e"}},
        params={"dry": "1"},
    )
    request = route.calls.last.request
    assert request.url.params["dry"] == "1"
    assert request.headers["content-type"] == "application/json"
    assert b'"zuke_marker"' in request.content
    assert answer.status == 204 and answer.body == {}
    assert answer.server_time_ms == START_MS


def test_an_enterprise_base_url_keeps_its_path_and_graphql_moves_to_api_graphql() -> None:
    base = "https://ghe.example/api/v3"
    router = respx.Router(base_url="https://ghe.example", assert_all_called=False)
    rest = router.get("/api/v3/repos/acme/app").respond(200, json={"id": 1})
    graphql = router.post("/api/graphql").respond(200, json={"data": {"viewer": {"login": "x"}}})
    with GitHubClient(
        token=TOKEN, base_url=base + "//", transport=httpx.MockTransport(router.handler)
    ) as client:
        assert client.base_url == base
        client.get("/repos/{owner}/{repo}", owner="acme", repo="app")
        body = client.graphql("query { viewer { login } }", {})
    assert rest.call_count == 1 and graphql.call_count == 1
    assert body["data"]["viewer"]["login"] == "x"


def test_graphql_on_github_com_posts_to_slash_graphql_and_returns_its_errors(
    router: respx.Router, make_client: MakeClient
) -> None:
    stale = {
        "data": {"createCommitOnBranch": None},
        "errors": [{"type": "STALE_DATA", "message": 'Expected branch to point to "abc"'}],
    }
    route = router.post("/graphql").respond(200, json=stale)
    body = make_client().graphql("mutation($input: X!) { x }", {"input": {"a": 1}})
    assert body["errors"][0]["type"] == "STALE_DATA"
    sent = route.calls.last.request
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert b'"variables":{"input":{"a":1}}' in sent.content.replace(b" ", b"")


def test_graphql_raises_only_when_http_fails(router: respx.Router, make_client: MakeClient) -> None:
    router.post("/graphql").respond(401, json={"message": "Bad credentials"})
    with pytest.raises(GitHubError, match="GitHub answered 401 to POST /graphql: Bad credentials"):
        make_client().graphql("query { viewer { login } }")


def test_a_failure_is_one_line_naming_the_call_github_s_message_and_what_to_do(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post("/repos/acme/app/actions/workflows/e2e.yml/dispatches").respond(
        422,
        json={
            "message": 'Unexpected inputs provided: ["zuke_marker"]',
            "errors": [{"resource": "Workflow", "field": "inputs", "code": "invalid"}],
        },
    )
    with pytest.raises(GitHubError) as caught:
        make_client().post(DISPATCH, owner="acme", repo="app", workflow="e2e.yml", json={})
    error = caught.value
    text = str(error)
    assert text.startswith(
        "GitHub answered 422 to POST /repos/acme/app/actions/workflows/e2e.yml/dispatches: "
        'Unexpected inputs provided: ["zuke_marker"]; Workflow inputs invalid.'
    )
    assert "\n" not in text and isinstance(error, ZukeError)
    assert (error.status, error.method) == (422, "POST")
    assert error.path == "/repos/acme/app/actions/workflows/e2e.yml/dispatches"
    assert "zuke_marker" in error.detail


@pytest.mark.parametrize(
    ("status", "hint"),
    [
        (401, "invalid, expired or revoked"),
        (403, "`actions: write`"),
        (403, "`contents: write`"),
        (404, "cannot see it"),
    ],
)
def test_auth_and_access_failures_carry_a_hint(
    router: respx.Router, make_client: MakeClient, status: int, hint: str
) -> None:
    router.get("/repos/acme/app").respond(status, json={"message": "Nope"})
    with pytest.raises(GitHubError) as caught:
        make_client().get("/repos/{owner}/{repo}", owner="acme", repo="app")
    assert hint in str(caught.value)


def test_a_403_without_a_token_says_no_token_was_sent(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get("/repos/acme/app").respond(403, json={"message": "Forbidden"})
    with pytest.raises(GitHubError, match="No token was sent: set GH_TOKEN or GITHUB_TOKEN"):
        make_client(token=None).get("/repos/{owner}/{repo}", owner="acme", repo="app")


def test_github_s_message_is_cut_to_300_characters_and_the_query_is_never_shown(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get("/search/code").respond(400, json={"message": "x" * 1000})
    with pytest.raises(GitHubError) as caught:
        make_client().get("/search/code", params={"q": "private-query-term"})
    assert len(caught.value.detail) == 300
    assert "private-query-term" not in str(caught.value)
    assert caught.value.path == "/search/code"


def test_an_expected_status_is_returned_instead_of_raised(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get("/repos/acme/app/contents/runs/r1.json").respond(404, json={"message": "Not Found"})
    answer = make_client().get(
        "/repos/{owner}/{repo}/contents/{path+}",
        owner="acme",
        repo="app",
        path="runs/r1.json",
        expected=(404,),
    )
    assert answer.status == 404 and answer.body == {"message": "Not Found"}


def test_a_2xx_body_that_is_not_json_points_at_the_base_url(
    router: respx.Router, make_client: MakeClient
) -> None:
    html = {"content-type": "text/html"}
    router.get("/zen").respond(200, text="<html>login</html>", headers=html)
    with pytest.raises(GitHubError, match=r"not JSON \(text/html\)\. Check GITHUB_API_URL"):
        make_client().get("/zen")


def test_an_unreachable_host_names_the_base_url_and_what_to_check(make_client: MakeClient) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(GitHubError) as caught:
        make_client(transport=httpx.MockTransport(refuse)).get("/zen")
    assert str(caught.value) == (
        f"could not reach GitHub at {API}: ConnectError: [Errno 111] Connection refused. "
        "Check GITHUB_API_URL and the network."
    )
    assert caught.value.status is None and caught.value.__cause__ is None
    assert caught.value.__context__ is None


@pytest.mark.parametrize(
    ("base", "problem"),
    [
        ("ftp://api.github.com", "is not an http"),
        ("https://api.github.com?x=1", "is not an http"),
        ("not a url", "is not an http"),
        ("https://user:pw@ghe.example/api/v3", "carries credentials"),
        ("http://ghe.example/api/v3", "is plaintext"),
        ("ftp://user:ghp_secret@ghe.example", "carries credentials"),
    ],
)
def test_an_unusable_base_url_is_refused(base: str, problem: str) -> None:
    with pytest.raises(GitHubError, match=problem):
        GitHubClient(base_url=base)


def test_plain_http_is_accepted_on_loopback_for_a_test_server() -> None:
    with GitHubClient(base_url="http://127.0.0.1:8123/") as client:
        assert client.base_url == "http://127.0.0.1:8123"


def test_from_env_reads_the_base_url_and_prefers_gh_token_over_github_token() -> None:
    router = respx.Router(base_url="https://ghe.example", assert_all_called=False)
    route = router.get("/api/v3/zen").respond(200, json={})
    env = {"GITHUB_API_URL": "https://ghe.example/api/v3/", "GH_TOKEN": "gh-token-value-1234",
           "GITHUB_TOKEN": "actions-token-5678"}  # fmt: skip
    with GitHubClient.from_env(env, transport=httpx.MockTransport(router.handler)) as client:
        client.get("/zen")
    assert route.calls.last.request.headers["authorization"] == "Bearer gh-token-value-1234"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"GH_TOKEN": "", "GITHUB_TOKEN": "actions-token-5678"}, "Bearer actions-token-5678"),
        ({"GH_TOKEN": "  ", "GITHUB_TOKEN": ""}, None),
        ({}, None),
    ],
)
def test_from_env_treats_empty_values_as_unset(
    router: respx.Router, env: dict[str, str], expected: str | None
) -> None:
    route = router.get("/zen").respond(200, json={})
    with GitHubClient.from_env(env, transport=httpx.MockTransport(router.handler)) as client:
        assert client.base_url == API
        client.get("/zen")
    assert route.calls.last.request.headers.get("authorization") == expected


def test_the_client_repr_shows_the_base_and_the_kind_of_auth_only() -> None:
    with GitHubClient(token=TOKEN) as client:
        assert repr(client) == "GitHubClient(base_url='https://api.github.com', auth=StaticToken)"
    assert repr(StaticToken(TOKEN)) == "StaticToken(<hidden>)"
    with GitHubClient() as client:
        assert "auth=none" in repr(client)
