from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BuildWriter, CliRunner

BUILD = """
    import asyncio
    from zuke import Build, parameter, target, run

    class Release(Build):
        repo = parameter("service to deploy").required()
        env = parameter("environment").options("sit", "prod").default("sit")
        token = parameter("deploy token").secret()
        dry = parameter("dry run").boolean()

        @target
        def compile(self, t):
            return t.description("Compile the service").executes(self._compile)

        def _compile(self):
            print("compiled", self.repo.value)

        @target
        def test(self, t):
            return t.description("Run the tests").depends_on(self.compile).executes(self._test)

        async def _test(self, ctx):
            await asyncio.sleep(0)
            print("tested", self.env.value, "dry" if self.dry.value else "wet")

        @target
        def broken(self, t):
            return t.executes(self._broken)

        def _broken(self):
            raise RuntimeError(f"cannot reach {self.repo.value} with {self.token.value}")

        @target
        def after_broken(self, t):
            return t.depends_on(self.broken).executes(lambda: print("never"))

    if __name__ == "__main__":
        run(Release)
"""


@pytest.fixture
def release(write_build: BuildWriter) -> Path:
    return write_build(BUILD)


def test_running_a_target_runs_its_dependencies_and_prints_a_summary(
    release: Path, cli: CliRunner
) -> None:
    result = cli("test", "--repo", "api", "--env=prod", "--dry")
    assert result.code == 0, result.text
    assert "══ compile ══" in result.out and "compiled api" in result.out
    assert "tested prod dry" in result.out
    assert "Build Summary" in result.out
    assert "✔ Build succeeded — 2/2 targets" in result.out


def test_output_has_no_colour_codes_when_not_a_terminal(release: Path, cli: CliRunner) -> None:
    result = cli("test", "--repo", "api")
    assert "\x1b[" not in result.text


def test_a_failure_prints_the_footer_exits_1_and_redacts_secrets(
    release: Path, cli: CliRunner
) -> None:
    result = cli("after_broken", "--repo", "api", "--token", "tok-123456")
    assert result.code == 1
    assert "Failures:" in result.err
    assert "broken: RuntimeError: cannot reach api with [redacted]" in result.err
    assert "tok-123456" not in result.text
    assert "after_broken  Skipped" in result.out


def test_a_secret_from_the_environment_is_redacted_too(release: Path, cli: CliRunner) -> None:
    result = cli("broken", "--repo", "api", env={"TOKEN": "env-secret-99"})
    assert result.code == 1 and "env-secret-99" not in result.text and "[redacted]" in result.err


def test_list_shows_targets_descriptions_dependencies_and_parameters(
    release: Path, cli: CliRunner
) -> None:
    result = cli("--list")
    assert result.code == 0
    assert "compile       Compile the service" in result.out
    assert "test          Run the tests  (depends on: compile)" in result.out
    assert "--repo (REPO)" in result.out and "required" in result.out
    assert "one of sit, prod, default 'sit'" in result.out


def test_list_json_is_machine_readable(release: Path, cli: CliRunner) -> None:
    result = cli("--list", "--json")
    payload = json.loads(result.out)
    assert payload["targets"][1] == {
        "name": "test",
        "description": "Run the tests",
        "dependsOn": ["compile"],
    }
    params = {p["name"]: p for p in payload["parameters"]}
    assert params["repo"]["required"] is True and params["repo"]["flag"] == "--repo"
    assert params["env"]["options"] == ["sit", "prod"] and params["env"]["default"] == "sit"
    assert params["token"]["secret"] is True and "default" not in params["token"]
    assert params["dry"]["kind"] == "boolean"


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("text", "  test → compile"),
        ("mermaid", "  t_compile --> t_test"),
        ("dot", '  "compile" -> "test";'),
        ("json", '"dependsOn": [\n        "compile"\n      ]'),
    ],
)
def test_graph_renders_every_format(release: Path, cli: CliRunner, fmt: str, expected: str) -> None:
    result = cli("graph", "--format", fmt)
    assert result.code == 0 and expected in result.out


def test_graph_with_an_unknown_format_is_a_usage_error(release: Path, cli: CliRunner) -> None:
    result = cli("graph", "--format", "svg")
    assert result.code == 2 and "expected one of text, mermaid, dot, json" in result.err


def test_help_shows_the_live_targets_and_parameters(release: Path, cli: CliRunner) -> None:
    result = cli("--help")
    assert result.code == 0
    assert "Usage:" in result.out and "Run the tests" in result.out and "--repo" in result.out


def test_help_without_a_build_file_still_shows_usage(tmp_path: Path, cli: CliRunner) -> None:
    result = cli("--help")
    assert result.code == 0 and "Usage:" in result.out and "No build file" in result.out


def test_a_missing_build_file_is_one_clear_message_and_exit_2(cli: CliRunner) -> None:
    result = cli("test")
    assert result.code == 2
    assert result.err.startswith("zuke: No build file: build.py (default) does not exist")
    assert "--file PATH" in result.err and "ZUKE_FILE" in result.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tset", "--repo", "x"], 'Unknown target: tset. Did you mean "test"?'),
        (["test"], "--repo is required (or set REPO)"),
        (["test", "--repo", "x", "--env", "qa"], "--env: expected one of sit, prod, got 'qa'"),
        (["test", "--repo", "x", "--rpeo", "y"], 'Unknown flag "--rpeo". Did you mean "--repo"?'),
        (["test", "--repo"], "--repo needs a value"),
        (["test", "--repo", "x", "--parallel=zero"], "--parallel=zero: expected a whole number"),
        (["test", "--repo", "x", "--list=yes"], "--list takes no value; drop '=yes'"),
    ],
)
def test_bad_command_lines_exit_2_with_one_message(
    release: Path, cli: CliRunner, argv: list[str], message: str
) -> None:
    result = cli(*argv)
    assert result.code == 2, result.text
    assert message in result.err
    assert "Traceback" not in result.text


def test_a_build_file_from_file_flag_and_zuke_file_env(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(BUILD, name="release.py")
    assert cli("--file", "release.py", "compile", "--repo", "a").code == 0
    assert cli("-f", "release.py", "--list").code == 0
    assert cli("compile", "--repo", "a", env={"ZUKE_FILE": "release.py"}).code == 0


def test_a_build_file_that_raises_on_import_names_the_line(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build("from zuke import Build\nraise ValueError('oops')\n")
    result = cli("--list")
    assert result.code == 2
    assert "loading build.py failed (line 2): ValueError: oops" in result.err


def test_a_build_with_no_target_given_lists_targets_or_runs_default(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(
        """
        from zuke import Build, target

        class WithDefault(Build):
            @target
            def default(self, t):
                return t.executes(lambda: print("default ran"))
        """
    )
    result = cli()
    assert result.code == 0 and "default ran" in result.out


def test_python_build_py_is_the_same_cli(release: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, str(release), "test", "--repo", "svc"],
        capture_output=True,
        text=True,
        env=env,
        cwd=release.parent,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "compiled svc" in proc.stdout and "Build succeeded" in proc.stdout
    bad = subprocess.run(
        [sys.executable, str(release), "test"],
        capture_output=True,
        text=True,
        env=env,
        cwd=release.parent,
        timeout=60,
    )
    assert bad.returncode == 2 and "--repo is required" in bad.stderr


def test_the_zuke_command_is_installed_and_runs(release: Path) -> None:
    zuke = Path(sys.executable).parent / "zuke"
    proc = subprocess.run(
        [str(zuke), "compile", "--repo", "svc"],
        capture_output=True,
        text=True,
        cwd=release.parent,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "compiled svc" in proc.stdout


def test_zuke_list_imports_no_heavy_modules(release: Path) -> None:
    probe = (
        "import sys, io; from zuke.cli import main; "
        "code = main(['--list'], out=io.StringIO()); "
        "heavy = {'httpx', 'typer', 'cryptography', 'filelock', 'rich', 'click', 'sqlite3'}; "
        "print(code, sorted(heavy & set(sys.modules)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=release.parent,
        timeout=60,
    )
    assert proc.stdout.strip() == "0 []", proc.stderr


def test_an_unreachable_state_store_is_one_clear_message_and_exit_1(
    release: Path, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zuke._engine import claims
    from zuke.state import _http_client

    monkeypatch.setattr(claims, "LEASE_ACQUIRE_BACKOFF_S", (0.0,))
    # the message, not the client's real resend pauses (0.2 + 0.5 s per attempt)
    monkeypatch.setattr(_http_client, "RESEND_PAUSES_S", (0.0, 0.0))
    env = {"ZUKE_STATE_URL": "http://127.0.0.1:9/", "ZUKE_STATE_TOKEN": "tok-secret-1"}
    result = cli("compile", "--repo", "api", env=env)
    assert result.code == 1
    assert "Could not claim run" in result.err and "127.0.0.1:9" in result.err
    assert "tok-secret-1" not in result.text and "Traceback" not in result.text
    assert "compiled" not in result.out


def test_a_plaintext_remote_state_url_is_refused_before_anything_runs(
    release: Path, cli: CliRunner
) -> None:
    env = {"ZUKE_STATE_URL": "http://state.example.com/", "ZUKE_STATE_TOKEN": "tok-secret-2"}
    result = cli("compile", "--repo", "api", "--state", env=env)
    assert result.code == 2  # a bad setting: a usage error
    assert "ZUKE_STATE_URL" in result.err and "tok-secret-2" not in result.text
    assert "compiled" not in result.out
