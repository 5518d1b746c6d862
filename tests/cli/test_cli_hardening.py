"""One-line usage errors, flag order, bad build files, escaping and secrets at the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from tests.cli.test_runs_cli import seed
from tests.conftest import BuildWriter, CliRunner
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunEvent

SECRETIVE = """
    from zuke import Build, parameter, target

    class Secretive(Build):
        token = parameter("deploy token").secret()
        keys = parameter("signing keys").array().secret()
        budget = parameter("time budget").secret()
        url = parameter("where").default("https://example.test/")

        @target
        def fail(self, t):
            def body():
                raise RuntimeError(f"Failed: {self.token.value} / {self.keys.value[-1]}")
            return t.executes(body)

        @target
        def slow(self, t):
            return t.timeout(self.budget.value or "1m").executes(lambda: None)
"""


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    seed(tmp_path / ".zuke" / "runs")
    return tmp_path


def one_zuke_line(text: str) -> str:
    assert text.startswith("zuke: ") and text.count("\n") == 1, text
    return text


# -- one-line usage errors --------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["runs", "list", "--limit", "abc"], "zuke: --limit abc: expected a positive whole number"),
        (["runs", "list", "--limit", "٣"], "zuke: --limit ٣: expected a positive whole number"),
        (["runs", "show"], "zuke: Missing argument 'RUN_ID'. Run `zuke runs show --help`"),
        (["cancel"], "zuke: Missing argument 'RUN_ID'. Run `zuke cancel --help`"),
        (["runs", "list", "--bogus"], "zuke: No such option"),
        (["runs", "prune", "--keep-last", "x"], "zuke: --keep-last x: expected a whole number"),
        (["runs", "list", "--since", "2026-13-01"], "zuke: --since 2026-13-01: expected an ISO"),
    ],
)
def test_every_usage_error_of_a_management_command_is_one_line(
    runs_dir: Path, cli: CliRunner, argv: list[str], message: str
) -> None:
    result = cli(*argv)
    assert result.code == 2
    assert one_zuke_line(result.err).startswith(message)
    assert "╭" not in result.text


def test_dash_h_shows_the_help_of_a_management_command(
    runs_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "zuke", "runs", "show", "-h"],
        cwd=runs_dir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: zuke runs show" in done.stdout and done.stderr == ""


def test_several_parameter_problems_are_reported_on_one_line(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(
        """
        from zuke import Build, parameter, target

        class B(Build):
            repo = parameter("r").required()
            n = parameter("n").integer()

            @target
            def t(self, t):
                return t.executes(lambda: None)
        """
    )
    result = cli("t", "--n", "1_000")
    assert result.code == 2
    assert one_zuke_line(result.err) == (
        "zuke: Invalid or missing parameters: --repo is required (or set REPO); "
        "--n: expected an integer, got '1_000'\n"
    )


# -- flag order and bad build files -------------------------------------------------


def test_file_before_a_management_command_works_like_after_it(
    runs_dir: Path, write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(
        """
        from zuke import Build, target

        class Other(Build):
            @target
            def t(self, t):
                return t
        """,
        name="other.py",
    )
    before = cli("--file", "other.py", "runs", "list")
    after = cli("runs", "list", "--file", "other.py")
    assert before.code == after.code == 0
    assert before.out == after.out and "r3" in before.out
    assert cli("--file=other.py", "runs", "show", "r1").code == 0


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/dev/null", "is not a regular file (a device, pipe or socket)"),
        (".", "is a directory; pass the build file in it, e.g. --file build.py"),
        ("notes.txt", "is not a Python file"),
        ("missing.py", "No build file: missing.py (--file) does not exist"),
    ],
)
def test_a_file_that_is_not_a_build_file_says_what_it_is(
    tmp_path: Path, cli: CliRunner, path: str, message: str
) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    for argv in (["--file", path, "--list"], ["--file", path, "runs", "list"]):
        result = cli(*argv)
        assert result.code == 2
        assert message in one_zuke_line(result.err)


def test_a_build_file_that_calls_sys_exit_at_import_says_so(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build("import sys\nsys.exit(5)\n")
    for argv in (["--list"], ["runs", "list"]):  # `runs list` needs no build: a warning
        result = cli(*argv)
        assert result.code == (0 if argv[0] == "runs" else 2)
        assert "loading build.py failed (line 2): it called sys.exit(5)" in one_zuke_line(
            result.err
        )


# -- runs show / runs list -------------------------------------------------------------


def test_runs_show_escapes_control_characters_in_what_it_prints(
    runs_dir: Path, cli: CliRunner
) -> None:
    store = FileSystemStateStore(runs_dir / ".zuke" / "runs")
    stored = store.get_run("r1")
    assert stored is not None
    nasty = "\x1b[2J\x1b]0;owned\x07\u202eevil\x9b"
    record = replace(
        stored.record,
        actor=f"mallory{nasty}",
        params={"repo": f"api{nasty}"},
        events=(RunEvent(at="2026-01-01T00:00:00.000Z", tool="cli", actor="m", detail=nasty),),
    )
    assert store.put_run(record, expected_version=stored.version)
    text = cli("runs", "show", "r1").out
    for char in ("\x1b", "\x07", "\u202e", "\x9b"):
        assert char not in text
    assert "mallory\\x1b[2J\\x1b]0;owned\\x07\\u202eevil\\x9b" in text
    assert "repo = api\\x1b[2J" in text
    listed = cli("runs", "list").out
    assert "\x1b" not in listed and "mallory\\x1b" in listed
    shown = cli("runs", "show", "r1", "--json").out
    assert "\u202e" not in shown and "\x9b" not in shown
    assert json.loads(shown)["actor"] == f"mallory{nasty}"  # the same value, escaped


def test_runs_list_since_compares_instants_with_fractions_and_offsets(
    runs_dir: Path, cli: CliRunner
) -> None:
    store = FileSystemStateStore(runs_dir / ".zuke" / "runs")
    stored = store.get_run("r1")
    assert stored is not None
    store.create_run(replace(stored.record, id="half", created_at="2026-01-15T00:00:00.500Z"))
    assert "half" in cli("runs", "list", "--since", "2026-01-15T00:00:00Z").out
    assert "half" in cli("runs", "list", "--since", "2026-01-15T05:30:00+05:30").out
    assert "half" not in cli("runs", "list", "--since", "2026-01-15T00:00:01Z").out


def test_runs_list_filters_by_build(runs_dir: Path, cli: CliRunner) -> None:
    store = FileSystemStateStore(runs_dir / ".zuke" / "runs")
    stored = store.get_run("r1")
    assert stored is not None
    store.create_run(replace(stored.record, id="other-build", build="Other"))
    rows = json.loads(cli("runs", "list", "--build", "Other", "--json").out)
    assert [r["id"] for r in rows] == ["other-build"]


# -- secrets at the console -------------------------------------------------------------


def test_a_failure_footer_redacts_each_array_element_and_the_token(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(SECRETIVE)
    result = cli("fail", "--token", "tok-12345678", "--keys", "key-aaaaaaaa,key-bbbbbbbb")
    assert result.code == 1
    assert "Failed: [redacted] / [redacted]" in result.err
    for value in ("tok-12345678", "key-aaaaaaaa", "key-bbbbbbbb"):
        assert value not in result.text


def test_a_pre_run_error_quoting_a_secret_from_the_environment_is_redacted(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(SECRETIVE)
    result = cli("slow", env={"BUDGET": "tok-12345678"})
    assert result.code == 2
    assert "tok-12345678" not in result.text and "[redacted]" in one_zuke_line(result.err)


def test_a_one_letter_secret_is_refused_rather_than_garbling_output(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(SECRETIVE)
    result = cli("fail", "--token", "e")
    assert result.code == 2
    assert one_zuke_line(result.err).startswith(
        "zuke: Invalid or missing parameter: --token: a secret must be at least 8 characters"
    )
    assert "[redacted]" not in result.err


def test_list_redacts_a_default_that_contains_a_supplied_secret(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(SECRETIVE)
    result = cli("--list", env={"TOKEN": "example.test"})
    assert result.code == 0
    assert "example.test" not in result.out and "https://[redacted]/" in result.out


def test_python_build_py_with_a_secret_timeout_exits_2_without_it(
    write_build: BuildWriter,
) -> None:
    path = write_build(textwrap.dedent(SECRETIVE) + "\nfrom zuke import run\nrun(Secretive)\n")
    done = subprocess.run(
        [sys.executable, str(path), "slow"],
        env={**os.environ, "BUDGET": "tok-12345678"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "tok-12345678" not in done.stdout + done.stderr
