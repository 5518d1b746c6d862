"""``github_workflow``: finding the run (marker equality, the created window by GitHub's clock,
pages), waiting on it, the result, the discovery window, and one listing per sweep."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import respx

from tests.gh._workflow_support import (
    DATE,
    DISPATCH,
    RUNS,
    Probe,
    gate,
    http_date,
    run,
    runs_page,
)
from tests.gh.conftest import START_MS, MakeClient
from zuke import NotYet, Satisfied, WaitFailed
from zuke_gh import RetryPolicy, read_workflow_result

MARKER = "zuke:r1:e2e"
MINUTE = 60_000


def dispatched(probe: Probe, trigger: Any, router: respx.Router) -> None:
    """Take the gate through its dispatch (a 204: no run id)."""
    router.post(DISPATCH).respond(204, headers={"Date": DATE})
    assert isinstance(probe.check(trigger), NotYet)


def test_marker_correlation_is_equality_not_substring_and_fails_fast_with_the_contract(
    router: respx.Router, make_client: MakeClient
) -> None:
    trigger = gate(make_client())
    probe = Probe()
    router.get(RUNS).mock(return_value=runs_page(run(3, f"E2E [{MARKER}]"), run(2, MARKER + "x")))
    dispatched(probe, trigger, router)
    waiting = probe.check(trigger, START_MS + 30_000)
    assert isinstance(waiting, NotYet)
    assert "30 s of the 600 s discovery window" in (waiting.reason or "")  # 10 minutes: runs
    assert "runId" not in probe.meta  # appear minutes late under load
    # The window is measured from the persisted dispatch time, not from this check.
    failed = probe.check(gate(make_client()), START_MS + 10 * MINUTE)
    assert isinstance(failed, WaitFailed)
    for part in ("within 600 s", "`zuke_marker`", "run-name: ${{ inputs.zuke_marker }}",
                 "equality, not substring", '.correlate("created-window")'):  # fmt: skip
        assert part in failed.reason


def test_the_discovery_window_also_ends_by_githubs_clock(
    router: respx.Router, make_client: MakeClient
) -> None:
    trigger = gate(make_client(), lambda g: g.discovery_timeout("2m"))
    probe = Probe()
    dispatched(probe, trigger, router)
    late = http_date(START_MS + 3 * MINUTE)  # GitHub says 3 minutes; our clock says 1 second
    router.get(RUNS).mock(return_value=runs_page(run(3, "someone else's"), date=late))
    failed = probe.check(trigger, START_MS + 1_000)
    assert isinstance(failed, WaitFailed) and "within 180 s" in failed.reason


@pytest.mark.parametrize("status", ["queued", "in_progress", "waiting", "requested", "pending"])
def test_a_run_that_is_not_completed_keeps_the_gate_waiting_saying_its_status_and_url(
    router: respx.Router, make_client: MakeClient, status: str
) -> None:
    trigger = gate(make_client())
    probe = Probe()
    router.get(RUNS).mock(return_value=runs_page(run(4, MARKER, status=status)))
    dispatched(probe, trigger, router)
    answer = probe.check(trigger)
    assert answer == NotYet(
        f"github_workflow acme/app e2e.yml@main: run "
        f"https://github.com/acme/app/actions/runs/4 is {status}"
    )


@pytest.mark.parametrize(
    ("conclusion", "passed"),
    [("success", True), ("failure", False), ("cancelled", False), (None, False)],
)
def test_a_completed_run_writes_its_result_and_jobs_and_passed_only_on_success(
    router: respx.Router, make_client: MakeClient, conclusion: str | None, passed: bool
) -> None:
    trigger = gate(make_client())
    probe = Probe()
    done = run(4, MARKER, status="completed", conclusion=conclusion)
    router.get(RUNS).mock(return_value=runs_page(done))
    jobs = [{"name": "unit", "conclusion": "success", "html_url": "https://j/1"},
            {"name": "e2e", "conclusion": conclusion, "html_url": "https://j/2"}]  # fmt: skip
    router.get("/repos/acme/app/actions/runs/4/jobs").respond(
        200, json={"total_count": 2, "jobs": jobs}
    )
    dispatched(probe, trigger, router)
    assert read_workflow_result(probe.meta) is None  # before completion
    answer = probe.check(trigger)
    assert isinstance(answer, Satisfied)
    result = read_workflow_result(probe.meta)
    assert result is not None
    assert (result.passed, result.conclusion, result.run_id) == (
        passed, conclusion or "unknown", 4,
    )  # fmt: skip
    assert result.url == "https://github.com/acme/app/actions/runs/4"
    assert [(j.name, j.conclusion, j.url) for j in result.jobs] == [
        ("unit", "success", "https://j/1"), ("e2e", conclusion or "", "https://j/2"),
    ]  # fmt: skip
    # Satisfied stays satisfied without asking GitHub again.
    calls = len(router.calls)
    assert isinstance(probe.check(trigger), Satisfied) and len(router.calls) == calls


def test_read_workflow_result_tolerates_malformed_state() -> None:
    assert read_workflow_result({}) is None
    assert read_workflow_result({"result": "done"}) is None
    odd = read_workflow_result(
        {"result": {"passed": "yes", "jobs": [{"name": 3}, "x", {"conclusion": "success"}]}}
    )
    assert odd is not None and odd.passed is False and odd.conclusion == "unknown"
    assert [(j.name, j.conclusion, j.url) for j in odd.jobs] == [("", "", ""), ("", "success", "")]


def created_window(router: respx.Router, make_client: MakeClient) -> tuple[Probe, Any]:
    """A created-window gate dispatched at START_MS with run 1 already there (the baseline)."""
    trigger = gate(make_client(), lambda g: g.correlate("created-window").discovery_timeout("5m"))
    probe = Probe()
    router.get(RUNS).mock(return_value=runs_page(run(1, "e2e", created_ms=START_MS - 5_000)))
    dispatched(probe, trigger, router)
    assert probe.meta["baselineIds"] == [1] and probe.meta["githubDispatchedAt"] == START_MS
    for route in router.routes:
        route.calls.clear()
    return probe, trigger


def busy_pages(*second_page: dict[str, Any]) -> list[httpx.Response]:
    """Page 1: a hundred runs dispatched long after the window; page 2: ``second_page``."""
    later = [run(1000 + i, "e2e", created_ms=START_MS + 3_600_000 + i) for i in range(100)]
    return [runs_page(*later, Link='<https://api.github.com/x?page=2>; rel="next"'),
            runs_page(*second_page)]  # fmt: skip


def test_created_window_claims_the_one_new_run_on_a_later_page(
    router: respx.Router, make_client: MakeClient
) -> None:
    probe, trigger = created_window(router, make_client)
    ours = run(50, "e2e", created_ms=START_MS + 2_000)
    old = run(1, "e2e", created_ms=START_MS - 5_000)
    listing = router.get(RUNS).mock(side_effect=busy_pages(ours, old))
    answer = probe.check(trigger, START_MS + 7_200_000)
    assert answer.reason.endswith("runs/50 is queued")
    assert [c.request.url.params["page"] for c in listing.calls] == ["1", "2"]


def test_created_window_with_two_candidates_fails_loudly_naming_both(
    router: respx.Router, make_client: MakeClient
) -> None:
    probe, trigger = created_window(router, make_client)
    a = run(51, "e2e", created_ms=START_MS + 2_000)
    b = run(50, "e2e", created_ms=START_MS - 10_000)  # within the skew allowance
    router.get(RUNS).mock(side_effect=busy_pages(a, b, run(1, "e2e", created_ms=START_MS - 5_000)))
    answer = probe.check(trigger, START_MS + 7_200_000)
    assert isinstance(answer, WaitFailed)
    assert "ambiguous: 2 workflow_dispatch runs share the window" in answer.reason
    assert "actions/runs/51" in answer.reason and "actions/runs/50" in answer.reason
    assert "runId" not in probe.meta


def test_created_window_ignores_runs_before_the_skew_allowance_and_other_branches(
    router: respx.Router, make_client: MakeClient
) -> None:
    probe, trigger = created_window(router, make_client)
    router.get(RUNS).mock(return_value=runs_page(
        run(60, "e2e", branch="feature", created_ms=START_MS + 1_000),
        run(59, "e2e", created_ms=START_MS - 31_000),
    ))  # fmt: skip
    answer = probe.check(trigger, START_MS + 10_000)
    assert isinstance(answer, NotYet) and "no run identified yet" in (answer.reason or "")


def test_one_sweep_lists_the_workflow_once_however_many_gates_wait_on_it(
    router: respx.Router, make_client: MakeClient
) -> None:
    client = make_client()
    probes = [Probe(run_id=f"r{i}") for i in range(5)]
    router.post(DISPATCH).respond(204)
    listing = router.get(RUNS).mock(return_value=runs_page())
    for probe in probes:  # each dispatched in its own earlier run (its own sweep)
        probe.check(gate(client))
    titles = [run(10 + i, f"zuke:r{i}:e2e", status="queued") for i in range(5)]
    titles[0]["status"] = titles[1]["status"] = "completed"
    titles[0]["conclusion"] = titles[1]["conclusion"] = "success"
    listing.mock(return_value=runs_page(*titles))
    jobs = router.get(url__regex=r"/actions/runs/\d+/jobs").respond(200, json={"jobs": []})
    before = len(router.calls)
    shared: dict[str, Any] = {}
    answers = [probe.check(gate(client), shared=shared) for probe in probes]
    assert [type(a).__name__ for a in answers] == ["Satisfied"] * 2 + ["NotYet"] * 3
    assert listing.call_count == 1 and jobs.call_count == 2
    assert len(router.calls) - before == 3  # one listing plus one per completed run


def test_a_run_followed_by_id_but_not_in_the_listing_is_fetched_once(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7})
    router.get(RUNS).mock(return_value=runs_page(run(9, "newer")))  # 7 is older than the page
    single = router.get("/repos/acme/app/actions/runs/7").respond(200, json=run(7, "x"))
    probe = Probe()
    trigger = gate(make_client())
    probe.check(trigger)
    shared: dict[str, Any] = {}
    assert probe.check(trigger, shared=shared).reason.endswith("runs/7 is queued")
    assert Probe.check(probe, trigger, shared=shared).reason.endswith("runs/7 is queued")
    assert single.call_count == 1


def test_a_failing_poll_keeps_the_gate_waiting_until_the_discovery_window_ends(
    router: respx.Router, make_client: MakeClient
) -> None:
    trigger = gate(make_client(retry=RetryPolicy(max_attempts=1)))
    probe = Probe()
    dispatched(probe, trigger, router)
    router.get(RUNS).respond(503, json={"message": "Service Unavailable"})
    waiting = probe.check(trigger, START_MS + 10_000)
    assert isinstance(waiting, NotYet) and "did not answer the poll" in (waiting.reason or "")
    assert "503" in (waiting.reason or "")
    failed = probe.check(trigger, START_MS + 10 * MINUTE)
    assert isinstance(failed, WaitFailed) and "the last poll failed" in failed.reason


def test_a_failing_poll_of_an_identified_run_only_waits(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7})
    trigger = gate(make_client(retry=RetryPolicy(max_attempts=1)))
    probe = Probe()
    probe.check(trigger)
    router.get(RUNS).respond(429, json={"message": "slow down"}, headers={"retry-after": "999"})
    answer = probe.check(trigger, START_MS + 3_600_000)
    assert isinstance(answer, NotYet) and "did not answer the poll" in (answer.reason or "")


def test_a_poll_refused_for_good_raises_so_the_sweep_reports_it(
    router: respx.Router, make_client: MakeClient
) -> None:
    from zuke_gh import GitHubError

    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7})
    trigger = gate(make_client())
    probe = Probe()
    probe.check(trigger)
    router.get(RUNS).respond(401, json={"message": "Bad credentials"})
    with pytest.raises(GitHubError, match="401"):
        probe.check(trigger)
