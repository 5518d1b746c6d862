"""``zuke runs list|show|prune`` against a filesystem store in a temp dir."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import BuildWriter, CliRunner
from zuke import LockAcquired, LockHolder
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunRecord, TargetRecord


def seed(directory: Path) -> FileSystemStateStore:
    store = FileSystemStateStore(directory)
    base = RunRecord(
        id="r1",
        build="Release",
        root_target="deploy",
        status="succeeded",
        actor="alice",
        created_at="2026-01-01T00:00:00.000Z",
        updated_at="2026-01-01T00:05:00.000Z",
        targets={
            "deploy": TargetRecord(
                status="succeeded",
                started_at="2026-01-01T00:00:00.000Z",
                ended_at="2026-01-01T00:00:02.000Z",
            )
        },
        params={"repo": "api"},
    )
    from zuke.state.records import GraphNode

    base = replace(base, graph=(GraphNode("deploy"),))
    store.create_run(base)
    store.create_run(
        replace(
            base,
            id="r2",
            status="failed",
            created_at="2026-02-01T00:00:00.000Z",
            targets={"deploy": TargetRecord(status="failed", error="boom\nmore")},
        )
    )
    store.create_run(
        replace(
            base,
            id="r3",
            status="running",
            created_at="2026-03-01T00:00:00.000Z",
            locks={"zuke-run-r3": "t1", "deploy-api": "t2"},
        )
    )
    store.create_run(
        replace(base, id="r4", status="suspended", created_at="2025-01-01T00:00:00.000Z")
    )
    return store


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    seed(tmp_path / ".zuke" / "runs")
    return tmp_path


def test_list_shows_runs_newest_first(runs_dir: Path, cli: CliRunner) -> None:
    result = cli("runs", "list")
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "TARGET", "ACTOR", "CREATED"]
    assert [line.split()[0] for line in lines[1:]] == ["r3", "r2", "r1", "r4"]


def test_runs_alone_lists(runs_dir: Path, cli: CliRunner) -> None:
    assert cli("runs").out == cli("runs", "list").out


def test_list_filters_and_json(runs_dir: Path, cli: CliRunner) -> None:
    result = cli("runs", "list", "--status", "failed", "--json")
    assert [r["id"] for r in json.loads(result.out)] == ["r2"]
    result = cli("runs", "list", "--since", "2026-01-15T00:00:00Z", "--limit", "1", "--json")
    assert [r["id"] for r in json.loads(result.out)] == ["r3"]
    assert cli("runs", "list", "--target", "nope").out.strip().startswith("No runs found in ")


def test_counts(runs_dir: Path, cli: CliRunner) -> None:
    result = cli("runs", "list", "--counts", "--json")
    assert json.loads(result.out) == {
        "total": 4,
        "byStatus": {"failed": 1, "running": 1, "succeeded": 1, "suspended": 1},
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["runs", "list", "--status", "bogus"], "--status bogus: expected one of running"),
        (["runs", "list", "--since", "yesterday"], "--since yesterday: expected an ISO-8601"),
        (["runs", "list", "--limit", "0"], "--limit 0: expected a positive whole number"),
        (["runs", "show", "../../etc/passwd"], "unsafe run id '../../etc/passwd'"),
        (["runs", "prune"], "runs prune needs --keep DURATION and/or --keep-last N"),
        (["runs", "prune", "--keep", "soon"], "--keep: 'soon' is not a duration"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(
    runs_dir: Path, cli: CliRunner, argv: list[str], message: str
) -> None:
    result = cli(*argv)
    assert result.code == 2, result.text
    assert message in result.err


def test_show_renders_targets_and_parameters(runs_dir: Path, cli: CliRunner) -> None:
    result = cli("runs", "show", "r2")
    assert result.code == 0
    assert "  status:   failed" in result.out
    assert "  repo = api" in result.out
    assert "  x deploy  failed     boom" in result.out


def test_show_json_is_the_raw_record(runs_dir: Path, cli: CliRunner) -> None:
    payload = json.loads(cli("runs", "show", "r1", "--json").out)
    assert payload["id"] == "r1" and payload["rootTarget"] == "deploy"


def test_show_of_an_unknown_run_exits_1(runs_dir: Path, cli: CliRunner) -> None:
    result = cli("runs", "show", "nope")
    assert result.code == 1 and 'no run "nope" in the store' in result.err


def test_prune_never_removes_a_run_that_is_not_finished(runs_dir: Path, cli: CliRunner) -> None:
    dry = cli("runs", "prune", "--keep-last", "0", "--dry-run")
    assert dry.out.strip() == "Would prune 2 run(s): r2, r1"
    done = cli("runs", "prune", "--keep-last", "0")
    assert done.out.strip() == "Pruned 2 run(s): r2, r1"
    remaining = [r["id"] for r in json.loads(cli("runs", "list", "--json").out)]
    assert remaining == ["r3", "r4"]


def test_prune_keeps_the_newest_and_the_young(runs_dir: Path, cli: CliRunner) -> None:
    assert cli("runs", "prune", "--keep-last", "1", "--dry-run").out.strip() == (
        "Would prune 1 run(s): r1"
    )
    assert cli("runs", "prune", "--keep", "36500d", "--dry-run").out.strip() == (
        f"Would prune 0 run(s) in {runs_dir / '.zuke' / 'runs'}."
    )


def test_a_corrupt_record_is_reported_and_the_listing_goes_on(
    runs_dir: Path, cli: CliRunner
) -> None:
    (runs_dir / ".zuke" / "runs" / "broken.jsonl").write_text("{not json\n")
    result = cli("runs", "list", "--json")
    assert result.code == 0
    assert [r["id"] for r in json.loads(result.out)] == ["r3", "r2", "r1", "r4"]
    shown = cli("runs", "show", "broken")
    assert shown.code == 1 and "broken" in shown.err and "Traceback" not in shown.text


def test_a_build_run_with_state_can_be_listed_and_shown(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(
        """
        from zuke import Build, target

        class Tiny(Build):
            @target
            def hello(self, t):
                return t.executes(lambda ctx: ctx.state.set({"said": "hi"}))
        """
    )
    ran = cli("hello", "--state")
    assert ran.code == 0
    runs = json.loads(cli("runs", "list", "--json").out)
    assert len(runs) == 1 and runs[0]["build"] == "Tiny" and runs[0]["status"] == "succeeded"
    record = json.loads(cli("runs", "show", runs[0]["id"], "--json").out)
    assert record["targets"]["hello"]["meta"] == {"said": "hi"}
    assert f"Run {runs[0]['id']}" in ran.out


def test_show_names_the_claims_a_running_run_holds(runs_dir: Path, cli: CliRunner) -> None:
    result = cli("runs", "show", "r3")
    assert "  holding:  deploy-api, zuke-run-r3" in result.out


def test_show_names_a_running_runs_live_holder_and_its_locks(
    runs_dir: Path, cli: CliRunner
) -> None:
    store = FileSystemStateStore(runs_dir / ".zuke" / "runs")
    holder = LockHolder(actor="bob", run_id="r3", since="2026-03-01T00:00:00.000Z")
    assert isinstance(store.acquire_lock("zuke-run-r3", holder, 60_000), LockAcquired)
    assert isinstance(store.acquire_lock("deploy-api", holder, 60_000), LockAcquired)
    result = cli("runs", "show", "r3")
    assert "  held by:  bob since 2026-03-01T00:00:00.000Z (lease live, until " in result.out
    assert "  lock:     deploy-api fence 1, live until " in result.out


def test_show_says_when_nobody_holds_a_running_run(runs_dir: Path, cli: CliRunner) -> None:
    result = cli("runs", "show", "r3")  # its record says running, but no lease is held
    assert "held by:  nobody (its lease is free: `zuke resume --check` reaps it)" in result.out


# -- help and usage errors (click) ----------------------------------------------


def test_runs_list_help_is_plain_text_naming_every_option_with_its_help(
    runs_dir: Path, cli: CliRunner
) -> None:
    result = cli("runs", "list", "-h")
    assert result.code == 0 and result.err == ""
    assert result.out.startswith("Usage: zuke runs list [OPTIONS]\n")
    assert "╭" not in result.out  # no boxed panel
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in result.out.splitlines()
            if line.startswith("  --")}  # fmt: skip
    assert rows == {
        "--status": "STATUS only runs with this status",
        "--target": "TARGET only runs that plan this target",
        "--build": "BUILD only runs of this build (class name)",
        "--since": "ISO only runs created at or after (ISO)",
        "--limit": "N at most this many runs",
        "--counts": "count runs by status",
        "--json": "machine-readable output",
    }


def test_runs_help_lists_its_commands_in_the_order_they_are_documented(
    runs_dir: Path, cli: CliRunner
) -> None:
    out = cli("runs", "--help").out
    commands = out.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in commands if line.strip()] == ["list", "show", "prune"]


def test_cancel_help_names_run_id_and_the_default_wait(runs_dir: Path, cli: CliRunner) -> None:
    result = cli("cancel", "-h")
    assert result.code == 0
    assert "Usage: zuke cancel [OPTIONS] RUN_ID" in result.out
    text = " ".join(result.out.split())
    assert "RUN_ID is the run to cancel." in text
    assert "--wait DURATION how long to wait for a live owner to stop the run [default: 1m]" in text


def test_an_option_missing_its_value_points_at_its_own_commands_help(
    runs_dir: Path, cli: CliRunner
) -> None:
    result = cli("runs", "list", "--limit")
    assert result.code == 2
    assert result.err == (
        "zuke: Option '--limit' requires an argument. Run `zuke runs list --help` for the usage.\n"
    )
