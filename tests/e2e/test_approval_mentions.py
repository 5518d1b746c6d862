"""Approvers are notified once (issue 26 §4): the approval issue's body, written once when it
is opened, mentions the configured ``users()`` and ``teams()`` — GitHub notifies whoever an
issue's body mentions when it is created — and nothing zuke writes later mentions them again
(no edit of the body, no comment to someone who did not comment). The role is never
mentioned as a whole. Real processes on the fake GitHub."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from fixtures.fake_github import FakeGitHub
from tests.e2e.approval_support import BUILD, REPO, env_for, fake_github, issue_of, said
from tests.e2e.resume_support import suspend, sweep
from tests.e2e.support import write_build

pytestmark = pytest.mark.e2e

RENDER = MarkdownIt("commonmark", {"html": True})
CONFIGURED = '.no_self_approval().users("maint", "Carol").teams("acme/release-team")'


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with fake_github() as fake:
        fake.add_team("acme", "release-team", members=["bob"])
        yield fake


def mentions(markdown: str) -> list[str]:
    """The ``@login`` and ``@org/team`` mentions GitHub would see: outside code, lower-cased."""
    outside = re.sub(r"<code>.*?</code>", " ", RENDER.render(markdown), flags=re.S)
    return [m.lower() for m in re.findall(r"(?<![\w/])@([A-Za-z0-9-]+(?:/[A-Za-z0-9_.-]+)?)",
                                          outside)]  # fmt: skip


def test_the_issue_body_mentions_the_configured_users_and_teams_once_and_nothing_later(
    gh: FakeGitHub, tmp_path: Path
) -> None:
    assert CONFIGURED.split(".users")[0] in BUILD
    write_build(tmp_path, BUILD.replace(".no_self_approval()", CONFIGURED))
    markers = tmp_path / "m"
    markers.mkdir()
    env = env_for(gh)
    run_id = suspend(tmp_path, ["promote", "--markers", str(markers)], env)
    issue = issue_of(gh, run_id)
    assert sorted(mentions(issue["body"])) == ["acme/release-team", "carol", "maint"]
    assert "@maintain" not in issue["body"]  # the role is said, never mentioned as a whole

    gh.comment(REPO, issue["number"], "maint", "/approve")
    code, summary = sweep(tmp_path, env)
    assert code == 0 and summary["counts"]["resumed"] == 1, summary
    # the body was never written again (its mentions notified once), and no later comment of
    # zuke's mentions a configured approver who did not comment
    path = f"/repos/{REPO}/issues/{issue['number']}"
    edits = [json.loads(r["body"]) for r in gh.requests
             if r["method"] == "PATCH" and r["path"] == path]  # fmt: skip
    assert edits and all(set(e) <= {"state", "state_reason"} for e in edits), edits
    assert issue_of(gh, run_id)["body"] == issue["body"]
    for text in said(gh, issue["number"]):
        assert not {"carol", "acme/release-team"} & set(mentions(text)), text
