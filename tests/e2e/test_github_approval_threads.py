"""``github_approval`` on an existing pull request (``on_pull_request``) and with a team
allow-list (``teams``), between real ``zuke`` processes and the fake GitHub: only comments
after the gate's request count, someone's own pull request is never closed, a team's member
counts and others are told why, and a token that cannot read team memberships says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.approval_support import BUILD, CLOSED, REPO, env_for, fake_github, said
from tests.e2e.resume_support import actions, fs_store, record_of, suspend, sweep
from tests.e2e.support import write_build

pytestmark = pytest.mark.e2e


TEAM_BUILD = BUILD.replace('a.repo("acme/app")', 'a.repo("acme/app").teams("acme/release")')


@pytest.fixture(scope="module")
def gh() -> Iterator[FakeGitHub]:
    with fake_github() as fake:
        fake.add_user("acme", type="Organization")
        fake.add_team("acme", "release", ["maint"])
        yield fake


def _release(tmp_path: Path, gh: FakeGitHub, build: str, **env: str) -> tuple[str, int]:
    write_build(tmp_path, build)
    (tmp_path / "m").mkdir()
    argv = ["promote", "--markers", str(tmp_path / "m")]
    run_id = suspend(tmp_path, argv, {**env_for(gh), **env})
    (issue,) = [i for i in gh.issues(REPO) if f"run={run_id} " in (i["body"] or "")]
    return run_id, int(issue["number"])


def test_on_a_pull_request_only_an_approve_after_the_request_counts_and_it_stays_open(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    pr = gh.add_pull_request(REPO, "Release 1.2", login="carol")
    gh.comment(REPO, pr, "maint", "/approve")  # before the gate asked: not for this release
    write_build(tmp_path, BUILD.replace('a.repo("acme/app")',
                                        f'a.repo("acme/app").on_pull_request({pr})'))  # fmt: skip
    (tmp_path / "m").mkdir()
    run_id = suspend(tmp_path, ["promote", "--markers", str(tmp_path / "m")], env_for(gh))
    (request,) = said(gh, pr)
    assert request.startswith(f"<!-- zuke-approval run={run_id} gate=qa ")
    assert [i["number"] for i in gh.issues(REPO)] == [pr]  # no issue opened

    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert f"/acme/app/pull/{pr}#issuecomment-" in summary["runs"][0]["detail"]

    gh.comment(REPO, pr, "maint", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    assert record_of(fs_store(tmp_path), run_id).status == "succeeded"
    assert said(gh, pr)[-1].startswith(CLOSED)
    (thread,) = gh.issues(REPO)
    assert thread["state"] == "open" and thread["pull_request"]  # someone's PR: never closed


def test_a_teams_member_counts_and_a_maintainer_outside_it_is_told_why(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    # reading team memberships needs the organisation's members: read, which a GITHUB_TOKEN
    # cannot hold: an App installation's token can
    gh.add_token("app-token")
    gh.add_user("zuke-app[bot]", type="Bot")
    gh.set_token("app-token", login="zuke-app[bot]",
                 permissions={"issues": "write", "members": "read"})  # fmt: skip
    env = {**env_for(gh), "GH_TOKEN": "app-token"}
    run_id, number = _release(tmp_path, gh, TEAM_BUILD, GH_TOKEN="app-token")
    gh.comment(REPO, number, "carol", "/approve")  # maintain, but not in acme/release
    code, summary = sweep(tmp_path, env)
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    (reply,) = said(gh, number, "zuke-app[bot]")
    assert "@carol" in reply and "only @acme/release may decide" in reply
    gh.comment(REPO, number, "maint", "/approve")
    code, summary = sweep(tmp_path, env)
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary


def test_a_token_that_cannot_read_team_memberships_says_what_it_needs(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    gh.add_token("actions-token")  # like a workflow's GITHUB_TOKEN: no organisation permissions
    gh.set_token("actions-token", permissions={"issues": "write", "metadata": "read"})
    run_id, number = _release(tmp_path, gh, TEAM_BUILD, GH_TOKEN="actions-token")
    gh.comment(REPO, number, "maint", "/approve")
    code, summary = sweep(tmp_path, {**env_for(gh), "GH_TOKEN": "actions-token"})
    # GitHub refuses the token a permission: the sweep goes red, the run stays waiting
    assert code == 1 and actions(summary, run_id) == ["failed"], summary
    assert summary["ok"] is False and summary["runs"][0]["result"] == "suspended"
    detail = summary["runs"][0]["detail"]
    assert "403 to GET /orgs/acme/teams/release/memberships/maint" in detail
    assert "`members: read`" in detail and "users()" in detail
    assert "actions: write" not in detail  # not the client's generic hint
    assert said(gh, number, "maint") == ["/approve"] and said(gh, number) == []  # no reply
    assert record_of(fs_store(tmp_path), run_id).status == "suspended"
