"""Path templates: every value is checked against git's ref-name rules and
percent-encoded, so user input cannot address a path the caller did not name."""

from __future__ import annotations

import httpx
import pytest
import respx

from tests.gh.conftest import MakeClient
from zuke_gh import GitHubPathError, repo_slug
from zuke_gh._paths import expand

RUNS = "/repos/{owner}/{repo}/actions/workflows/{workflow}/runs"


def test_segments_fill_the_template_and_reach_the_wire(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get("/repos/acme/app/actions/workflows/e2e.yml/runs").respond(200, json={})
    make_client().get(RUNS, owner="acme", repo="app", workflow="e2e.yml")
    assert route.call_count == 1


def test_an_integer_segment_is_written_in_decimal() -> None:
    assert expand("/repos/{o}/{r}/actions/runs/{run}", {"o": "a", "r": "b", "run": 42}) == (
        "/repos/a/b/actions/runs/42"
    )


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "empty"),
        ("a..b", "'..'"),
        ("..", "'..'"),
        ("-rf", "starts with '-'"),
        ("main.lock", "'.lock'"),
        ("main.", "ends with '.'"),
        ("a~1", "'~'"),
        ("a^", "'^'"),
        ("a:b", "':'"),
        ("a?b", "'?'"),
        ("a*", "'*'"),
        ("a[b", "'['"),
        ("a\\b", "'\\\\'"),
        ("a b", "space or a control character"),
        ("a\tb", "space or a control character"),
        ("a\x00b", "space or a control character"),
        ("a\x7fb", "space or a control character"),
        ("a@{1}", "'@{'"),
        ("feature/x", "'/' where one path segment is expected"),
    ],
)
def test_a_segment_breaking_git_ref_name_rules_is_refused(value: str, reason: str) -> None:
    with pytest.raises(GitHubPathError) as caught:
        expand("/repos/{owner}/app", {"owner": value})
    assert reason in str(caught.value)
    assert str(caught.value).startswith("owner ")


def test_a_percent_encoded_dot_dot_stays_literal_on_the_wire(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get(url__regex=r".*").respond(200, json={})
    make_client().get("/repos/{owner}/{repo}", owner="%2e%2e", repo="app")
    sent = route.calls.last.request.url
    assert sent.raw_path == b"/repos/%252e%252e/app"
    assert sent.path == "/repos/%2e%2e/app"  # decoded once: still not '..'


@pytest.mark.parametrize("ref", ["heads/feature/x", "heads/main", "tags/v1.2.3"])
def test_a_plus_placeholder_allows_slashes_between_valid_parts(ref: str) -> None:
    assert expand("/repos/a/b/git/ref/{ref+}", {"ref": ref}) == f"/repos/a/b/git/ref/{ref}"


def test_a_plus_placeholder_encodes_each_part_but_keeps_the_slashes() -> None:
    path = expand("/repos/a/b/contents/{path+}", {"path": "runs/r%1/state.json"})
    assert path == "/repos/a/b/contents/runs/r%251/state.json"


@pytest.mark.parametrize(
    "ref",
    ["heads//x", "heads/./x", "/heads/x", "heads/x/", "heads/../x", "heads/x.lock/y", "heads/x./y"],
)
def test_a_plus_placeholder_refuses_a_bad_part(ref: str) -> None:
    with pytest.raises(GitHubPathError):
        expand("/repos/a/b/git/ref/{ref+}", {"ref": ref})


@pytest.mark.parametrize(
    "template",
    [
        "https://evil.example/x",
        "//evil.example/x",
        "repos/a/b",
        "/repos/a/b?per_page=1",
        "/repos/a/b#x",
        "/repos/../b",
        "/repos//b",
        "/repos/a b",
    ],
)
def test_a_path_that_is_not_a_template_is_refused(template: str) -> None:
    with pytest.raises(GitHubPathError, match="is not a path template"):
        expand(template, {})


def test_a_missing_or_unused_segment_is_refused() -> None:
    with pytest.raises(GitHubPathError, match=r"needs a value for \{repo\}"):
        expand("/repos/{owner}/{repo}", {"owner": "a"})
    with pytest.raises(GitHubPathError, match="no placeholder for rep"):
        expand("/repos/{owner}/{repo}", {"owner": "a", "repo": "b", "rep": "c"})


@pytest.mark.parametrize("value", [True, None, 1.5, -1, b"x"])
def test_a_segment_that_is_not_text_or_a_natural_number_is_refused(value: object) -> None:
    with pytest.raises(GitHubPathError):
        expand("/repos/{owner}", {"owner": value})


def test_a_refused_path_sends_nothing(router: respx.Router, make_client: MakeClient) -> None:
    route = router.route().respond(200, json={})
    with pytest.raises(GitHubPathError):
        make_client().get("/repos/{owner}/{repo}", owner="acme", repo="../../user")
    assert route.call_count == 0


def test_repo_slug_splits_a_valid_owner_and_name() -> None:
    assert repo_slug("acme/app.js") == ("acme", "app.js")
    assert repo_slug("a-b_c/d.e-f") == ("a-b_c", "d.e-f")


@pytest.mark.parametrize(
    "slug", ["acme", "acme/app/x", "acme/", "/app", "acme/..", "./app", "ac me/app", "acme/ap%p"]
)
def test_repo_slug_refuses_anything_but_owner_slash_name(slug: str) -> None:
    with pytest.raises(GitHubPathError, match="owner/name"):
        repo_slug(slug)


def test_a_path_error_is_a_value_error_and_a_zuke_error() -> None:
    from zuke import ZukeError

    with pytest.raises(GitHubPathError) as caught:
        repo_slug("nope")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ZukeError)
    assert caught.value.status is None


def test_the_client_builds_urls_that_httpx_does_not_renormalise() -> None:
    url = httpx.URL("https://api.github.com" + expand("/x/{a}", {"a": "a%2Fb"}))
    assert url.raw_path == b"/x/a%252Fb"
