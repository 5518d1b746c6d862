"""A dispatch that never left the machine is owed, not "may have landed".

A request refused at connect time (connection refused, a name that does not resolve, a
connect timeout) or stopped before it went out (its token could not be had) certainly did
nothing on GitHub: the client retries it within its budget, even a POST, and past the
budget says so (``GitHubError.unsent``); the gate then undoes its marker, so a later check
dispatches again with the same marker. A request that was sent and lost its answer (a read
timeout) is never resent: it may have landed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import respx

from tests.gh._workflow_support import DATE, DISPATCH, RUNS, Probe, gate, run, runs_page
from tests.gh.conftest import START_MS, MakeClient, Sleeps
from zuke import NotYet
from zuke_gh import GitHubError, RetryPolicy

MARKER = "zuke:r1:e2e"


def refused_then_accepted(
    refusals: int, landed: list[dict[str, Any]]
) -> Callable[[httpx.Request], httpx.Response]:
    """A dispatch endpoint whose first connections are refused; what landed is kept."""
    left = [refusals]

    def answer(request: httpx.Request) -> httpx.Response:
        if left[0]:
            left[0] -= 1
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        landed.append(json.loads(request.content))
        return httpx.Response(204, headers={"Date": DATE})

    return answer


def _post(client: object) -> None:
    client.post(DISPATCH, json={"ref": "main"})  # type: ignore[attr-defined]


# -- the client: what "unsent" means -----------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("[Errno 111] Connection refused"),
        httpx.ConnectError("[Errno -2] Name or service not known"),
        httpx.ConnectTimeout("timed out connecting"),
    ],
    ids=["refused", "dns", "connect-timeout"],
)
def test_a_post_that_never_connected_is_retried_and_past_the_budget_is_unsent(
    router: respx.Router, make_client: MakeClient, sleeps: Sleeps, failure: Exception
) -> None:
    route = router.post(DISPATCH).mock(side_effect=failure)
    with pytest.raises(GitHubError) as caught:
        _post(make_client(retry=RetryPolicy(max_attempts=3, jitter=0.0)))
    assert route.call_count == 3 and sleeps.waits == [1.0, 2.0]
    assert caught.value.unsent and caught.value.status is None


@pytest.mark.parametrize(
    "failure",
    [httpx.ReadTimeout("timed out"), httpx.RemoteProtocolError("server disconnected")],
    ids=["read-timeout", "disconnected"],
)
def test_a_post_sent_and_then_lost_is_not_resent_and_not_unsent(
    router: respx.Router, make_client: MakeClient, failure: Exception
) -> None:
    route = router.post(DISPATCH).mock(side_effect=failure)
    with pytest.raises(GitHubError) as caught:
        _post(make_client())
    assert route.call_count == 1 and not caught.value.unsent


def test_a_call_that_reached_github_once_is_not_unsent_whatever_its_last_attempt(
    router: respx.Router, make_client: MakeClient
) -> None:
    # An idempotent call: the 502 reached GitHub, so the later refusals do not make it unsent.
    refused = httpx.ConnectError("refused")
    route = router.get("/zen").mock(side_effect=[httpx.Response(502), refused, refused])
    with pytest.raises(GitHubError) as caught:
        make_client(retry=RetryPolicy(max_attempts=3, jitter=0.0)).get("/zen")
    assert route.call_count == 3 and not caught.value.unsent


def test_a_call_whose_token_cannot_be_had_is_unsent(
    router: respx.Router, make_client: MakeClient
) -> None:
    class Failing:
        def token(self) -> str | None:
            raise GitHubError("could not get a token: ConnectError: refused", status=None)

    route = router.post(DISPATCH).respond(204)
    with pytest.raises(GitHubError) as caught:
        _post(make_client(token=Failing()))
    assert route.call_count == 0 and caught.value.unsent


# -- the gate: a dispatch owed is made, exactly once ---------------------------------------


def test_a_dispatch_refused_at_connect_time_is_retried_and_made_exactly_once(
    router: respx.Router, make_client: MakeClient
) -> None:
    landed: list[dict[str, Any]] = []
    post = router.post(DISPATCH).mock(side_effect=refused_then_accepted(2, landed))
    listing = router.get(RUNS).mock(return_value=runs_page(run(9, MARKER)))
    probe = Probe()
    trigger = gate(make_client())
    first = probe.check(trigger)
    assert isinstance(first, NotYet) and "dispatched" in (first.reason or "")
    assert post.call_count == 3 and len(landed) == 1
    assert landed[0]["inputs"] == {"zuke_marker": MARKER}
    # A later check follows the run it made and never dispatches again.
    assert probe.check(trigger, START_MS + 5_000).reason.endswith("runs/9 is queued")
    assert post.call_count == 3 and listing.call_count == 1


def test_a_dispatch_that_never_left_past_the_budget_is_undone_and_a_later_check_makes_it(
    router: respx.Router, make_client: MakeClient
) -> None:
    landed: list[dict[str, Any]] = []
    post = router.post(DISPATCH).mock(side_effect=refused_then_accepted(2, landed))
    probe = Probe()
    trigger = gate(make_client(retry=RetryPolicy(max_attempts=2, jitter=0.0)))
    first = probe.check(trigger)
    assert isinstance(first, NotYet)
    assert "never reached GitHub" in (first.reason or "")
    assert "tried again at the next check" in (first.reason or "")
    assert probe.meta == {} and probe.persisted[-1] == {}  # "not dispatched", made durable
    again = probe.check(trigger, START_MS + 60_000)
    assert isinstance(again, NotYet) and "dispatched" in (again.reason or "")
    assert post.call_count == 3 and len(landed) == 1
    assert landed[0]["inputs"] == {"zuke_marker": MARKER}  # the same marker: correlation holds
    assert probe.meta["marker"] == MARKER and probe.meta["dispatchedAt"] == START_MS + 60_000


def test_a_dispatch_whose_answer_timed_out_is_not_resent_and_is_looked_for(
    router: respx.Router, make_client: MakeClient
) -> None:
    post = router.post(DISPATCH).mock(side_effect=httpx.ReadTimeout("timed out"))
    listing = router.get(RUNS).mock(return_value=runs_page(run(5, MARKER)))
    probe = Probe()
    trigger = gate(make_client())
    first = probe.check(trigger)
    assert isinstance(first, NotYet) and "may have landed" in (first.reason or "")
    assert probe.meta["marker"] == MARKER  # kept: a later check polls, never dispatches
    assert probe.check(trigger).reason.endswith("runs/5 is queued")
    assert post.call_count == 1 and listing.call_count == 1
