"""Under GitHub Actions every command that moves a run leaves step outputs and a job summary.

The files are read back the way the runner reads them (``name=value`` or the
``name<<DELIMITER`` form; actions/runner's SetOutputFileCommand), so a value that could forge
another output would show here.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from tests.conftest import BuildWriter, CliRunner
from zuke.cli import gha

SECRET = "s3cr3t-token-value-42"
BUILD = """
    from zuke import Build, external_signal, parameter, target

    class Release(Build):
        token = parameter("the deploy token").secret().default("not-a-real-token")
        broken = parameter("fail the deploy").boolean().default(False)

        @target
        def deploy(self, t):
            return t.executes(self._deploy)

        def _deploy(self):
            if self.broken.value:
                raise RuntimeError("refused with " + self.token.value)

        @target
        def approve(self, t):
            return t.depends_on(self.deploy).waits_for(
                lambda s: s.on(external_signal("approved")).timeout("72h"))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(lambda: print("PROMOTED"))
"""


def read_outputs(path: Path) -> dict[str, str]:
    """``$GITHUB_OUTPUT`` as the runner parses it; a later value of a name wins."""
    found: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i)
            found[name] = "\n".join(lines[i:end])
            i = end + 1
        else:
            name, _, value = line.partition("=")
            found[name] = value
    return found


@pytest.fixture
def actions(tmp_path: Path) -> dict[str, str]:
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(tmp_path / "gh-output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "gh-summary"),
    }


def _outputs(env: dict[str, str]) -> dict[str, str]:
    return read_outputs(Path(env["GITHUB_OUTPUT"]))


def _summary(env: dict[str, str]) -> str:
    return Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")


def rendered(markdown: str) -> str:
    """The text a reader sees of escaped summary text (CommonMark's backslash escapes and
    HTML's entities undone)."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown))


def _suspend(cli: CliRunner, write_build: BuildWriter, env: dict[str, str]) -> str:
    write_build(BUILD)
    result = cli("promote", env=env)
    assert result.code == 0, result.text
    found = re.search(r"Run (\S+) is suspended", result.out)
    assert found, result.out
    return found.group(1)


def test_a_run_that_suspends_writes_its_id_status_and_gates_and_how_to_resume_it(
    cli: CliRunner, write_build: BuildWriter, actions: dict[str, str]
) -> None:
    run_id = _suspend(cli, write_build, actions)
    outputs = _outputs(actions)
    assert (outputs["run-id"], outputs["status"], outputs["gates"]) == (
        run_id,
        "suspended",
        "approve",
    )
    [waiting] = json.loads(outputs["waiting"])
    assert (waiting["gate"], waiting["trigger"]) == ("approve", "signal:approved")
    assert waiting["deadline"]  # the 72h timeout's
    summary = _summary(actions)
    assert f"### zuke: Release run `{run_id}` suspended" in summary
    assert f"zuke resume {run_id} --signal approved --data '{{}}'" in summary


def test_resume_with_a_signal_writes_the_continued_runs_verdict_and_no_gates(
    cli: CliRunner, write_build: BuildWriter, actions: dict[str, str]
) -> None:
    run_id = _suspend(cli, write_build, actions)
    done = cli("resume", run_id, "--signal", "approved", env=actions)
    assert done.code == 0, done.text
    assert "PROMOTED" in done.out
    outputs = _outputs(actions)
    assert (outputs["run-id"], outputs["status"], outputs["action"]) == (
        run_id,
        "succeeded",
        "resumed",
    )
    assert outputs["gates"] == "" and json.loads(outputs["waiting"]) == []
    assert f"Release run `{run_id}` resumed, succeeded" in _summary(actions)


def test_a_sweep_writes_its_counts_and_rows_and_for_one_run_its_id_status_and_gate(
    cli: CliRunner, write_build: BuildWriter, actions: dict[str, str]
) -> None:
    run_id = _suspend(cli, write_build, actions)
    swept = cli("resume", "--check", run_id, "--json", env=actions)
    assert swept.code == 0, swept.text
    json.loads(swept.out)  # stdout is still the report alone
    outputs = _outputs(actions)
    assert (outputs["checked"], outputs["resumed"], outputs["still-waiting"]) == ("1", "0", "1")
    assert outputs["failed"] == "0"
    assert (outputs["run-id"], outputs["status"], outputs["gates"]) == (
        run_id,
        "suspended",
        "approve",
    )
    [row] = json.loads(outputs["runs"])
    assert (row["id"], row["gate"], row["action"]) == (run_id, "approve", "still-waiting")
    summary = _summary(actions)
    assert "1 checked, 0 resumed, 1 still-waiting" in summary
    assert f"| `{run_id}` | Release | `approve` | still-waiting | suspended |" in summary


def test_cancel_writes_the_runs_id_and_status_afterwards(
    cli: CliRunner, write_build: BuildWriter, actions: dict[str, str]
) -> None:
    run_id = _suspend(cli, write_build, actions)
    cancelled = cli("cancel", run_id, env=actions)
    assert cancelled.code == 0, cancelled.text
    assert (_outputs(actions)["run-id"], _outputs(actions)["status"]) == (run_id, "cancelled")
    assert f"### zuke: cancel `{run_id}`" in _summary(actions)


def test_a_failed_run_says_which_target_failed_and_never_the_secret(
    cli: CliRunner, write_build: BuildWriter, actions: dict[str, str]
) -> None:
    write_build(BUILD)
    env = {**actions, "TOKEN": SECRET}
    failed = cli("promote", "--broken", env=env)
    assert failed.code == 1, failed.text
    outputs = _outputs(actions)
    assert outputs["status"] == "failed" and outputs["gates"] == ""
    summary = _summary(actions)
    assert "- `deploy` failed: RuntimeError: refused with [redacted]" in rendered(summary)
    written = Path(actions["GITHUB_OUTPUT"]).read_text() + summary
    assert SECRET not in written


@pytest.mark.parametrize(
    "env",
    [
        {"GITHUB_ACTIONS": "", "GITHUB_OUTPUT": "{out}"},
        {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": "{out}", "ZUKE_GITHUB_OUTPUTS": "off"},
    ],
    ids=["not under Actions", "turned off"],
)
def test_outside_actions_or_turned_off_nothing_is_written(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path, env: dict[str, str]
) -> None:
    out = tmp_path / "gh-output"
    settings = {k: v.format(out=out) for k, v in env.items()}
    _suspend(cli, write_build, settings)
    assert not out.exists()


def test_an_unwritable_output_file_is_one_warning_and_the_runs_exit_code_stands(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path
) -> None:
    blocked = tmp_path / "a-directory"
    blocked.mkdir()
    env = {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(blocked)}
    write_build(BUILD)
    result = cli("promote", env=env)
    assert result.code == 0
    assert "is suspended" in result.out
    warnings = [line for line in result.err.splitlines() if "GITHUB_OUTPUT" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("zuke: warning: could not write GITHUB_OUTPUT (")


def test_a_value_with_newlines_and_a_forged_name_stays_one_value(tmp_path: Path) -> None:
    forged = "ok\nstatus=hacked\nrun-id<<EOF\nx\nEOF"
    out = tmp_path / "gh-output"
    out.write_text(gha.output_text({"status": forged, "run-id": "r-1"}))
    assert read_outputs(out) == {"status": forged, "run-id": "r-1"}


RESUMED_FAILS = BUILD.replace(
    'lambda: print("PROMOTED")',
    'lambda: (_ for _ in ()).throw(RuntimeError("no " + self.token.value))',
)


def test_a_resumed_run_that_fails_names_the_target_and_never_the_secret(
    cli: CliRunner, write_build: BuildWriter, actions: dict[str, str]
) -> None:
    env = {**actions, "TOKEN": SECRET}
    write_build(RESUMED_FAILS)
    started = cli("promote", env=env)
    run_id = re.search(r"Run (\S+) is suspended", started.out).group(1)  # type: ignore[union-attr]
    done = cli("resume", run_id, "--signal", "approved", env=env)
    assert done.code == 1, done.text
    outputs = _outputs(actions)
    assert (outputs["status"], outputs["action"]) == ("failed", "resumed")
    summary = _summary(actions)
    assert "- `promote` failed: RuntimeError: no [redacted]" in rendered(summary)
    assert SECRET not in summary + Path(actions["GITHUB_OUTPUT"]).read_text()
