"""``github_workflow`` inside GitHub's published rules: inputs are strings and few enough
(checked at load), a run's ``status`` is a nullable string, runs appear minutes late, and two
runs carrying one marker are refused rather than guessed between."""

from __future__ import annotations

import json
from typing import Any

import pytest
import respx

from tests.gh._workflow_support import DATE, DISPATCH, RUNS, Probe, gate, run, runs_page
from tests.gh.conftest import START_MS, MakeClient
from zuke import BuildDefinitionError, NotYet, Satisfied, WaitFailed
from zuke_gh import github_workflow, read_workflow_result
from zuke_gh.workflow import WorkflowSettings

MARKER = "zuke:r1:e2e"
MINUTE = 60_000


def settings(configure: Any) -> Any:
    def full(g: WorkflowSettings) -> Any:
        g.repo("acme/app").workflow("e2e.yml")
        return configure(g)

    return full


# -- inputs: strings, by one rule; their count checked at load -----------------------------


def test_inputs_go_out_as_strings_by_one_documented_rule(
    router: respx.Router, make_client: MakeClient
) -> None:
    post = router.post(DISPATCH).respond(204, headers={"Date": DATE})
    values = {"flag": True, "off": False, "shards": 3, "ratio": 1.5, "suite": "smoke",
              "version": None}  # fmt: skip
    trigger = gate(make_client(), lambda g: g.input("version", "1.0").inputs(values))
    assert isinstance(Probe().check(trigger), NotYet)
    sent = json.loads(post.calls.last.request.content)["inputs"]
    assert sent == {"flag": "true", "off": "false", "shards": "3", "ratio": "1.5",
                    "suite": "smoke", "zuke_marker": MARKER}  # fmt: skip
    assert all(isinstance(v, str) for v in sent.values())  # None left "version" out


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ({"a": 1}, "is a dict"),
        ([1, 2], "is a list"),
        (float("nan"), "non-finite"),
        (b"x", "a bytes"),
    ],
)
def test_an_input_that_is_not_a_scalar_is_refused_when_the_build_loads(
    value: object, what: str
) -> None:
    with pytest.raises(BuildDefinitionError) as caught:
        github_workflow(settings(lambda g: g.input("matrix", value)))
    message = str(caught.value)
    assert message.startswith("github_workflow: input 'matrix' ") and what in message
    assert "json.dumps(value)" in message and "\n" not in message


@pytest.fixture
def github_com(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_API_URL", raising=False)


@pytest.fixture
def ghes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_API_URL", "https://ghe.example.com/api/v3")


def many(count: int) -> dict[str, str]:
    return {f"i{n}": "x" for n in range(count)}


@pytest.mark.usefixtures("github_com")
def test_github_com_takes_25_inputs_the_marker_included() -> None:
    github_workflow(settings(lambda g: g.inputs(many(24))))  # 24 + the marker
    github_workflow(settings(lambda g: g.correlate("created-window").inputs(many(25))))
    with pytest.raises(BuildDefinitionError) as caught:
        github_workflow(settings(lambda g: g.inputs(many(25))))
    assert str(caught.value) == (
        "github_workflow: 26 dispatch inputs (25 from .inputs() plus the marker input "
        "'zuke_marker') is more than the 25 github.com accepts: drop some, or pass several as "
        "one JSON string (fromJSON in the workflow)"
    )


@pytest.mark.usefixtures("ghes")
def test_elsewhere_the_strict_ghes_limit_of_10_applies_unless_the_gate_says_more() -> None:
    github_workflow(settings(lambda g: g.inputs(many(9))))
    with pytest.raises(BuildDefinitionError) as caught:
        github_workflow(settings(lambda g: g.inputs(many(10))))
    message = str(caught.value)
    assert "11 dispatch inputs" in message and "more than the 10 GitHub Enterprise Server" in (
        message
    )
    assert "ghe.example.com" in message and ".input_limit(n)" in message
    github_workflow(settings(lambda g: g.inputs(many(24)).input_limit(25)))  # a newer GHES
    with pytest.raises(BuildDefinitionError, match="input_limit"):
        github_workflow(settings(lambda g: g.input_limit(26)))


# -- a run's status: nullable, and not an enum ----------------------------------------------


def dispatched(probe: Probe, trigger: Any, router: respx.Router) -> None:
    router.post(DISPATCH).respond(204, headers={"Date": DATE})
    assert isinstance(probe.check(trigger), NotYet)


@pytest.mark.parametrize(
    ("status", "shown"),
    [
        (None, "has no status (null)"),
        ("teleported", "has the status 'teleported'"),
        ({"odd": 1}, "has the status {'odd': 1}"),  # not even a string: still only waiting
    ],
)
def test_a_null_or_unknown_status_keeps_the_gate_waiting_saying_what_it_saw(
    router: respx.Router, make_client: MakeClient, status: str | None, shown: str
) -> None:
    trigger = gate(make_client())
    probe = Probe()
    listing = router.get(RUNS).mock(return_value=runs_page(run(4, MARKER, status=status)))
    dispatched(probe, trigger, router)
    answer = probe.check(trigger, START_MS + 60 * MINUTE)
    assert isinstance(answer, NotYet)
    assert answer.reason == (
        f"github_workflow acme/app e2e.yml@main: run https://github.com/acme/app/actions/runs/4 "
        f"{shown}, which is not completed; the gate keeps waiting until it completes or the gate "
        "times out"
    )
    assert read_workflow_result(probe.meta) is None and probe.meta["runId"] == 4
    listing.mock(return_value=runs_page(run(4, MARKER, status="completed", conclusion="success")))
    router.get("/repos/acme/app/actions/runs/4/jobs").respond(200, json={"jobs": []})
    done = probe.check(trigger, START_MS + 61 * MINUTE)
    assert isinstance(done, Satisfied) and read_workflow_result(probe.meta).passed  # type: ignore[union-attr]


# -- correlation: a late run, a window that is a setting, two runs with our marker ----------


def created_window(
    router: respx.Router, make_client: MakeClient, configure: Any = None
) -> tuple[Probe, Any]:
    def setup(g: WorkflowSettings) -> Any:
        g.correlate("created-window")
        return configure(g) if configure else g

    trigger = gate(make_client(), setup)
    probe = Probe()
    router.get(RUNS).mock(return_value=runs_page())
    dispatched(probe, trigger, router)
    return probe, trigger


def test_by_default_a_run_created_minutes_after_the_dispatch_is_still_found(
    router: respx.Router, make_client: MakeClient
) -> None:
    probe, trigger = created_window(router, make_client)
    late = run(70, "e2e", created_ms=START_MS + 7 * MINUTE)  # GitHub was busy
    router.get(RUNS).mock(return_value=runs_page(late))
    answer = probe.check(trigger, START_MS + 8 * MINUTE)
    assert answer.reason.endswith("runs/70 is queued") and probe.meta["runId"] == 70


def test_the_created_window_is_a_setting(router: respx.Router, make_client: MakeClient) -> None:
    probe, trigger = created_window(router, make_client, lambda g: g.created_window("2m"))
    late = run(70, "e2e", created_ms=START_MS + 3 * MINUTE)
    router.get(RUNS).mock(return_value=runs_page(late))
    answer = probe.check(trigger, START_MS + 4 * MINUTE)
    assert isinstance(answer, NotYet) and "no run identified yet" in (answer.reason or "")
    assert "of the 600 s discovery window" in (answer.reason or "")  # it still looks that long


def test_a_window_longer_than_the_discovery_lengthens_it_unless_both_were_set() -> None:
    spec = github_workflow(settings(lambda g: g.created_window("20m"))).spec  # type: ignore[attr-defined]
    assert (spec.window_ms, spec.discovery_ms) == (20 * MINUTE, 20 * MINUTE)
    spec = github_workflow(settings(lambda g: g.discovery_timeout("3m"))).spec  # type: ignore[attr-defined]
    assert (spec.window_ms, spec.discovery_ms) == (3 * MINUTE, 3 * MINUTE)
    with pytest.raises(BuildDefinitionError, match="longer than discovery_timeout"):
        github_workflow(settings(lambda g: g.created_window("20m").discovery_timeout("5m")))


def test_two_runs_carrying_the_marker_are_refused_naming_both(
    router: respx.Router, make_client: MakeClient
) -> None:
    trigger = gate(make_client())
    probe = Probe()
    router.get(RUNS).mock(return_value=runs_page(run(9, MARKER), run(8, MARKER)))
    dispatched(probe, trigger, router)
    answer = probe.check(trigger)
    assert isinstance(answer, WaitFailed)
    for part in (
        "2 workflow runs carry this gate's marker 'zuke:r1:e2e'",
        "run 9 (https://github.com/acme/app/actions/runs/9)",
        "run 8 (https://github.com/acme/app/actions/runs/8)",
        "will not guess",
    ):
        assert part in answer.reason
    assert "runId" not in probe.meta


def test_a_rerun_keeps_its_id_so_it_is_the_same_run_not_a_second(
    router: respx.Router, make_client: MakeClient
) -> None:
    trigger = gate(make_client())
    probe = Probe()
    again = {**run(9, MARKER), "run_attempt": 2}  # a page that shifted: run 9 listed twice
    router.get(RUNS).mock(return_value=runs_page(again, run(9, MARKER)))
    dispatched(probe, trigger, router)
    assert probe.check(trigger).reason.endswith("runs/9 is queued")
    assert probe.meta["runId"] == 9


def test_created_window_ambiguity_names_the_runs_ids_and_urls(
    router: respx.Router, make_client: MakeClient
) -> None:
    probe, trigger = created_window(router, make_client)
    two = [run(51, "e2e", created_ms=START_MS + 2_000), run(50, "e2e", created_ms=START_MS + 1_000)]
    router.get(RUNS).mock(return_value=runs_page(*two))
    answer = probe.check(trigger, START_MS + MINUTE)
    assert isinstance(answer, WaitFailed)
    assert "run 51 (https://github.com/acme/app/actions/runs/51)" in answer.reason
    assert "run 50 (https://github.com/acme/app/actions/runs/50)" in answer.reason
