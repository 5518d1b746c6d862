"""``github_workflow``: the dispatch — once, durable first, with the run id asked for, the GHES
fallback, what a 422 means, and the answers that must never cause a second dispatch."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from tests.gh._workflow_support import DATE, DISPATCH, RUNS, Probe, gate, run, runs_page
from tests.gh.conftest import START_MS, TOKEN, MakeClient
from zuke import BuildDefinitionError, NotYet, WaitFailed
from zuke_gh import RetryPolicy, github_workflow

MARKER = "zuke:r1:e2e"


def test_the_first_check_persists_the_marker_then_dispatches_once_and_a_later_check_only_polls(
    router: respx.Router, make_client: MakeClient
) -> None:
    probe = Probe()

    def dispatched(request: httpx.Request) -> httpx.Response:
        probe.events.append("POST")
        return httpx.Response(204, headers={"Date": DATE})

    post = router.post(DISPATCH).mock(side_effect=dispatched)
    listing = router.get(RUNS).mock(return_value=runs_page(run(7, MARKER)))
    trigger = gate(make_client(), lambda g: g.inputs({"suite": "smoke"}).input("shards", 2))

    first = probe.check(trigger)
    assert isinstance(first, NotYet) and "dispatched" in (first.reason or "")
    # The marker and the dispatch time were durable before the POST went out.
    assert probe.events == ["persist", "POST"]
    assert probe.persisted[0] == {"marker": MARKER, "dispatchedAt": START_MS}
    assert json.loads(post.calls.last.request.content) == {
        "ref": "main",
        "inputs": {"suite": "smoke", "shards": "2", "zuke_marker": MARKER},  # strings only
        "return_run_details": True,
    }

    # Another process (a fresh trigger, the same record) polls and never dispatches again.
    again = probe.check(gate(make_client()), START_MS + 5_000)
    assert isinstance(again, NotYet) and "is queued" in (again.reason or "")
    assert post.call_count == 1 and listing.call_count == 1
    assert probe.meta["runId"] == 7


def test_a_dispatch_answered_with_the_run_id_follows_that_run_without_correlating(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(
        200, json={"workflow_run_id": 42, "run_url": "u",
                   "html_url": "https://github.com/acme/app/actions/runs/42"},
    )  # fmt: skip
    # Its title is not the marker (a decorated run-name): the id is what counts.
    listing = router.get(RUNS).mock(return_value=runs_page(run(42, "E2E nightly")))
    probe = Probe()
    trigger = gate(make_client())
    probe.check(trigger)
    assert probe.meta["runId"] == 42
    assert probe.meta["runUrl"] == "https://github.com/acme/app/actions/runs/42"
    answer = probe.check(trigger)
    assert isinstance(answer, NotYet)
    assert answer.reason and "runs/42 is queued" in answer.reason
    assert listing.call_count == 1


def test_a_server_that_refuses_return_run_details_gets_the_dispatch_again_without_it(
    router: respx.Router, make_client: MakeClient
) -> None:
    refused = {"message": "return_run_details is not a permitted key.", "status": "400"}
    post = router.post(DISPATCH).mock(
        side_effect=[httpx.Response(400, json=refused), httpx.Response(204)]
    )
    router.get(RUNS).mock(return_value=runs_page(run(9, "other"), run(8, MARKER)))
    probe = Probe()
    trigger = gate(make_client())
    assert isinstance(probe.check(trigger), NotYet)
    bodies = [json.loads(c.request.content) for c in post.calls]
    assert [("return_run_details" in b) for b in bodies] == [True, False]
    assert bodies[1] == {"ref": "main", "inputs": {"zuke_marker": MARKER}}
    assert probe.check(trigger).reason.endswith("runs/8 is queued")  # found by its marker
    assert probe.meta["runId"] == 8


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ('Unexpected inputs provided: ["zuke_marker"]',
         "does not declare the marker input 'zuke_marker'"),
        ("Unexpected inputs provided: [\"suite\"]", "does not declare the input(s) 'suite'"),
        ("Required input 'suite' not provided", "requires the input 'suite'"),
        ("No ref found for: release", "the ref does not exist"),
    ],
)  # fmt: skip
def test_a_dispatch_422_fails_the_gate_naming_the_likely_cause(
    router: respx.Router, make_client: MakeClient, message: str, expected: str
) -> None:
    router.post(DISPATCH).respond(422, json={"message": message})
    answer = Probe().check(gate(make_client()))
    assert isinstance(answer, WaitFailed)
    assert expected in answer.reason
    assert answer.reason.startswith("github_workflow acme/app e2e.yml@main: ")
    assert "\n" not in answer.reason
    if "marker" in expected:
        assert '.marker_input("<name>")' in answer.reason
    if "requires" in expected:
        assert ".input('suite', value)" in answer.reason


def test_a_dispatch_whose_answer_is_lost_is_not_resent_and_is_looked_for_instead(
    router: respx.Router, make_client: MakeClient
) -> None:
    post = router.post(DISPATCH).respond(502, json={"message": "Server Error"})
    listing = router.get(RUNS).mock(return_value=runs_page(run(5, MARKER)))
    probe = Probe()
    trigger = gate(make_client())
    first = probe.check(trigger)
    assert isinstance(first, NotYet) and "may have landed" in (first.reason or "")
    assert post.call_count == 1  # a POST is never resent after a 5xx
    assert probe.check(trigger).reason.endswith("runs/5 is queued")
    assert post.call_count == 1 and listing.call_count == 1


def test_a_rate_limited_dispatch_was_not_made_so_a_later_check_makes_it(
    router: respx.Router, make_client: MakeClient
) -> None:
    limited = httpx.Response(
        429, json={"message": "You have exceeded a secondary rate limit."},
        headers={"retry-after": "3600", "Date": DATE},
    )  # fmt: skip
    post = router.post(DISPATCH).mock(side_effect=[limited, httpx.Response(204)])
    probe = Probe()
    trigger = gate(make_client(retry=RetryPolicy(max_attempts=1)))
    first = probe.check(trigger)
    assert isinstance(first, NotYet) and "rate limited" in (first.reason or "")
    assert "marker" not in probe.meta  # undone, and made durable
    assert probe.persisted[-1] == {}
    assert isinstance(probe.check(trigger, START_MS + 3_600_000), NotYet)
    assert post.call_count == 2 and probe.meta["marker"] == MARKER


def test_created_window_sends_no_marker_unless_one_is_named(
    router: respx.Router, make_client: MakeClient
) -> None:
    post = router.post(DISPATCH).respond(204)
    router.get(RUNS).mock(return_value=runs_page(run(3, "old", created_ms=START_MS - 600_000)))
    Probe().check(gate(make_client(), lambda g: g.correlate("created-window")))
    assert json.loads(post.calls.last.request.content)["inputs"] == {}
    named = gate(make_client(), lambda g: g.correlate("created-window").marker_input("tag"))
    Probe().check(named)
    assert json.loads(post.calls.last.request.content)["inputs"] == {"tag": MARKER}


def test_the_token_reaches_neither_the_state_nor_a_reason(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(422, json={"message": f"Required input '{TOKEN}' not provided"})
    probe = Probe()
    answer = probe.check(gate(make_client()))
    assert isinstance(answer, WaitFailed)
    assert TOKEN not in answer.reason and TOKEN not in json.dumps(probe.meta)


@pytest.mark.parametrize(
    ("configure", "named"),
    [
        (lambda g: g.repo("acme").workflow("e2e.yml"), "'acme'"),
        (lambda g: g.repo("acme/app/x").workflow("e2e.yml"), "owner/name"),
        (lambda g: g.repo("acme/app").workflow("../e2e.yml"), "workflow '../e2e.yml'"),
        (lambda g: g.repo("acme/app").workflow("e2e.yml").ref("a..b"), "ref 'a..b'"),
        (lambda g: g.repo("acme/app").workflow("e2e.yml").correlate("title"), "'title'"),
        (lambda g: g.repo("acme/app").workflow("e2e.yml").discovery_timeout("soon"),
         "discovery_timeout"),
        (lambda g: g.repo("acme/app").workflow("e2e.yml").input("x", [1]), "input 'x'"),
        (lambda g: g.repo("acme/app").workflow("e2e.yml").input("zuke_marker", "x"),
         "carries the marker"),
        (lambda g: g.repo("acme/app"), "set the repository and the workflow"),
    ],
)  # fmt: skip
def test_bad_settings_fail_the_build_load_naming_what_is_wrong(
    configure: object, named: str
) -> None:
    with pytest.raises(BuildDefinitionError, match="github_workflow") as caught:
        github_workflow(configure)  # type: ignore[arg-type]
    assert named in str(caught.value)


def test_the_descriptor_names_the_repository_and_the_workflow(make_client: MakeClient) -> None:
    assert gate(make_client()).descriptor == "github:acme/app:e2e.yml"
