"""Retries: 5xx, rate limits and transport failures inside one budget, with the
waits GitHub asks for (recorded by an injected sleep; nothing really sleeps)."""

from __future__ import annotations

import httpx
import pytest
import respx

from tests.gh.conftest import DATE, START_MS, MakeClient, Sleeps
from zuke._clock import ManualClock, iso
from zuke_gh import GitHubError, RetryPolicy

DISPATCH = "/repos/acme/app/actions/workflows/e2e.yml/dispatches"


def _dispatch(client) -> None:
    client.post(
        "/repos/{owner}/{repo}/actions/workflows/{workflow}/dispatches",
        owner="acme",
        repo="app",
        workflow="e2e.yml",
        json={"ref": "main"},
    )


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_get_answered_5xx_is_retried_with_doubling_backoff(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps, status: int
) -> None:
    route = router.get("/zen").mock(
        side_effect=[httpx.Response(status), httpx.Response(status), httpx.Response(200, json={})]
    )
    assert make_client().get("/zen").status == 200
    assert route.call_count == 3
    assert sleeps.waits == [1.0, 2.0]


def test_a_5xx_that_outlasts_the_attempts_fails_once_saying_how_often_it_tried(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    route = router.get("/zen").respond(502, json={"message": "Server Error"})
    with pytest.raises(GitHubError) as caught:
        make_client().get("/zen")
    assert route.call_count == 4 and sleeps.waits == [1.0, 2.0, 4.0]
    assert str(caught.value) == (
        "GitHub answered 502 to GET /zen: Server Error. "
        "GitHub is failing: try again later (tried 4 times)."
    )


def test_backoff_jitter_only_lengthens_the_wait(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    router.get("/zen").mock(side_effect=[httpx.Response(503), httpx.Response(200, json={})])
    make_client(retry=RetryPolicy(jitter=0.5), rand=lambda: 0.999).get("/zen")
    assert 1.0 < sleeps.waits[0] < 1.5


def test_a_post_answered_5xx_is_not_resent_because_it_may_have_taken_effect(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    route = router.post(DISPATCH).respond(502)
    with pytest.raises(GitHubError, match="Not retried: the POST may already have taken effect"):
        _dispatch(make_client())
    assert route.call_count == 1 and sleeps.waits == []


def test_a_post_the_caller_calls_idempotent_is_resent_after_a_5xx(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.post("/graphql").mock(
        side_effect=[httpx.Response(502), httpx.Response(200, json={"data": {}})]
    )
    assert make_client().graphql("mutation { x }", {}, idempotent=True) == {"data": {}}
    assert route.call_count == 2


def test_a_get_the_caller_calls_not_idempotent_is_not_resent(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get("/zen").respond(503)
    with pytest.raises(GitHubError):
        make_client().get("/zen", idempotent=False)
    assert route.call_count == 1


def test_a_secondary_rate_limit_403_with_retry_after_is_waited_out_even_for_a_post(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    limited = httpx.Response(
        403,
        headers={"retry-after": "7"},
        json={"message": "You have exceeded a secondary rate limit."},
    )
    route = router.post(DISPATCH).mock(side_effect=[limited, httpx.Response(204)])
    _dispatch(make_client())
    assert route.call_count == 2 and sleeps.waits == [7.0]


def test_a_429_with_retry_after_is_waited_out(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    route = router.get("/zen").mock(
        side_effect=[httpx.Response(429, headers={"retry-after": "3"}), httpx.Response(200)]
    )
    make_client().get("/zen")
    assert route.call_count == 2 and sleeps.waits == [3.0]


def test_a_429_naming_no_time_waits_github_s_minute(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    router.get("/zen").mock(side_effect=[httpx.Response(429), httpx.Response(200, json={})])
    make_client().get("/zen")
    assert sleeps.waits == [60.0]


def test_ratelimit_reset_is_waited_out_by_github_s_clock_not_ours(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps, clock: ManualClock
) -> None:
    clock.advance(3_600_000)  # our clock is an hour ahead; GitHub's Date is what counts
    reset = START_MS // 1000 + 25
    limited = httpx.Response(
        403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset), "Date": DATE},
        json={"message": "API rate limit exceeded"},
    )
    route = router.get("/zen").mock(side_effect=[limited, httpx.Response(200, json={})])
    make_client().get("/zen")
    assert route.call_count == 2 and sleeps.waits == [25.0]


def test_ratelimit_reset_without_a_date_header_uses_the_injected_clock(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    reset = START_MS // 1000 + 12
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)}
    router.get("/zen").mock(side_effect=[httpx.Response(429, headers=headers), httpx.Response(200)])
    make_client().get("/zen")
    assert sleeps.waits == [12.0]


def test_a_wait_longer_than_the_budget_fails_at_once_saying_when_to_retry(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    reset = START_MS // 1000 + 1800
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset), "Date": DATE}
    route = router.get("/zen").respond(403, headers=headers, json={"message": "API rate limit"})
    with pytest.raises(GitHubError) as caught:
        make_client().get("/zen")
    assert route.call_count == 1 and sleeps.waits == []
    error = caught.value
    assert error.retry_at_ms == reset * 1000
    assert f"retry after {iso(reset * 1000)} (in 1800 s" in str(error)
    assert "waits at most 60 s" in str(error)


def test_the_budget_counts_every_wait_of_the_call(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    limited = httpx.Response(429, headers={"retry-after": "30"})
    route = router.get("/zen").mock(side_effect=[limited, limited, limited, httpx.Response(200)])
    with pytest.raises(GitHubError, match="rate limit: retry after"):
        make_client(retry=RetryPolicy(max_wait_s=45, jitter=0)).get("/zen")
    assert route.call_count == 2 and sleeps.waits == [30.0]


def test_a_plain_403_is_not_a_rate_limit_and_is_not_retried(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.get("/zen").respond(403, json={"message": "Resource not accessible"})
    with pytest.raises(GitHubError, match="lacks a permission"):
        make_client().get("/zen")
    assert route.call_count == 1


def test_a_read_timeout_on_a_get_is_retried(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    timeout = httpx.ReadTimeout("timed out")
    route = router.get("/zen").mock(side_effect=[timeout, httpx.Response(200)])
    make_client().get("/zen")
    assert route.call_count == 2 and sleeps.waits == [1.0]


def test_a_read_timeout_on_a_post_is_not_resent(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.post(DISPATCH).mock(side_effect=httpx.ReadTimeout("timed out"))
    with pytest.raises(GitHubError, match=r"could not reach GitHub at .*: ReadTimeout: timed out"):
        _dispatch(make_client())
    assert route.call_count == 1


def test_a_refused_connection_is_retried_even_for_a_post_since_nothing_was_sent(
    router: respx.Router, make_client: MakeClient
) -> None:
    route = router.post(DISPATCH).mock(
        side_effect=[httpx.ConnectError("refused"), httpx.Response(204)]
    )
    _dispatch(make_client())
    assert route.call_count == 2


def test_a_policy_of_one_attempt_never_retries(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    route = router.get("/zen").respond(503)
    with pytest.raises(GitHubError):
        make_client(retry=RetryPolicy(max_attempts=1)).get("/zen")
    assert route.call_count == 1 and sleeps.waits == []


def test_retries_are_logged_without_the_query(
    router: respx.Router, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    router.get("/zen").mock(side_effect=[httpx.Response(502), httpx.Response(200)])
    caplog.set_level("INFO", logger="zuke_gh")
    make_client().get("/zen", params={"q": "hidden"})
    lines = [r.getMessage() for r in caplog.records if r.name == "zuke_gh"]
    assert lines == ["GitHub: 502 on GET /zen; retrying in 1.0 s (attempt 2 of 4)"]


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_a_rate_limit_is_waited_out_even_when_its_status_is_expected(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    limited = httpx.Response(403, json={"message": "You have exceeded a secondary rate limit"})
    route = router.get("/zen").mock(
        side_effect=[limited, httpx.Response(403, json={"message": "Forbidden"})]
    )
    answer = make_client().get("/zen", expected=(403,))
    assert route.call_count == 2 and sleeps.waits == [60.0]
    assert answer.status == 403 and answer.body == {"message": "Forbidden"}
