"""Issue 24 §4: a reason anyone can write reaches zuke's output inert, in real processes.

A gate fails with a multi-line reason full of workflow commands (``::add-mask::``,
``::set-output``, ``::stop-commands::``, ``::error``), a CR, a line separator, the older
``##[`` form, HTML and links — as a ``/deny`` reason can be. Every command that shows it runs
under ``GITHUB_ACTIONS=true`` as its own process: the text sweep, ``--json``, ``runs show``,
``runs list``. No line of stdout or stderr, split as the runner splits them, is a workflow
command; the job summary renders none of the reason's markup; ``$GITHUB_OUTPUT`` holds the
outputs zuke wrote and no other.
"""

from __future__ import annotations

import html
import json
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_gha_outputs import read_outputs
from tests.cli.test_inert_rules import HOSTILE, render, runner_lines, runner_reads_a_command
from tests.e2e.resume_support import SUSPENDED_LINE
from tests.e2e.support import ZUKE, clean_env, write_build

pytestmark = pytest.mark.e2e

BUILD = f"""
    from pathlib import Path
    from zuke import Build, NotYet, WaitFailed, WaitTrigger, target

    REASON = {HOSTILE!r}

    class Review(WaitTrigger):
        @property
        def descriptor(self):
            return "review"

        def check(self, ctx):
            if Path("DENIED").exists():
                return WaitFailed("denied by @mallory: " + REASON)
            return NotYet("waiting; the last word: " + REASON)

    class Release(Build):
        @target
        def qa(self, t):
            return t.waits_for(lambda s: s.on(Review()).timeout("1h"))

        @target
        def promote(self, t):
            return t.depends_on(self.qa).executes(lambda: print("PROMOTED"))
"""


#: every output name a zuke command writes (docs/cli.md, Under GitHub Actions)
WRITTEN = {"run-id", "status", "gates", "waiting", "action", "checked", "resumed",
           "still-waiting", "timed-out", "gate-failed", "failed", "reaped", "skipped", "errors",
           "deferred", "not-checked", "runs"}  # fmt: skip


def zuke(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``zuke ARGS`` under GitHub Actions, stdout and stderr apart."""
    env = clean_env({"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(workdir / "output"),
                     "GITHUB_STEP_SUMMARY": str(workdir / "summary")})  # fmt: skip
    return subprocess.run([ZUKE, *args], cwd=workdir, env=env, capture_output=True, text=True,
                          check=False, timeout=60)  # fmt: skip


def commands_in(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [
        line
        for stream in (done.stdout, done.stderr)
        for line in runner_lines(stream)
        if runner_reads_a_command(line)
    ]


def test_a_hostile_reason_is_no_workflow_command_and_renders_nothing_wherever_it_is_shown(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, BUILD)
    started = zuke(tmp_path, "promote")
    assert started.returncode == 0, started.stdout + started.stderr
    found = SUSPENDED_LINE.search(started.stdout)
    assert found, started.stdout
    run_id = found.group(1)
    waiting = zuke(tmp_path, "resume", "--check")  # still waiting: the reason in its detail
    (tmp_path / "DENIED").write_text("")
    swept = zuke(tmp_path, "resume", "--check")  # the text sweep: the gate fails
    assert swept.returncode == 1, swept.stdout + swept.stderr
    assert f"{run_id} Release [qa]: gate-failed" in swept.stdout
    assert "\\n::add-mask::s3cr3t" in swept.stdout  # there, escaped: on the sweep's line
    outputs = read_outputs(tmp_path / "output")  # as the runner parses it: no forged name
    assert outputs["failed"] == "1" and json.loads(outputs["runs"])[0]["result"] == "failed"
    shown = [
        waiting,
        swept,
        zuke(tmp_path, "resume", "--check", "--json"),
        zuke(tmp_path, "runs", "show", run_id),
        zuke(tmp_path, "runs", "show", run_id, "--json"),
        zuke(tmp_path, "runs", "list"),
    ]
    assert "denied by @mallory" in shown[3].stdout  # runs show has the reason too
    for done in shown:
        assert commands_in(done) == [], (done.args, done.stdout, done.stderr)
    assert set(read_outputs(tmp_path / "output")) <= WRITTEN
    page = render((tmp_path / "summary").read_text(encoding="utf-8"))
    for made in ("<img", "<script", "<a ", "<em>", "<strong>"):
        assert made not in page, page
    assert "denied by @mallory" in html.unescape(page) or "failed" in page
