"""GraphQL rate limits (HTTP 200 + ``RATE_LIMITED``), paced writes, and waits said aloud.

Every wait is recorded by the injected sleep (which moves the manual clock):
nothing really sleeps.
"""

from __future__ import annotations

import httpx
import pytest
import respx

from tests.gh.conftest import DATE, START_MS, TOKEN, MakeClient, Sleeps
from zuke._clock import ManualClock
from zuke_gh import GitHubClient, GitHubError, RetryPolicy
from zuke_gh._pacing import PacingSettings, WritePacer, process_pacer, settings_from

MUTATION = "mutation($input: CreateCommitOnBranchInput!) { createCommitOnBranch(input: $input) { commit { oid } } }"  # noqa: E501
QUERY = 'query { repository(owner: "acme", name: "app") { id } }'
#: GitHub's primary GraphQL limit: HTTP 200, an error typed RATE_LIMITED, nothing remaining
#: (docs "Rate limits and query limits for the GraphQL API" § exceeding; github/docs#22607).
LIMITED = {
    "errors": [{"type": "RATE_LIMITED", "message": "API rate limit exceeded for user ID 1."}]
}


def _limited(reset_in_s: int, **extra: str) -> httpx.Response:
    headers = {"date": DATE, "x-ratelimit-remaining": "0",
               "x-ratelimit-reset": str(START_MS // 1000 + reset_in_s), **extra}  # fmt: skip
    return httpx.Response(200, json=LIMITED, headers=headers)


class Lines(list[str]):
    def __call__(self, line: str) -> None:
        self.append(line)


def test_a_graphql_rate_limit_answered_200_is_waited_out_and_the_mutation_sent_again(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    ok = {"data": {"createCommitOnBranch": {"commit": {"oid": "abc"}}}}
    route = router.post("/graphql").mock(side_effect=[_limited(42), httpx.Response(200, json=ok)])
    notices = Lines()
    client = make_client(notice=notices)
    assert client.graphql(MUTATION, {"input": {}}) == ok  # not idempotent, still resent
    assert route.call_count == 2 and sleeps.waits == [42.0]
    assert notices == ["zuke: GitHub rate limit: waiting 42 s (until 22:14:02 UTC)"]


def test_a_graphql_secondary_limit_waits_its_retry_after_else_a_minute(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    secondary = {"errors": [{"message": "You have exceeded a secondary rate limit. Please wait."}]}
    router.post("/graphql").mock(side_effect=[
        httpx.Response(200, json=secondary, headers={"retry-after": "7"}),
        httpx.Response(200, json=secondary),  # neither header: at least a minute (GitHub's docs)
        httpx.Response(200, json={"data": {"repository": {"id": "R"}}}),
    ])  # fmt: skip
    client = make_client(retry=RetryPolicy(jitter=0.0, max_wait_s=100))
    assert client.graphql(QUERY)["data"] == {"repository": {"id": "R"}}
    assert sleeps.waits == [7.0, 60.0]


def test_the_other_spelling_rate_limit_counts_too_and_a_passed_reset_is_no_wait(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    other = {"errors": [{"type": "RATE_LIMIT", "code": "graphql_rate_limit", "message": "x"}]}
    headers = {"date": DATE, "x-ratelimit-remaining": "0", "x-ratelimit-reset": "1"}
    answers = [httpx.Response(200, json=other, headers=headers), httpx.Response(200, json={})]
    route = router.post("/graphql").mock(side_effect=answers)
    assert make_client().graphql(QUERY) == {}
    assert route.call_count == 2 and sleeps.waits == [0.0]


def test_a_graphql_rate_limit_past_the_budget_fails_at_once_saying_when(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    route = router.post("/graphql").mock(return_value=_limited(900))
    with pytest.raises(GitHubError) as caught:
        make_client().graphql(MUTATION, {"input": {}})
    assert route.call_count == 1 and sleeps.waits == []
    error = caught.value
    assert error.retry_at_ms == START_MS + 900_000 and error.status == 200
    assert str(error) == (
        "GitHub's GraphQL API answered POST /graphql with a rate limit: API rate limit exceeded "
        "for user ID 1. Retry after 2023-11-14T22:28:20.000Z (in 900 s; this client waits at "
        "most 60 s in all)."
    )
    assert TOKEN not in str(error)


def test_other_graphql_errors_are_the_callers_to_judge(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    stale = {"errors": [{"type": "STALE_DATA", "message": "Expected branch to point to x"}]}
    router.post("/graphql").respond(200, json=stale)
    assert make_client().graphql(MUTATION, {}) == stale and sleeps.waits == []


def test_a_short_rate_limit_wait_is_quiet_a_long_one_is_said_once(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps
) -> None:
    router.get("/zen").mock(side_effect=[
        httpx.Response(429, headers={"retry-after": "2", "date": DATE}),
        httpx.Response(403, json={"message": "You have exceeded a secondary rate limit"},
                       headers={"retry-after": "30", "date": DATE}),
        httpx.Response(200, json={}),
    ])  # fmt: skip
    notices = Lines()
    make_client(notice=notices).get("/zen")
    assert sleeps.waits == [2.0, 30.0]
    assert notices == ["zuke: GitHub rate limit: waiting 30 s (until 22:13:50 UTC)"]


# -- pacing ---------------------------------------------------------------------------------


@pytest.fixture
def pacer(clock: ManualClock, sleeps: Sleeps) -> WritePacer:
    return WritePacer(PacingSettings(budget_per_hour=100), clock=clock, sleep=sleeps)


def test_writes_go_a_second_apart_reads_and_graphql_queries_are_not_paced(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps, pacer: WritePacer
) -> None:
    router.route().respond(200, json={"data": {}})
    client = make_client(pacer=pacer)
    client.post("/a")
    client.get("/b")
    client.graphql(QUERY)
    assert sleeps.waits == []
    client.put("/c")
    client.graphql("# a comment first\n  mutation { x }")
    client.delete("/d")
    assert sleeps.waits == [1.0, 1.0, 1.0]
    assert pacer.used() == 4


def test_at_most_80_writes_in_a_minute_and_the_long_wait_is_said(
    router: respx.Router, make_client: MakeClient, clock: ManualClock, sleeps: Sleeps
) -> None:
    router.route().respond(200, json={})
    pacer = WritePacer(PacingSettings(min_gap_s=0), clock=clock, sleep=sleeps)
    notices = Lines()
    client = make_client(pacer=pacer, notice=notices)
    for _ in range(80):
        client.patch("/x")
    assert sleeps.waits == []
    client.patch("/x")
    assert sleeps.waits == [60.0]
    assert notices == ["zuke: GitHub write pacing: waiting 60 s (until 22:14:20 UTC; "
                       "80 writes in the last minute (limit 80))"]  # fmt: skip


def test_a_write_past_the_hourly_limit_is_not_sent_and_says_when(
    router: respx.Router, make_client: MakeClient, clock: ManualClock, sleeps: Sleeps
) -> None:
    route = router.route().respond(200, json={})
    pacer = WritePacer(PacingSettings(min_gap_s=0, per_minute=500, per_hour=3,
                                      budget_per_hour=2), clock=clock, sleep=sleeps)  # fmt: skip
    client = make_client(pacer=pacer)
    for _ in range(3):
        client.post("/x")
    with pytest.raises(GitHubError) as caught:
        client.post("/x")
    assert route.call_count == 3 and sleeps.waits == []
    assert caught.value.unsent and caught.value.retry_at_ms == START_MS + 3_600_000
    assert "3 writes in the last hour (limit 3)" in str(caught.value)
    assert "POST /x" in str(caught.value)


def test_the_budget_is_what_a_planner_may_still_spend_this_hour(
    router: respx.Router, make_client: MakeClient, clock: ManualClock, pacer: WritePacer
) -> None:
    router.route().respond(200, json={})
    client = make_client(pacer=pacer)
    assert client.reserve_writes(100) and not client.reserve_writes(101)
    for _ in range(10):
        client.post("/x")
    assert pacer.left() == 90 and not client.reserve_writes(91)
    clock.advance(3_600_000)
    assert pacer.left() == 100
    assert make_client(pacer=None).reserve_writes(10_000)  # unpaced: never defers


def test_writes_seeded_from_an_earlier_process_count_until_they_are_an_hour_old(
    clock: ManualClock, pacer: WritePacer
) -> None:
    pacer.seed([START_MS - 3_000_000 + i for i in range(30)])
    assert pacer.left() == 70
    clock.advance(600_030)  # the seeded writes are more than an hour old now
    assert pacer.left() == 100


def test_seeded_writes_in_one_second_each_count_and_a_seed_given_twice_counts_once(
    pacer: WritePacer,
) -> None:
    second = START_MS - 60_000  # commit dates have whole seconds: nine commits, one stamp
    pacer.seed([second] * 9)
    assert pacer.left() == 91
    pacer.seed([second] * 9)  # the same history read again
    assert pacer.left() == 91 and not pacer.reserve(92)


def test_pacing_settings_come_from_the_environment_and_bad_values_are_one_line() -> None:
    assert settings_from({}).budget_per_hour == 400
    assert settings_from({"ZUKE_GITHUB_WRITES_PER_HOUR": "120"}).budget_per_hour == 120
    for bad in ("0", "501", "lots"):
        with pytest.raises(GitHubError, match=r"ZUKE_GITHUB_WRITES_PER_HOUR=.*from 1 to 500"):
            settings_from({"ZUKE_GITHUB_WRITES_PER_HOUR": bad})
    assert process_pacer("https://api.github.com", {}) is process_pacer(
        "https://api.github.com", {}
    )
    assert process_pacer("http://127.0.0.1:8080", {}) is None  # a test server
    assert process_pacer("http://127.0.0.1:8080", {"ZUKE_GITHUB_PACING": "on"}) is not None
    assert process_pacer("https://ghe.example/api/v3", {"ZUKE_GITHUB_PACING": "off"}) is None
    with pytest.raises(GitHubError, match="ZUKE_GITHUB_PACING='maybe': expected on or off"):
        process_pacer("https://api.github.com", {"ZUKE_GITHUB_PACING": "maybe"})


def test_a_client_from_the_environment_shares_the_processs_pacer() -> None:
    env = {"GH_TOKEN": TOKEN, "ZUKE_GITHUB_WRITES_PER_HOUR": "77"}
    with GitHubClient.from_env(env) as one, GitHubClient.from_env(env) as two:
        assert one.pacer is not None and one.pacer is two.pacer
        assert one.pacer.settings.budget_per_hour == 77


def test_by_default_the_wait_is_said_on_stderr_without_the_token(
    router: respx.Router,
    make_client: MakeClient,
    sleeps: Sleeps,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What a user running ``zuke`` (in a terminal, or in Actions' log) sees when a gate's
    dispatch or the store waits out a rate limit."""
    dispatch = "/repos/acme/app/actions/workflows/e2e.yml/dispatches"
    router.post(dispatch).mock(side_effect=[
        httpx.Response(403, json={"message": f"You have exceeded a secondary rate limit {TOKEN}"},
                       headers={"retry-after": "42", "date": DATE}),
        httpx.Response(204),
    ])  # fmt: skip
    client = GitHubClient(token=TOKEN, transport=httpx.MockTransport(router.handler),
                          clock=sleeps.clock, sleep=sleeps)  # fmt: skip
    try:
        client.post(dispatch, json={"ref": "main"})
    finally:
        client.close()
    captured = capsys.readouterr()
    assert captured.err == "zuke: GitHub rate limit: waiting 42 s (until 22:14:02 UTC)\n"
    assert captured.out == "" and TOKEN not in captured.err


def test_the_second_between_writes_counts_from_the_previous_answer(
    router: respx.Router, make_client: MakeClient, clock: ManualClock, sleeps: Sleeps
) -> None:
    """A slow request does not eat into the next one's second: network jitter could
    otherwise land two writes less than a second apart at GitHub."""

    def slow(request: httpx.Request) -> httpx.Response:
        clock.advance(300)  # the request takes 0.3 s
        return httpx.Response(200, json={})

    router.post("/x").mock(side_effect=slow)
    pacer = WritePacer(clock=clock, sleep=sleeps)
    client = make_client(pacer=pacer)
    client.post("/x")
    client.post("/x")
    assert sleeps.waits == [1.0]
