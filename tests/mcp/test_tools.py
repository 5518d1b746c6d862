"""The ``zuke mcp`` tools in-process: results, refusals and the audit trail they leave."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.mcp.support import BUILD, SECRET
from zuke._build import Build
from zuke._loader import load_build_class
from zuke.cli.mcp_cmd import describe
from zuke.mcp.tools import BuildTools, ToolFailure
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunEvent

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def build(tmp_path: Path) -> type[Build]:
    path = tmp_path / "build.py"
    path.write_text(textwrap.dedent(BUILD))
    return load_build_class(path)


def tools_for(build: type[Build], tmp_path: Path, **flags: Any) -> BuildTools:
    env = {"ZUKE_STATE_DIR": str(tmp_path / "state"), "TOKEN": SECRET}
    warnings: list[str] = []
    tools = BuildTools(build=build, env=env, actor="agent", describe=describe, **flags)
    tools.warn = warnings.append
    return tools


def store_of(tmp_path: Path) -> FileSystemStateStore:
    return FileSystemStateStore(tmp_path / "state")


def events(tmp_path: Path, run_id: str) -> list[RunEvent]:
    found = store_of(tmp_path).get_run(run_id)
    assert found is not None
    return [e for e in found.record.events if e.tool.startswith("mcp:")]


def all_state_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (tmp_path / "state").rglob("*") if p.is_file())


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
