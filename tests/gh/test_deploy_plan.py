"""What each environment's deployment should show, from the record alone (issue 26 §3)."""

from __future__ import annotations

from typing import Any

from zuke.state.records import GraphNode, RunEvent, RunRecord, TargetRecord, WaitingFor
from zuke_gh._deploy_plan import DESCRIPTION_LIMIT, fit, wanted

STAMP = "2026-12-07T13:02:00.000Z"


def record(status: str, **rows: TargetRecord) -> RunRecord:
    return RunRecord(
        id="r1", build="Release", root_target="production", status=status,  # type: ignore[arg-type]
        actor="ana", created_at=STAMP, updated_at=STAMP,
        graph=(GraphNode("staging"), GraphNode("approve", ("staging",)),
               GraphNode("production", ("approve",))),
        targets=rows,
    )  # fmt: skip


def env(name: str, status: str = "pending", **kw: Any) -> TargetRecord:
    return TargetRecord(status=status, environment=name, **kw)  # type: ignore[arg-type]


def states(r: RunRecord) -> dict[str, tuple[str, str]]:
    return {w.environment: (w.state, w.description) for w in wanted(r, lambda t: t)}


def test_a_run_waiting_at_a_gate_shows_pending_with_what_the_gate_waits_for_and_since() -> None:
    gate = TargetRecord(status="waiting", started_at=STAMP, waiting_for=WaitingFor(
        "github-approval:acme/app", detail="waiting for 2 approvals on #12"))  # fmt: skip
    shown = states(record("suspended", staging=env("staging", "succeeded"), approve=gate,
                          production=env("production")))  # fmt: skip
    assert shown["staging"][0] == "success"
    assert shown["production"] == (
        "pending",
        "waiting at approve since 2026-12-07 13:02 UTC for 2 approvals on #12",
    )


def test_each_target_status_maps_to_githubs_deployment_state() -> None:
    cases = {
        ("running", "running"): "in_progress",
        ("running", "pending"): "queued",
        ("failed", "failed"): "failure",
        ("failed", "skipped"): "error",
        ("succeeded", "succeeded"): "success",
        ("cancelled", "succeeded"): "inactive",
    }
    for (run, target), state in cases.items():
        assert states(record(run, staging=env("staging", target)))["staging"][0] == state
    stopped = env("staging", "failed", interrupted=True, error="cancelled while running")
    assert states(record("failed", staging=stopped))["staging"][0] == "error"


def test_a_rollback_says_rolled_back() -> None:
    r = record("cancelled", staging=env("staging", "succeeded"))
    r = RunRecord(**{**r.__dict__, "events": (RunEvent(STAMP, "timeout", "sweep"),)})
    assert states(r)["staging"] == ("inactive", "rolled back: run r1")


def test_descriptions_are_redacted_inert_and_at_most_140_characters() -> None:
    text = fit(
        "deploy\u202eevil\nline two hunter2 " + "x" * 300, lambda t: t.replace("hunter2", "***")
    )
    assert len(text) == DESCRIPTION_LIMIT and text.endswith("…")
    assert "\u202e" not in text and "\n" not in text and "hunter2" not in text
    assert "\\u202e" in text


def test_targets_without_an_environment_show_nothing() -> None:
    assert wanted(record("running", staging=TargetRecord()), lambda t: t) == []
