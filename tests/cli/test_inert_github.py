"""Issue 24's acceptance case: a multi-line ``/deny`` full of ``::`` lines, HTML and links,
on the fake GitHub, between real processes.

A maintainer's ``/deny`` carries a hostile reason. The text sweep that reads it runs under
``GITHUB_ACTIONS=true``: none of its lines, on stdout or stderr, is a workflow command. The
action's sweep step (``zuke resume --check --json`` teed into ``summary.py``) writes a job
summary in which nothing of the reason renders, and whose row links to the deciding comment
on GitHub — a URL built from the run's record — never to a URL in the reason.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.action.act_support import ROOT
from tests.cli.test_inert_output import commands_in
from tests.cli.test_inert_rules import render
from tests.e2e.approval_support import REPO, env_for, fake_github, release
from tests.e2e.support import ZUKE, clean_env

pytestmark = pytest.mark.e2e

#: its first line is what the gate quotes in its answer; every line is hostile
REASON = (
    "not this week <img src=x onerror=alert(1)> [approve here](https://evil.example/go) "
    "![x](https://evil.example/i.png) **now** | cell ##[error]old-style\r::error::after-cr"
    "\u2028::warning::after-ls\n::add-mask::hunter2\n  ::set-output name=approved::true\n"
    "::stop-commands::zz"
)


@pytest.fixture(scope="module")
def gh() -> Iterator[FakeGitHub]:
    with fake_github() as fake:
        yield fake


def under_actions(gh: FakeGitHub, workdir: Path) -> dict[str, str]:
    return clean_env({**env_for(gh), "GITHUB_ACTIONS": "true",
                      "GITHUB_OUTPUT": str(workdir / "output"),
                      "GITHUB_STEP_SUMMARY": str(workdir / "summary"),
                      "GITHUB_SERVER_URL": gh.url})  # fmt: skip


def test_a_hostile_deny_is_no_workflow_command_in_the_text_sweep(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, _, number = release(tmp_path, gh)
    gh.comment(REPO, number, "bob", "/deny " + REASON)
    done = subprocess.run([ZUKE, "resume", "--check"], cwd=tmp_path,
                          env=under_actions(gh, tmp_path), capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # the gate failed: denied
    assert f"{run_id} Release [qa]: gate-failed" in done.stdout
    assert "denied by @bob (maintain): not this week <img" in done.stdout  # shown, inert
    assert commands_in(done) == [], done.stdout + done.stderr
    shown = subprocess.run([ZUKE, "runs", "show", run_id], cwd=tmp_path,
                           env=under_actions(gh, tmp_path), capture_output=True, text=True,
                           timeout=120, check=False)  # fmt: skip
    assert "[approve here](https://evil.example/go)" in shown.stdout
    assert commands_in(shown) == [], shown.stdout + shown.stderr
    page = render((tmp_path / "summary").read_text(encoding="utf-8"))
    assert "<img" not in page and "<a " not in page and "<strong>" not in page


def test_the_actions_summary_renders_nothing_of_it_and_links_to_the_deciding_comment(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, _, number = release(tmp_path, gh)
    comment = gh.comment(REPO, number, "bob", "/deny " + REASON)
    env = {**under_actions(gh, tmp_path), "ZUKE_GITHUB_OUTPUTS": "off"}  # as the step sets it
    sweep = subprocess.run([ZUKE, "resume", "--check", "--json"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert sweep.returncode == 1, sweep.stderr
    assert commands_in(sweep) == []
    report = tmp_path / "report.json"
    report.write_text(sweep.stdout)
    step = subprocess.run([sys.executable, str(ROOT / "action" / "summary.py"), str(report),
                           str(sweep.returncode)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert step.returncode == 1, step.stderr
    text = (tmp_path / "summary").read_text(encoding="utf-8")
    page = render(text)
    for made in ("<img", "<script", "<strong>", 'evil.example/go"'):
        assert made not in page, page
    links = [a.split('"')[1] for a in page.split("<a href=")[1:]]
    assert links == [f"{gh.url}/{REPO}/issues/{number}#issuecomment-{comment}"], links
    row = next(line for line in text.splitlines() if line.startswith(f"| `{run_id}`"))
    assert "approve here" in html.unescape(row) and row.count(" | ") == 5  # one row, 6 cells
    assert json.loads(sweep.stdout)["runs"][0]["id"] == run_id
