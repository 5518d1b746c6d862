"""Issue 19 §3, items 1-2: where the default store lives, and a broken build.py blocks nothing
that needs no build (``runs``, ``locks``, ``cancel``, ``state init``, ``--help``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import CliRunner
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import GraphNode, RunRecord, TargetRecord

AT = "2026-01-01T00:00:00.000Z"

HELLO = """\
from zuke import Build, target

class App(Build):
    @target
    def hello(self, t):
        return t.executes(lambda: print("hi"))
"""

BROKEN = """\
from zuke import Build, target

class App(Build):
    @target
    def hello(self, t)
        return t.executes(lambda: None)
"""


def record(run_id: str, status: str, rows: dict[str, str]) -> RunRecord:
    return RunRecord(
        id=run_id, build="App", root_target="hello", status=status,  # type: ignore[arg-type]
        actor="ci", created_at=AT, updated_at=AT, graph=(GraphNode("hello"),),
        targets={n: TargetRecord(status=s) for n, s in rows.items()},  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "build.py").write_text(HELLO)
    return tmp_path / "app"


def test_the_default_store_is_beside_the_build_file_not_in_the_working_directory(
    app: Path, tmp_path: Path, cli: CliRunner
) -> None:
    ran = cli("--file", "app/build.py", "hello", "--state")
    assert ran.code == 0, ran.err
    assert (app / ".zuke" / "runs").is_dir() and not (tmp_path / ".zuke").exists()
    listed = cli("--file", "app/build.py", "runs", "list")
    assert listed.code == 0 and "hello" in listed.out
    # ZUKE_FILE names the same build, so the same store
    assert cli("runs", "list", env={"ZUKE_FILE": "app/build.py"}).out == listed.out


def test_python_build_py_from_another_directory_uses_the_store_beside_the_script(
    app: Path, tmp_path: Path
) -> None:
    (app / "build.py").write_text(HELLO + "\nif __name__ == '__main__':\n    import zuke\n"
                                  "    zuke.run(App)\n")  # fmt: skip
    repo = str(Path(__file__).resolve().parents[2])  # this checkout's zuke
    done = subprocess.run(
        [sys.executable, "app/build.py", "hello", "--state"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": repo},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (app / ".zuke" / "runs").is_dir() and not (tmp_path / ".zuke").exists()


def test_a_relative_zuke_state_dir_is_also_beside_the_build_file(
    app: Path, tmp_path: Path, cli: CliRunner
) -> None:
    env = {"ZUKE_STATE_DIR": "state"}
    assert cli("--file", "app/build.py", "hello", "--state", env=env).code == 0
    assert (app / "state").is_dir() and not (tmp_path / "state").exists()


def test_no_runs_found_names_the_store_it_looked_in(app: Path, cli: CliRunner) -> None:
    where = app / ".zuke" / "runs"
    assert cli("--file", "app/build.py", "runs", "list").out == f"No runs found in {where}.\n"
    assert cli("-f", "app/build.py", "runs", "list", "--counts").out.startswith(
        f"No runs found in {where}"
    )
    assert cli("--file", "app/build.py", "locks", "list").out == f"No locks held in {where}.\n"
    assert cli("-f", "app/build.py", "resume", "--check").out.startswith(
        f"Checked 0 suspended run(s) in {where}: "
    )
    assert cli("-f", "app/build.py", "runs", "prune", "--keep-last", "1").out == (
        f"Pruned 0 run(s) in {where}.\n"
    )


@pytest.mark.parametrize(
    "argv",
    [("runs", "show", "r9"), ("resume", "r9"), ("resume", "--check", "r9"), ("cancel", "r9")],
)
def test_a_run_not_in_the_store_names_the_store(
    app: Path, cli: CliRunner, argv: tuple[str, ...]
) -> None:
    result = cli("--file", "app/build.py", *argv)
    assert result.code == 1
    assert f'no run "r9" in the store {app / ".zuke" / "runs"}' in result.err
    assert result.err.count("\n") == 1


@pytest.fixture
def broken(tmp_path: Path) -> FileSystemStateStore:
    (tmp_path / "build.py").write_text(BROKEN)
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    store.create_run(record("r1", "succeeded", {"hello": "succeeded"}))
    return store


@pytest.mark.parametrize(
    "argv",
    [("runs", "list"), ("runs", "show", "r1"), ("runs", "show", "r1", "--json"),
     ("locks", "list"), ("state", "init")],
)  # fmt: skip
def test_a_broken_build_does_not_block_commands_that_need_no_build(
    broken: FileSystemStateStore, cli: CliRunner, argv: tuple[str, ...]
) -> None:
    result = cli(*argv)
    assert result.code == 0
    assert result.err.startswith("zuke: loading build.py failed (line 5): SyntaxError")
    assert result.err.count("\n") == 1 and str(broken.directory) in result.err
    if argv[0] == "runs":
        assert "r1" in result.out


def test_locks_break_works_with_a_broken_build(
    broken: FileSystemStateStore, cli: CliRunner
) -> None:
    result = cli("locks", "break", "deploy-api", "--reason", "stuck")
    assert "SyntaxError" in result.err and "Traceback" not in result.err
    assert "deploy-api" in result.text and result.code in (0, 1)


def test_help_with_a_broken_build_only_prints_help(
    broken: FileSystemStateStore, cli: CliRunner
) -> None:
    for argv in (("--help",), ("runs", "list", "--help"), ("cancel", "--help"),
                 ("resume", "--help"), ("hello", "--help")):  # fmt: skip
        result = cli(*argv)
        assert result.code == 0 and result.out.startswith("Usage: zuke"), argv
        assert result.err == ""


def test_resume_of_a_run_with_a_broken_build_says_it_needs_the_build(
    broken: FileSystemStateStore, cli: CliRunner
) -> None:
    result = cli("resume", "r1")
    assert result.code == 2
    assert result.err == (
        "zuke: loading build.py failed (line 5): SyntaxError: expected ':'; "
        "'zuke resume RUN' needs it to continue the run\n"
    )


def test_a_sweep_with_a_broken_build_reports_every_run_not_checked_and_fails(
    broken: FileSystemStateStore, cli: CliRunner
) -> None:
    broken.create_run(record("r2", "suspended", {"hello": "waiting"}))
    broken.create_run(record("r3", "running", {"hello": "running"}))
    before = {r: broken.get_run(r) for r in ("r2", "r3")}
    result = cli("resume", "--check", "--json")
    assert result.code == 1
    report = json.loads(result.out)
    assert sorted((r["id"], r["action"], r["result"]) for r in report["runs"]) == [
        ("r2", "not-checked", "suspended"),
        ("r3", "not-checked", "running"),
    ]
    assert report["ok"] is False and report["counts"]["not_checked"] == 2
    assert all("needs it to check the run's gates" in r["detail"] for r in report["runs"])
    assert {r: broken.get_run(r) for r in ("r2", "r3")} == before  # nothing moved
    text = cli("resume", "--check")
    assert text.code == 1 and "r2 App: not-checked → suspended" in text.out
    assert "Checked 0 suspended run(s)" in text.out and "0 failed" in text.out
    assert "2 not checked" in text.out
    assert text.err.startswith("zuke: loading build.py failed") and text.err.count("\n") == 1


def test_cancel_with_a_broken_build_refuses_a_run_that_owes_compensations(
    broken: FileSystemStateStore, cli: CliRunner
) -> None:
    broken.create_run(record("r2", "running", {"hello": "succeeded"}))
    before = broken.get_run("r2")
    refused = cli("cancel", "r2")
    assert refused.code == 1
    assert refused.err.splitlines()[-1] == (
        "zuke: loading build.py failed (line 5): SyntaxError: expected ':'; "
        "'zuke cancel r2' needs it to run its compensations (its targets hello succeeded); "
        "fix the build, or cancel without them: zuke cancel r2 --no-compensations"
    )
    assert broken.get_run("r2") == before
    done = cli("cancel", "r2", "--no-compensations", "--actor", "ops")
    assert done.code == 0, done.err
    settled = broken.get_run("r2")
    assert settled is not None and settled.record.status == "cancelled"
    [event] = [e for e in settled.record.events if e.args.get("compensations") == "skipped"]
    assert event.tool == "cancel" and event.actor == "ops"
    assert "compensations skipped by ops (--no-compensations)" in (event.detail or "")


def test_cancel_of_a_run_that_owes_nothing_needs_no_build(
    broken: FileSystemStateStore, cli: CliRunner
) -> None:
    broken.create_run(record("r2", "running", {"hello": "running"}))
    done = cli("cancel", "r2")
    assert done.code == 0, done.err
    settled = broken.get_run("r2")
    assert settled is not None and settled.record.status == "cancelled"


def test_a_build_that_raises_while_imported_is_the_same_note(
    tmp_path: Path, cli: CliRunner
) -> None:
    (tmp_path / "build.py").write_text(textwrap.dedent("raise ImportError('no module x')\n"))
    result = cli("runs", "list")
    assert result.code == 0 and result.out.startswith("No runs found in")
    assert result.err.startswith("zuke: loading build.py failed (line 1): ImportError: no module x")


def test_zuke_mcp_reads_and_runs_with_the_store_beside_the_build_file(app: Path) -> None:
    from zuke._loader import build_home, load_build_class
    from zuke.cli.mcp_cmd import describe
    from zuke.mcp.tools import BuildTools

    home = build_home("app/build.py", {}, cwd=app.parent)
    assert home == app.resolve()
    tools = BuildTools(build=load_build_class(app / "build.py"), env={}, actor="bot",
                       describe=describe, home=home)  # fmt: skip
    store = tools._store()
    assert isinstance(store, FileSystemStateStore)
    assert Path(store.directory) == app.resolve() / ".zuke" / "runs"
    assert tools._run_options().cwd == home


RAISING = """\
from zuke import Build, target

class App(Build):
    @target
    def hello(self, t):
        raise RuntimeError("bad merge")
"""


def test_a_build_whose_definitions_raise_blocks_only_what_needs_it(
    tmp_path: Path, cli: CliRunner
) -> None:
    (tmp_path / "build.py").write_text(RAISING)
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    store.create_run(record("r2", "running", {"hello": "succeeded"}))
    store.create_run(record("r3", "suspended", {"hello": "waiting"}))
    assert cli("runs", "list").code == 0
    refused = cli("cancel", "r2")  # its compensations cannot be known: refused, not skipped
    assert refused.code == 1 and refused.err == (
        "zuke: defining the targets of App failed: bad merge; 'zuke cancel r2' needs the build "
        "to run its compensations (its targets hello succeeded); fix the build, or cancel "
        "without them: zuke cancel r2 --no-compensations\n"
    )
    resumed = cli("resume", "r3")
    assert resumed.code == 2 and resumed.err == (
        "zuke: defining the targets of App failed: bad merge; 'zuke resume RUN' needs it to "
        "continue the run\n"
    )
    swept = cli("resume", "--check", "--json")
    assert swept.code == 1
    assert {r["id"]: r["action"] for r in json.loads(swept.out)["runs"]} == {
        "r2": "not-checked", "r3": "not-checked",
    }  # fmt: skip
    found = store.get_run("r2")
    assert found is not None and found.record.status == "running"
    assert cli("cancel", "r2", "--no-compensations").code == 0


@pytest.mark.parametrize("argv", [("resume", "--check"), ("resume", "r1")])
def test_a_bad_setting_is_said_as_itself_not_as_a_broken_build(
    tmp_path: Path, cli: CliRunner, argv: tuple[str, ...]
) -> None:
    (tmp_path / "build.py").write_text(HELLO)
    FileSystemStateStore(tmp_path / ".zuke" / "runs").create_run(
        record("r1", "suspended", {"hello": "waiting"})
    )
    result = cli(*argv, env={"ZUKE_RUN_LEASE_TTL": "banana"})
    assert result.code == 2 and result.out == ""
    [line] = result.err.splitlines()
    assert line.startswith("zuke: ZUKE_RUN_LEASE_TTL") and "banana" in line
    assert "needs it" not in line and "not-checked" not in line
