"""The ``zuke mcp`` tools in-process: results, refusals and the audit trail they leave."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mcp.support import (
    COMPENSATED_BUILD,
    SECRET,
    all_state_bytes,
    build_from,
    events,
    run,
    store_of,
    tools_for,
)
from zuke._build import Build
from zuke._clock import ManualClock, iso, parse_iso
from zuke.mcp.tools import ToolFailure


def test_list_targets_gives_targets_dependencies_and_parameters_but_no_secret(
    build: type[Build], tmp_path: Path
) -> None:
    listing = run(tools_for(build, tmp_path).list_targets())
    targets = {t["name"]: t for t in listing["targets"]}
    assert targets["approve"] == {
        "name": "approve",
        "description": "Wait for QA.",
        "dependsOn": ["deploy"],
    }
    params = {p["name"]: p for p in listing["parameters"]}
    assert params["token"]["secret"] is True and "default" not in params["token"]
    assert params["version"]["default"] == "1.0"
    assert SECRET not in repr(listing)


def test_run_target_suspends_at_a_gate_and_records_the_call_with_the_secret_redacted(
    build: type[Build], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = tools_for(build, tmp_path)
    result = run(tools.run_target(["promote"], {"token": "given-secret-1", "version": "2.0"}))
    assert result["status"] == "suspended" and result["ok"] is True
    assert result["outcomes"]["deploy"]["status"] == "succeeded"
    assert result["outcomes"]["approve"]["status"] == "waiting"
    assert result["waiting"]["approve"]["trigger"] == "signal:approved"
    (event,) = events(tmp_path, result["runId"])
    assert (event.tool, event.actor, event.outcome) == ("mcp:run_target", "agent", "ok")
    assert event.args["targets"] == '["promote"]'
    assert event.args["params"] == '{"token": "[redacted]", "version": ["2.0"]}'
    assert b"given-secret-1" not in all_state_bytes(tmp_path)
    assert capsys.readouterr().out == "deploying 2.0\n"  # the body's print, no console


def test_a_failing_target_is_a_result_whose_error_names_no_secret(
    build: type[Build], tmp_path: Path
) -> None:
    result = run(tools_for(build, tmp_path).run_target(["broken"], {"token": "given-secret-2"}))
    assert result["status"] == "failed" and result["ok"] is False
    error = result["outcomes"]["broken"]["error"]
    assert "refused token [redacted]" in error and "given-secret-2" not in repr(result)


def test_show_resume_and_the_trail_each_call_leaves(build: type[Build], tmp_path: Path) -> None:
    tools = tools_for(build, tmp_path)
    run_id = run(tools.run_target(["promote"]))["runId"]
    shown = run(tools.show_run(run_id))
    assert shown["id"] == run_id and shown["status"] == "suspended"
    assert SECRET not in repr(shown)
    resumed = run(tools.resume_run(run_id, "approved", {"by": "qa"}, "sig-1"))
    assert (resumed["action"], resumed["status"], resumed["ok"]) == ("resumed", "succeeded", True)
    assert resumed["result"]["outcomes"]["promote"]["status"] == "succeeded"
    trail = events(tmp_path, run_id)
    assert [e.tool for e in trail] == ["mcp:run_target", "mcp:show_run", "mcp:resume_run"]
    assert trail[1].args == {"run_id": run_id}
    assert trail[2].args == {
        "run_id": run_id,
        "signal": "approved",
        "signal_id": "sig-1",
        "data_bytes": "12",  # {"by": "qa"}
    }
    again = run(tools.resume_run(run_id, "approved", {"by": "qa"}, "sig-1"))
    assert again["action"] == "already-delivered"


def test_a_failed_call_is_one_line_and_lands_on_the_trail_as_an_error(
    build: type[Build], tmp_path: Path
) -> None:
    tools = tools_for(build, tmp_path)
    run_id = run(tools.run_target(["deploy"]))["runId"]
    with pytest.raises(ToolFailure) as caught:
        run(tools.resume_run(run_id))
    assert "\n" not in str(caught.value) and "succeeded" in str(caught.value)
    last = events(tmp_path, run_id)[-1]
    assert (last.tool, last.outcome, last.detail) == ("mcp:resume_run", "error", str(caught.value))


def test_a_run_that_is_not_there_or_an_unsafe_id_is_a_tool_failure(
    build: type[Build], tmp_path: Path
) -> None:
    tools = tools_for(build, tmp_path)
    with pytest.raises(ToolFailure, match='no run "nope" in the store'):
        run(tools.show_run("nope"))
    with pytest.raises(ToolFailure, match="run id"):
        run(tools.show_run("../etc"))


def test_cancel_run_settles_a_suspended_run_and_records_the_call(
    build: type[Build], tmp_path: Path
) -> None:
    tools = tools_for(build, tmp_path)
    run_id = run(tools.run_target(["promote"]))["runId"]
    cancelled = run(tools.cancel_run(run_id, "0s"))
    assert (cancelled["status"], cancelled["noop"]) == ("cancelled", False)
    assert cancelled["summary"].startswith(f"Run {run_id} cancelled")
    last = events(tmp_path, run_id)[-1]
    assert (last.tool, last.outcome, last.args) == (
        "mcp:cancel_run",
        "ok",
        {"run_id": run_id, "wait": "0s"},
    )


def test_cancel_run_walks_the_compensations_a_suspended_run_owes(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    tools = tools_for(build_from(tmp_path, COMPENSATED_BUILD), tmp_path)
    run_id = run(tools.run_target(["approve"], {"markers": str(markers)}))["runId"]
    cancelled = run(tools.cancel_run(run_id, "0s"))
    assert (cancelled["status"], cancelled["owner"]) == ("cancelled", None)
    assert (cancelled["compensated"], cancelled["failures"]) == (["deploy → rollback"], [])
    assert "Ran 1 compensation(s)." in cancelled["summary"]
    assert (markers / "rolled-back").read_text() == "sit-7"  # deploy's recorded state
    found = store_of(tmp_path).get_run(run_id)
    assert found is not None and found.record.status == "cancelled"
    compensations = [e for e in found.record.events if e.tool == "compensate"]
    assert [(e.outcome, dict(e.args)) for e in compensations] == [
        ("ok", {"target": "deploy", "compensation": "rollback"})
    ]
    assert found.record.events[-1].tool == "mcp:cancel_run"
    assert SECRET.encode() not in all_state_bytes(tmp_path)


def test_no_cancel_hides_cancel_run_and_refuses_it_as_denied(
    build: type[Build], tmp_path: Path
) -> None:
    tools = tools_for(build, tmp_path, allow_cancel=False)
    assert "cancel_run" not in tools.enabled() and "run_target" in tools.enabled()
    run_id = run(tools.run_target(["promote"]))["runId"]
    with pytest.raises(ToolFailure, match=r"cancel_run is disabled: .*zuke mcp --no-cancel"):
        run(tools.cancel_run(run_id))
    last = events(tmp_path, run_id)[-1]
    assert (last.tool, last.outcome) == ("mcp:cancel_run", "denied")
    assert store_of(tmp_path).get_run(run_id).record.status == "suspended"  # type: ignore[union-attr]


def test_no_run_leaves_reading_and_cancelling_and_refuses_the_rest(
    build: type[Build], tmp_path: Path
) -> None:
    suspended = run(tools_for(build, tmp_path).run_target(["promote"]))["runId"]
    tools = tools_for(build, tmp_path, allow_run=False)
    assert tools.enabled() == ["list_targets", "list_runs", "show_run", "cancel_run"]
    with pytest.raises(ToolFailure, match="run_target is disabled"):
        run(tools.run_target(["deploy"]))
    with pytest.raises(ToolFailure, match="resume_run is disabled"):
        run(tools.resume_run(suspended, "approved"))
    with pytest.raises(ToolFailure, match="resume_check is disabled"):
        run(tools.resume_check())
    assert [(e.tool, e.outcome) for e in events(tmp_path, suspended)][-1] == (
        "mcp:resume_run",
        "denied",
    )
    assert len(store_of(tmp_path).list_runs()) == 1  # nothing ran


def test_list_runs_filters_and_checks_its_filters(build: type[Build], tmp_path: Path) -> None:
    tools = tools_for(build, tmp_path)
    suspended = run(tools.run_target(["promote"]))["runId"]
    run(tools.run_target(["deploy"]))
    rows = run(tools.list_runs(status="suspended"))["runs"]
    assert [(r["id"], r["status"], r["rootTarget"]) for r in rows] == [
        (suspended, "suspended", "promote")
    ]
    assert len(run(tools.list_runs(limit=1))["runs"]) == 1
    with pytest.raises(ToolFailure, match="--status bogus: expected one of"):
        run(tools.list_runs(status="bogus"))


def test_resume_check_gives_the_sweeps_summary(build: type[Build], tmp_path: Path) -> None:
    tools = tools_for(build, tmp_path)
    run_id = run(tools.run_target(["promote"]))["runId"]
    report = run(tools.resume_check(run_id))
    assert report["counts"]["checked"] == 1 and report["counts"]["still_waiting"] == 1
    assert [r["id"] for r in report["runs"]] == [run_id]
    assert events(tmp_path, run_id)[-1].tool == "mcp:resume_check"


def test_a_look_at_a_run_is_on_its_trail_but_does_not_move_its_updated_at(
    build: type[Build], tmp_path: Path
) -> None:
    tools = tools_for(build, tmp_path)
    run_id = run(tools.run_target(["promote"]))["runId"]
    before = store_of(tmp_path).get_run(run_id)
    assert before is not None
    parked_ms = parse_iso(before.record.updated_at)
    assert parked_ms is not None
    tools.clock = ManualClock(start_ms=parked_ms + 30 * 60_000)  # half-way to the gate's 1h
    shown = run(tools.show_run(run_id))
    run(tools.resume_check(run_id))  # nothing due: a look too
    after = store_of(tmp_path).get_run(run_id)
    assert after is not None
    assert after.record.updated_at == before.record.updated_at == shown["updatedAt"]
    assert after.record.status == "suspended"
    looks = [(e.tool, e.at) for e in after.record.events if e.tool.startswith("mcp:")][1:]
    look_at = iso(parked_ms + 30 * 60_000)
    assert looks == [("mcp:show_run", look_at), ("mcp:resume_check", look_at)]


def test_a_run_started_over_mcp_under_github_actions_keeps_its_starter_a_github_login(
    build: type[Build], tmp_path: Path
) -> None:
    """`zuke mcp` in a workflow: the starter is the triggering login, recorded as one (so that
    `no_self_approval()` can trust it), not a local name given by hand."""
    from zuke._provenance import resolve
    from zuke.cli.mcp_cmd import describe
    from zuke.mcp.tools import BuildTools

    env = {
        "ZUKE_STATE_DIR": str(tmp_path / "state"),
        "GITHUB_ACTIONS": "true",
        "GITHUB_TRIGGERING_ACTOR": "alice",
    }
    who = resolve(None, env)
    tools = BuildTools(build=build, env=env, actor=who.name, actor_source=who.source,
                       describe=describe)  # fmt: skip
    result = run(tools.run_target(["promote"], {"token": "given-secret-1"}))
    found = store_of(tmp_path).get_run(result["runId"])
    assert found is not None
    assert (found.record.actor, found.record.actor_source) == ("alice", "github")
