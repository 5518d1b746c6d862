"""Conditional GETs with ETags, pagination over ``Link: rel="next"``, and
redirects: the token only ever goes to URLs under the configured base URL."""

from __future__ import annotations

import httpx
import pytest
import respx

from tests.gh.conftest import API, DATE, START_MS, TOKEN, MakeClient
from zuke_gh import GitHubError

RUNS = "/repos/{owner}/{repo}/actions/runs"
RUNS_PATH = "/repos/acme/app/actions/runs"


def _runs(client, **kwargs):
    return client.get(RUNS, owner="acme", repo="app", **kwargs)


def test_a_304_is_served_from_the_cache_after_sending_if_none_match(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get(RUNS_PATH).mock(
        side_effect=[
            httpx.Response(200, json={"total_count": 1}, headers={"ETag": 'W/"abc"'}),
            httpx.Response(304, headers={"ETag": 'W/"abc"', "Date": DATE}),
        ]
    )
    client = make_client()
    first = _runs(client, etag=True)
    second = _runs(client, etag=True)
    assert "if-none-match" not in route.calls[0].request.headers
    assert route.calls[1].request.headers["if-none-match"] == 'W/"abc"'
    assert not first.not_modified
    assert second.not_modified and second.status == 200 and second.body == {"total_count": 1}
    assert second.server_time_ms == START_MS


def test_a_cached_body_is_a_fresh_copy_each_time(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get(RUNS_PATH).mock(
        side_effect=[
            httpx.Response(200, json={"runs": [1]}, headers={"ETag": '"e1"'}),
            httpx.Response(304),
            httpx.Response(304),
        ]
    )
    client = make_client()
    _runs(client, etag=True).body["runs"].append(2)
    assert _runs(client, etag=True).body == {"runs": [1]}
    assert _runs(client, etag=True).body == {"runs": [1]}


def test_a_changed_resource_replaces_the_cached_answer(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get(RUNS_PATH).mock(
        side_effect=[
            httpx.Response(200, json={"v": 1}, headers={"ETag": '"e1"'}),
            httpx.Response(200, json={"v": 2}, headers={"ETag": '"e2"'}),
            httpx.Response(304),
        ]
    )
    client = make_client()
    _runs(client, etag=True)
    assert _runs(client, etag=True).body == {"v": 2}
    assert _runs(client, etag=True).body == {"v": 2}
    assert route.calls[2].request.headers["if-none-match"] == '"e2"'


def test_without_etag_no_conditional_request_is_made(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get(RUNS_PATH).respond(200, json={}, headers={"ETag": '"e1"'})
    client = make_client()
    _runs(client)
    _runs(client)
    _runs(client, etag=True)
    assert all("if-none-match" not in call.request.headers for call in route.calls)


def test_the_cache_is_per_url_including_the_query(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get(RUNS_PATH).respond(200, json={}, headers={"ETag": '"e1"'})
    client = make_client()
    _runs(client, etag=True, params={"page": 1})
    _runs(client, etag=True, params={"page": 2})
    assert "if-none-match" not in route.calls[1].request.headers


def test_the_cache_is_bounded_least_recently_used_first(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get(url__regex=r"/repos/acme/.*").respond(200, json={}, headers={"ETag": '"e"'})
    client = make_client(etag_cache_size=2)
    for repo in ("a", "b", "a", "c", "a", "b"):
        client.get("/repos/{owner}/{repo}", owner="acme", repo=repo, etag=True)
    conditional = ["if-none-match" in call.request.headers for call in route.calls]
    # a, b cached; a hit; c evicts b; a hit; b was evicted
    assert conditional == [False, False, True, False, True, False]


def _page(items: list[int], next_url: str | None) -> httpx.Response:
    link = f'<{next_url}>; rel="next", <{API}/x?page=9>; rel="last"'
    headers = {"Link": link} if next_url else {}
    return httpx.Response(200, json={"total_count": 9, "workflow_runs": items}, headers=headers)


def test_paginate_follows_next_links_and_yields_every_item(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get(RUNS_PATH).mock(
        side_effect=[
            _page([1, 2], f"{API}{RUNS_PATH}?per_page=2&page=2"),
            _page([3, 4], f"{API}{RUNS_PATH}?per_page=2&page=3"),
            _page([5], None),
        ]
    )
    items = list(
        make_client().paginate(
            RUNS, owner="acme", repo="app", params={"event": "workflow_dispatch"},
            per_page=2, item_key="workflow_runs",
        )
    )  # fmt: skip
    assert items == [1, 2, 3, 4, 5]
    first = route.calls[0].request.url.params
    assert (first["per_page"], first["event"]) == ("2", "workflow_dispatch")
    assert route.calls[2].request.url.params["page"] == "3"
    assert all(c.request.headers["authorization"] == f"Bearer {TOKEN}" for c in route.calls)


def test_paginate_stops_at_max_pages_and_when_the_caller_stops(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get(RUNS_PATH).mock(
        side_effect=lambda request: _page([1], f"{API}{RUNS_PATH}?page=n")
    )
    client = make_client()
    assert len(list(client.paginate(RUNS, owner="acme", repo="app", max_pages=3,
                                    item_key="workflow_runs"))) == 3  # fmt: skip
    assert route.call_count == 3
    next(iter(client.paginate(RUNS, owner="acme", repo="app", item_key="workflow_runs")))
    assert route.call_count == 4


def test_paginate_reads_a_list_body_without_an_item_key(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get("/repos/acme/app/branches").respond(200, json=[{"name": "main"}])
    branches = make_client().paginate("/repos/{owner}/{repo}/branches", owner="acme", repo="app")
    assert list(branches) == [{"name": "main"}]


def test_paginate_refuses_a_body_without_the_named_list(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get(RUNS_PATH).respond(200, json={"runs": []})
    with pytest.raises(GitHubError, match="not an object with a 'workflow_runs' list"):
        list(make_client().paginate(RUNS, owner="acme", repo="app", item_key="workflow_runs"))


@pytest.mark.parametrize(
    "foreign",
    [
        "https://evil.example/repos/acme/app/actions/runs?page=2",
        "http://api.github.com/repos/acme/app/actions/runs?page=2",
        "https://api.github.com:444/repos/acme/app/actions/runs?page=2",
    ],
)
def test_a_next_link_to_another_host_is_refused_and_gets_no_token(
    router: respx.Router, make_client: MakeClient, foreign: str
) -> None:
    router.get(RUNS_PATH).mock(return_value=_page([1], foreign))
    evil = router.route(url__startswith=foreign.split("/repos")[0]).respond(200, json=[])
    pages = make_client().paginate(RUNS, owner="acme", repo="app", item_key="workflow_runs")
    with pytest.raises(GitHubError, match="the token is not sent there"):
        list(pages)
    assert evil.call_count == 0


def test_a_next_link_outside_the_enterprise_api_path_is_refused() -> None:
    router = respx.Router(base_url="https://ghe.example", assert_all_called=False)
    router.get("/api/v3/repos/acme/app/branches").respond(
        200, json=[1], headers={"Link": '<https://ghe.example/login?page=2>; rel="next"'}
    )
    from zuke_gh import GitHubClient

    with GitHubClient(
        token=TOKEN, base_url="https://ghe.example/api/v3",
        transport=httpx.MockTransport(router.handler),
    ) as client:  # fmt: skip
        pages = client.paginate("/repos/{owner}/{repo}/branches", owner="acme", repo="app")
        with pytest.raises(GitHubError, match=r"outside https://ghe\.example/api/v3"):
            list(pages)


def test_a_redirect_on_the_same_host_is_followed_with_the_token(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get("/repos/acme/old").respond(301, headers={"Location": f"{API}/repositories/42"})
    moved = router.get("/repositories/42").respond(200, json={"id": 42})
    answer = make_client().get("/repos/{owner}/{repo}", owner="acme", repo="old")
    assert answer.body == {"id": 42}
    assert moved.calls.last.request.headers["authorization"] == f"Bearer {TOKEN}"


def test_a_redirect_to_another_host_is_refused_and_gets_no_token(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get("/repos/acme/app/actions/runs/1/logs").respond(
        302, headers={"Location": "https://blob.example/logs.zip?sig=x"}
    )
    blob = router.route(host="blob.example").respond(200)
    with pytest.raises(GitHubError) as caught:
        make_client().get("/repos/{o}/{r}/actions/runs/{id}/logs", o="acme", r="app", id=1)
    assert "redirected GET /repos/acme/app/actions/runs/1/logs to blob.example" in str(caught.value)
    assert blob.call_count == 0


def test_a_redirect_loop_stops(router: respx.Router, make_client: MakeClient) -> None:
    router.get("/a").respond(302, headers={"Location": "/b"})
    router.get("/b").respond(302, headers={"Location": "/a"})
    with pytest.raises(GitHubError, match="too many times"):
        make_client().get("/a")
