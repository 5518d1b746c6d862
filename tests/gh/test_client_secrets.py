"""The token never reaches a message, a repr, a log line or an exception chain:
every failure path is driven with a distinctive token and its text searched."""

from __future__ import annotations

import traceback
from collections.abc import Callable

import httpx
import pytest
import respx

from tests.gh.conftest import TOKEN, MakeClient
from zuke_gh import GitHubClient, GitHubError, RetryPolicy


def _all_text(error: BaseException) -> str:
    """Everything an error could show: message, repr, attributes, the whole chain."""
    parts = ["".join(traceback.format_exception(error))]
    seen: BaseException | None = error
    while seen is not None:
        parts += [str(seen), repr(seen), repr(vars(seen))]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def _echo(request: httpx.Request) -> str:
    return f"your header was {request.headers.get('authorization')}"


FAILURES: dict[str, Callable[[httpx.Request], httpx.Response]] = {
    "a 401 echoing the header": lambda r: httpx.Response(401, json={"message": _echo(r)}),
    "a 422 echoing it in errors": lambda r: httpx.Response(
        422, json={"message": "bad", "errors": [_echo(r)]}
    ),
    "a 5xx echoing it as text": lambda r: httpx.Response(502, text=_echo(r)),
    "a rate limit past the budget": lambda r: httpx.Response(
        429, headers={"retry-after": "9999"}, json={"message": _echo(r)}
    ),
    "a non-JSON 200": lambda r: httpx.Response(200, text=_echo(r)),
    "a redirect elsewhere": lambda r: httpx.Response(
        302, headers={"Location": f"https://evil.example/?t={TOKEN}"}
    ),
}


def _raise(error: type[httpx.TransportError]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error(f"proxy said: {_echo(request)}", request=request)

    return handler


FAILURES["a connect error quoting the header"] = _raise(httpx.ConnectError)
FAILURES["a read timeout quoting the header"] = _raise(httpx.ReadTimeout)
FAILURES["a protocol error quoting the header"] = _raise(httpx.RemoteProtocolError)


@pytest.mark.parametrize("name", sorted(FAILURES))
def test_no_failure_path_shows_the_token(
    name: str, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    client = make_client(
        transport=httpx.MockTransport(FAILURES[name]), retry=RetryPolicy(max_attempts=2, jitter=0)
    )
    with pytest.raises(GitHubError) as caught:
        client.get("/repos/{owner}/{repo}", owner="acme", repo="app", params={"q": "x"})
    text = _all_text(caught.value)
    assert "GitHub" in text
    assert TOKEN not in text
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(client)


def test_an_expected_answer_echoing_the_token_as_text_is_scrubbed(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get("/zen").mock(side_effect=lambda r: httpx.Response(404, text=_echo(r)))
    answer = make_client().get("/zen", expected=(404,))
    assert TOKEN not in answer.body and "<token>" in answer.body


def test_graphql_and_paginate_failures_do_not_show_the_token(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post("/graphql").mock(side_effect=lambda r: httpx.Response(403, text=_echo(r)))
    router.get("/repos/acme/app/branches").respond(
        200, json=[], headers={"Link": f'<https://evil.example/?t={TOKEN}>; rel="next"'}
    )
    client = make_client()
    with pytest.raises(GitHubError) as graphql:
        client.graphql("query { x }")
    with pytest.raises(GitHubError) as pages:
        list(client.paginate("/repos/{owner}/{repo}/branches", owner="acme", repo="app"))
    assert TOKEN not in _all_text(graphql.value)
    assert TOKEN not in _all_text(pages.value)


def test_a_client_from_the_environment_does_not_show_its_token() -> None:
    with GitHubClient.from_env({"GH_TOKEN": TOKEN}) as client:
        assert TOKEN not in repr(client) and TOKEN not in str(vars(client))


def test_a_token_cut_by_the_300_character_limit_leaves_no_prefix_behind(
    router: respx.Router, make_client: MakeClient
) -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"message": "x" * 290 + _echo(request)})

    router.get("/zen").mock(side_effect=echo)
    with pytest.raises(GitHubError) as caught:
        make_client().get("/zen")
    assert TOKEN[:8] not in _all_text(caught.value)
