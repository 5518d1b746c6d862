"""Issue 28 §6: the operator's traps, each with the case that sprang it.

``--keep`` without a unit; each command's own help; whole summaries and the environment
list in ``--help``; stores named for people, never a repr; a missing store directory; a bad
setting as a usage error (exit 2).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.test_operator_store import HELLO, record
from tests.conftest import CliRunner
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.naming import store_name

# ---------------------------------------------------------------- runs prune --keep 1


@pytest.mark.parametrize("keep", ["1", "30", "1.5", " 7"])
def test_prune_keep_without_a_unit_is_refused_with_a_hint_and_prunes_nothing(
    tmp_path: Path, cli: CliRunner, keep: str
) -> None:
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    store.create_run(record("r1", "succeeded", {"hello": "succeeded"}))
    result = cli("runs", "prune", "--keep", keep)
    assert result.code == 2, result.text
    (line,) = result.err.splitlines()
    assert line.startswith(f"zuke: --keep {keep}: a duration needs its unit, e.g. --keep ")
    assert "d (days) or --keep 90d; to keep the newest runs instead, --keep-last" in line
    assert store.get_run("r1") is not None  # a bare number was 1 ms: every finished run went
    assert cli("runs", "prune", "--keep", "3650d").code == 0  # with its unit, as ever
    assert store.get_run("r1") is not None


# ---------------------------------------------------------------- help


def test_graph_and_list_have_their_own_help(tmp_path: Path, cli: CliRunner) -> None:
    (tmp_path / "build.py").write_text(HELLO)
    for argv, usage in (
        (["graph", "--help"], "Usage: zuke graph [--format text|mermaid|dot|json]"),
        (["graph", "--format", "dot", "-h"], "Usage: zuke graph [--format text|mermaid|dot|json]"),
        (["--list", "--help"], "Usage: zuke --list [--json]"),
        (["-l", "--json", "-h"], "Usage: zuke --list [--json]"),
        (["-f", "build.py", "graph", "--help"], "Usage: zuke graph"),
    ):
        result = cli(*argv)
        assert result.code == 0 and result.err == "", result.text
        assert result.out.startswith(usage), (argv, result.out)
        assert "Environment:" not in result.out  # not the global help
        assert result.out.rstrip().endswith("-h, --help       show this help")


@pytest.mark.parametrize("group", ["locks", "state", "runs"])
def test_a_groups_help_gives_each_command_its_whole_summary(cli: CliRunner, group: str) -> None:
    result = cli(group, "--help")
    assert result.code == 0
    commands = result.out.split("Commands:\n", 1)[1]
    assert "..." not in commands, commands  # click cut them mid-sentence
    text = " ".join(commands.split())
    wanted = {
        "locks": "break Remove a claim without its token; refused while its holder's run is alive.",
        "state": "init Create the state store now (the GitHub branch store: its branch and "
        "marker).",
        "runs": "prune Delete finished runs; a running or suspended run is never pruned.",
    }
    assert wanted[group] in text


def test_the_help_lists_the_github_and_postgres_variables_beside_zukes(cli: CliRunner) -> None:
    result = cli("--help")
    environment = result.out.split("Environment:\n", 1)[1].split("\n\n", 1)[0]
    for variable in ("GH_TOKEN", "GITHUB_TOKEN", "GITHUB_API_URL", "PGPASSWORD",
                     "ZUKE_PG_POOL_SIZE", "postgresql://USER@HOST:PORT/DB", "ZUKE_FILE",
                     "ZUKE_STATE_URL", "ZUKE_STATE_DIR", "NO_COLOR"):  # fmt: skip
        assert variable in environment, variable


# ---------------------------------------------------------------- stores named for people


def test_each_store_is_named_for_people_never_as_a_repr(tmp_path: Path) -> None:
    from zuke.state.http import HttpStateStore
    from zuke.state.memory import MemoryStateStore
    from zuke.state.postgres import PostgresStateStore

    pg = PostgresStateStore("postgresql://ops:hunter2-pw@db.internal:5432/zuke?sslmode=require")
    assert store_name(pg) == "postgresql://ops@db.internal:5432/zuke"
    scoped = PostgresStateStore("postgresql://ops:hunter2-pw@db:5433/z", namespace="team-a")
    assert store_name(scoped) == "postgresql://ops@db:5433/z (namespace team-a)"
    http = HttpStateStore("https://ci:s3cr3t-pw@state.example/ns", token="tk-1234567")
    assert store_name(http) == "https://***@state.example/ns"
    assert store_name(FileSystemStateStore(tmp_path / "runs")) == str(tmp_path / "runs")
    assert store_name(MemoryStateStore()) == "memory (this process only)"

    class Custom:  # a third party's store, with a repr that shows too much
        def __repr__(self) -> str:
            return "Custom(password=hunter2)"

    assert store_name(Custom()) == "Custom"  # type: ignore[arg-type]
    for store in (pg, scoped, http):
        assert "hunter2" not in store_name(store) and "Store(" not in store_name(store)


def test_the_github_branch_store_is_named_github_owner_repo_at_branch() -> None:
    from zuke_gh.branch_store import from_url

    store = from_url("github://acme/app?branch=zuke-state", {"GH_TOKEN": "t0k3n-abcdefgh"})
    assert store_name(store) == "github://acme/app@zuke-state"


def test_state_init_names_the_store_not_its_repr(tmp_path: Path, cli: CliRunner) -> None:
    result = cli("state", "init", env={"ZUKE_STATE_DIR": "runs"})
    assert result.out == f"state: {tmp_path / 'runs'} needs no init: it is made on first use\n"
    assert "StateStore(" not in result.text


# ---------------------------------------------------------------- ZUKE_STATE_DIR missing


@pytest.mark.parametrize("argv", [["runs", "list"], ["runs", "show", "r1"], ["locks", "list"],
                                  ["runs", "prune", "--keep-last", "1"], ["resume", "r1"],
                                  ["cancel", "r1"]])  # fmt: skip
def test_a_store_directory_that_does_not_exist_is_said_so_with_exit_2(
    tmp_path: Path, cli: CliRunner, argv: list[str]
) -> None:
    (tmp_path / "build.py").write_text(HELLO)
    result = cli(*argv, env={"ZUKE_STATE_DIR": "/no/such/dir"})
    assert result.code == 2, result.text
    assert result.err == (
        "zuke: ZUKE_STATE_DIR=/no/such/dir: the store's directory does not exist; no run was "
        "recorded there. Check the path, or unset ZUKE_STATE_DIR for .zuke/runs\n"
    )
    assert "No runs found" not in result.out and not Path("/no/such/dir").exists()


def test_a_relative_store_directory_that_does_not_exist_names_where_it_was_looked_for(
    tmp_path: Path, cli: CliRunner
) -> None:
    result = cli("runs", "list", env={"ZUKE_STATE_DIR": "typo"})
    assert result.code == 2
    assert f"(a relative path is read beside the build file: {tmp_path / 'typo'})" in result.err
    assert not (tmp_path / "typo").exists()  # a read made no directory


def test_a_sweep_before_any_run_made_the_directory_checks_nothing_and_names_it(
    tmp_path: Path, cli: CliRunner
) -> None:
    """A scheduled sweep may come first: it is no typo to refuse, and its line names where."""
    (tmp_path / "build.py").write_text(HELLO)
    result = cli("resume", "--check", env={"ZUKE_STATE_DIR": "state"})
    assert result.code == 0, result.text
    assert f"Checked 0 suspended run(s) in {tmp_path / 'state'}: " in result.out


def test_an_existing_empty_store_directory_still_has_no_runs(
    tmp_path: Path, cli: CliRunner
) -> None:
    (tmp_path / "runs").mkdir()
    result = cli("runs", "list", env={"ZUKE_STATE_DIR": "runs"})
    assert (result.code, result.out) == (0, f"No runs found in {tmp_path / 'runs'}.\n")


# ---------------------------------------------------------------- bad settings: exit 2


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"ZUKE_STATE": "bogus"}, "ZUKE_STATE='bogus' is not a store URL"),
        ({"ZUKE_STATE": "s3://bucket"}, "no installed package provides it"),
        ({"ZUKE_STATE": "https://state.example"}, "names no store"),
        ({"ZUKE_STATE": "github://acme"}, "repository 'acme' is refused"),
        ({"ZUKE_STATE": "postgresql://u:pw-9f3x@h:port/db"}, "postgresql:// URL does not parse"),
        pytest.param(  # the pool's setting is read by the driver's store: the extra's
            {"ZUKE_STATE": "postgresql://u@h/db", "ZUKE_PG_POOL_SIZE": "lots"},
            "ZUKE_PG_POOL_SIZE",
            marks=pytest.mark.psycopg,
        ),
        ({"ZUKE_STATE_FSYNC": "sometimes"}, "ZUKE_STATE_FSYNC='sometimes'"),
        ({"ZUKE_STATE_URL": "http://state.example.com"}, "plaintext http://"),
        ({"ZUKE_RUN_LEASE_TTL": "banana"}, "ZUKE_RUN_LEASE_TTL"),
    ],
)
def test_a_bad_setting_is_a_usage_error_exit_2_in_one_line(
    tmp_path: Path, cli: CliRunner, env: dict[str, str], said: str
) -> None:
    (tmp_path / "build.py").write_text(HELLO)
    lease = "ZUKE_RUN_LEASE_TTL" in env  # read by what moves a run, not by a listing
    for argv in ([] if lease else [["runs", "list"]]) + [
        ["hello", "--state"],
        ["resume", "--check"],
    ]:
        result = cli(*argv, env=env)
        assert result.code == 2, (argv, result.text)
        (line,) = result.err.splitlines()
        assert line.startswith("zuke: ") and said in line, (argv, line)
        assert "pw-9f3x" not in result.text and "hi" not in result.out  # nothing ran
    assert not re.search(r"\w+StateStore\(", result.text)
