"""The fake's Actions behaviour: dispatch validation, run details, run-name, listings, ETags."""

from __future__ import annotations

import json
from email.utils import parsedate_to_datetime

import httpx
import pytest

from fixtures.fake_github import FakeGitHub
from fixtures.fake_github.actions import created_filter
from tests.fake_github.support import DISPATCH, dispatch
from zuke._clock import ManualClock

RUNS = "/repos/acme/app/actions/runs"


def test_an_undeclared_input_is_refused_with_githubs_422_text(gh: FakeGitHub, api: httpx.Client):
    body = {"ref": "main", "inputs": {"suite": "all", "x": "1", "y": "2"}}
    response = api.post(DISPATCH, json=body)
    assert response.status_code == 422
    assert response.json()["message"] == 'Unexpected inputs provided: ["x", "y"]'
    assert gh.runs() == []


def test_a_missing_required_input_is_refused_with_githubs_422_text(gh: FakeGitHub, api):
    response = api.post(DISPATCH, json={"ref": "main", "inputs": {"zuke_marker": "m"}})
    assert response.status_code == 422
    assert response.json()["message"] == "Required input 'suite' not provided"
    assert gh.runs() == []


@pytest.mark.parametrize(
    ("value", "shown"), [(True, "true"), (2, "2"), (1.5, "1.5"), (None, "nil"), (["a"], '["a"]')]
)
def test_an_input_that_is_not_a_string_is_refused_and_dispatches_nothing(
    gh: FakeGitHub, api: httpx.Client, value: object, shown: str
) -> None:
    body = {"ref": "main", "inputs": {"suite": value}}
    response = api.post(DISPATCH, json=body)
    assert response.status_code == 422
    assert response.json()["message"] == (
        f"Invalid request.\n\nFor 'properties/suite', {shown} is not a string."
    )
    assert gh.runs() == []
    assert api.post(DISPATCH, json={"ref": "main", "inputs": {"suite": "2"}}).status_code == 204


@pytest.mark.parametrize(("ghes", "limit"), [(False, 25), (True, 10)])
def test_more_inputs_than_github_accepts_are_refused_before_the_workflows_own_check(
    gh: FakeGitHub, api: httpx.Client, ghes: bool, limit: int
) -> None:
    gh.set_ghes("acme/app", ghes)
    many = {f"i{n}": "x" for n in range(limit + 1)}  # undeclared too: the count is checked first
    response = api.post(DISPATCH, json={"ref": "main", "inputs": many})
    assert response.status_code == 422
    assert (
        f"{limit + 1} properties are more than the maximum of {limit}"
        in (response.json()["message"])
    )
    assert gh.runs() == []
    declared = {f"i{n}": {"required": False} for n in range(limit)}
    gh.add_workflow("acme/app", "wide.yml", inputs=declared)
    exactly = {f"i{n}": "x" for n in range(limit)}
    wide = "/repos/acme/app/actions/workflows/wide.yml/dispatches"
    assert api.post(wide, json={"ref": "main", "inputs": exactly}).status_code == 204


def test_an_unknown_workflow_or_ref_is_refused(gh: FakeGitHub, api: httpx.Client) -> None:
    missing = api.post(
        "/repos/acme/app/actions/workflows/nope.yml/dispatches", json={"ref": "main"}
    )
    assert missing.status_code == 404
    api.put("/repos/acme/app/contents/a", json={"message": "m", "content": ""})  # main exists now
    unknown_ref = dispatch(api, ref="no-such-branch")
    assert unknown_ref.status_code == 422
    assert unknown_ref.json()["message"] == "No ref found for: no-such-branch"


def test_a_dispatch_creates_a_queued_run_titled_by_the_run_name(gh: FakeGitHub, api, clock):
    assert dispatch(api, marker="zuke-abc").status_code == 204
    [run] = gh.dispatched("acme/app")
    assert run["display_title"] == "zuke-abc"
    assert (run["event"], run["head_branch"], run["status"]) == (
        "workflow_dispatch",
        "main",
        "queued",
    )
    assert run["created_ms"] == clock.now_ms()
    assert run["inputs"] == {"zuke_marker": "zuke-abc", "suite": "all"}


@pytest.mark.parametrize(
    ("run_name", "title"),
    [
        ("E2E for ${{ inputs.zuke_marker }} on ${{ github.ref_name }}", "E2E for zm on main"),
        ("${{github.event.inputs.zuke_marker}}", "zm"),
        ("${{ inputs.level }}", "3"),  # a declared default fills an input not sent
        (None, "Nightly E2E"),  # no run-name: the workflow's name
        ("${{ inputs.absent }}", "Nightly E2E"),  # renders blank: the workflow's name
    ],
)
def test_the_display_title_renders_the_run_name_template(gh: FakeGitHub, api, run_name, title):
    inputs = {"zuke_marker": {}, "level": {"default": "3"}, "absent": {}}
    gh.add_workflow("acme/app", "n.yml", inputs=inputs, run_name=run_name, name="Nightly E2E")
    body = {"ref": "main", "inputs": {"zuke_marker": "zm"}}
    assert (
        api.post("/repos/acme/app/actions/workflows/n.yml/dispatches", json=body).status_code == 204
    )
    assert gh.dispatched()[-1]["display_title"] == title


def test_return_run_details_answers_the_run_on_github_com(gh: FakeGitHub, api: httpx.Client):
    response = dispatch(api, return_run_details=True)
    assert response.status_code == 200
    run_id = response.json()["workflow_run_id"]
    assert [r["id"] for r in gh.dispatched()] == [run_id]
    assert response.json()["run_url"] == f"{gh.url}{RUNS}/{run_id}"
    assert api.get(response.json()["run_url"]).json()["id"] == run_id


def test_api_version_2026_03_10_returns_run_details_by_default(gh: FakeGitHub, api) -> None:
    body = {"ref": "main", "inputs": {"suite": "all"}}
    response = api.post(DISPATCH, json=body, headers={"X-GitHub-Api-Version": "2026-03-10"})
    assert response.status_code == 200 and "workflow_run_id" in response.json()


@pytest.mark.parametrize("per_repo", [False, True], ids=["global", "per-repo"])
def test_ghes_refuses_return_run_details_with_400_and_dispatches_nothing(gh, api, per_repo):
    if per_repo:
        gh.set_ghes("acme/app", True)
    else:
        gh.configure(ghes=True)
    refused = dispatch(api, return_run_details=True)
    assert refused.status_code == 400
    assert refused.json()["message"] == "return_run_details is not a permitted key."
    assert gh.runs() == []
    assert dispatch(api).status_code == 204
    assert len(gh.dispatched()) == 1


def test_run_listings_filter_by_event_branch_status_and_created(gh: FakeGitHub, api, clock):
    gh.add_run("acme/app", "e2e.yml", branch="main", event="push", count=2)
    gh.add_run("acme/app", "e2e.yml", branch="other", event="workflow_dispatch")
    clock.advance(5_000)
    dispatch(api)
    dispatched = gh.dispatched()[-1]
    since = dispatched["created_at"]

    def ids(**params: str) -> list[int]:
        return [r["id"] for r in api.get(RUNS, params=params).json()["workflow_runs"]]

    assert ids(event="workflow_dispatch", branch="main") == [dispatched["id"]]
    assert len(ids(event="push")) == 2
    assert ids(status="queued") == [dispatched["id"]]
    assert len(ids(status="success")) == 3  # status also filters by conclusion, as GitHub's does
    assert ids(created=f">={since}") == [dispatched["id"]]
    assert len(ids(created=f"<{since}")) == 3
    per_workflow = api.get("/repos/acme/app/actions/workflows/e2e.yml/runs",
                           params={"branch": "other"}).json()  # fmt: skip
    assert per_workflow["total_count"] == 1


def test_created_filters_follow_githubs_search_syntax() -> None:
    at = 1_800_000_000  # 2027-01-15T08:00:00Z
    assert created_filter(">=2027-01-15T08:00:00Z")(at)
    assert not created_filter(">2027-01-15T08:00:00Z")(at)
    assert created_filter("2027-01-15")(at) and not created_filter("2027-01-14")(at)
    assert created_filter("<=2027-01-15")(at + 3600)  # a bare date covers the whole day
    assert created_filter("2027-01-15T07:00:00Z..2027-01-15T09:00:00Z")(at)
    assert created_filter("2027-01-15T08:00:00+00:00..*")(at)


def test_listings_are_newest_first_and_paginated_with_link_headers(gh: FakeGitHub, api, clock):
    for _ in range(5):
        gh.add_run("acme/app", "e2e.yml", event="workflow_dispatch")
        clock.advance(1000)
    first = api.get(RUNS, params={"per_page": "2"})
    assert first.json()["total_count"] == 5
    links = first.links
    assert set(links) == {"next", "last"}
    assert "page=3" in links["last"]["url"]
    seen = [r["id"] for r in first.json()["workflow_runs"]]
    url = links["next"]["url"]
    while url:
        page = api.get(url)
        seen += [r["id"] for r in page.json()["workflow_runs"]]
        url = page.links.get("next", {}).get("url")
    assert seen == sorted((r["id"] for r in gh.runs()), reverse=True)
    assert "prev" in api.get(RUNS, params={"per_page": "2", "page": "3"}).links


def test_an_unchanged_get_answers_304_which_costs_no_rate_limit(gh: FakeGitHub, api) -> None:
    first = api.get(RUNS)
    etag = first.headers["ETag"]
    remaining = int(first.headers["x-ratelimit-remaining"])
    again = api.get(RUNS, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert int(again.headers["x-ratelimit-remaining"]) == remaining
    assert gh.stats()["not_modified"] == 1
    dispatch(api)
    changed = api.get(RUNS, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag


def test_the_date_header_follows_the_fakes_clock(gh: FakeGitHub, api, clock: ManualClock):
    first = parsedate_to_datetime(api.get(RUNS).headers["Date"])
    assert first.timestamp() == clock.now_ms() // 1000
    gh.advance_clock(90)
    later = parsedate_to_datetime(api.get(RUNS).headers["Date"])
    assert (later - first).total_seconds() == 90


def test_the_test_drives_a_run_through_its_states_and_jobs(gh: FakeGitHub, api) -> None:
    run_id = dispatch(api, return_run_details=True).json()["workflow_run_id"]
    gh.set_run_status(run_id, "in_progress")
    assert api.get(f"{RUNS}/{run_id}").json()["status"] == "in_progress"
    assert {j["status"] for j in api.get(f"{RUNS}/{run_id}/jobs").json()["jobs"]} == {"in_progress"}
    gh.complete_run(run_id, conclusion="failure", jobs=[("unit", "success"), ("e2e", "failure")])
    run = api.get(f"{RUNS}/{run_id}").json()
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    jobs = api.get(f"{RUNS}/{run_id}/jobs").json()["jobs"]
    assert [(j["name"], j["conclusion"]) for j in jobs] == [("unit", "success"), ("e2e", "failure")]
    with pytest.raises(ValueError, match="conclusion"):
        gh.complete_run(run_id, conclusion="passed")


@pytest.mark.parametrize("status", [None, "teleported"])
def test_a_run_can_be_given_any_status_string_or_null_as_github_may_send(
    gh: FakeGitHub, api: httpx.Client, status: str | None
) -> None:
    run_id = dispatch(api, return_run_details=True).json()["workflow_run_id"]
    with pytest.raises(ValueError, match="status"):
        gh.set_run_status(run_id, status)  # only the documented ones without raw
    gh.set_run_status(run_id, status, raw=True)
    assert api.get(f"{RUNS}/{run_id}").json()["status"] == status
    [listed] = api.get(RUNS).json()["workflow_runs"]
    assert (listed["status"], listed["conclusion"]) == (status, None)


def test_cancel_completes_the_run_as_cancelled_or_leaves_it_to_the_test(gh: FakeGitHub, api):
    run_id = dispatch(api, return_run_details=True).json()["workflow_run_id"]
    assert api.post(f"{RUNS}/{run_id}/cancel").status_code == 202
    assert (gh.run(run_id)["conclusion"], gh.run(run_id)["cancel_requested"]) == ("cancelled", True)
    gh.configure(cancel_completes=False)
    second = dispatch(api, return_run_details=True).json()["workflow_run_id"]
    assert api.post(f"{RUNS}/{second}/cancel").status_code == 202
    assert (gh.run(second)["status"], gh.run(second)["cancel_requested"]) == ("queued", True)


def test_every_request_is_logged_without_its_token(gh: FakeGitHub, api: httpx.Client) -> None:
    dispatch(api)
    api.get(RUNS)
    log = gh.requests
    assert [(r["method"], r["endpoint"]) for r in log] == [
        ("POST", "POST /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches"),
        ("GET", "GET /repos/{owner}/{repo}/actions/runs"),
    ]
    assert all("authorization" not in r["headers"] for r in log)
    assert gh.token not in repr(log) + repr(gh.stats())
    assert json.loads(log[0]["body"])["inputs"]["zuke_marker"] == "m-1"  # bodies are kept
    assert log[1]["body"] == ""
    assert gh.stats()["endpoints"]["GET /repos/{owner}/{repo}/actions/runs"] == 1


def test_a_dispatched_run_is_listed_only_after_the_configured_delay(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    """GitHub's runs listing lags a dispatch (return-dispatch#183, dispatch-workflow#162);
    the run's own URL, whose id the dispatch returned, answers at once."""
    gh.configure(run_listing_delay_ms=5_000)
    run_id = dispatch(api, return_run_details=True).json()["workflow_run_id"]
    assert api.get(f"/repos/acme/app/actions/runs/{run_id}").status_code == 200
    for path in ("/repos/acme/app/actions/runs", "/repos/acme/app/actions/workflows/e2e.yml/runs"):
        assert api.get(path).json() == {"total_count": 0, "workflow_runs": []}
    gh.advance_clock(4.999)
    assert api.get("/repos/acme/app/actions/runs").json()["total_count"] == 0
    gh.advance_clock(ms=1)
    listed = api.get("/repos/acme/app/actions/runs").json()
    assert [r["id"] for r in listed["workflow_runs"]] == [run_id]
