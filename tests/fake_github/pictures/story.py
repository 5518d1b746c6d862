"""The release the pictures show, driven by real ``zuke`` processes against the fake GitHub.

Three runs of ``tests/e2e/deploy_support.BUILD`` (staging, an e2e signal, a two-approver
``github_approval`` gate, production), each on its own commit and "Actions run" (the
``GITHUB_*`` variables a job has, so ``log_url`` and the dashboard's links are what Actions
would give): one approved by alice and bob and finished, one cancelled while it waited for
e2e (its deployments ``inactive``), and one deployed to staging and waiting at the approval
gate with alice's approval of two. A last sweep keeps the release dashboard issue
(``ZUKE_GITHUB_DASHBOARD``). Then :func:`snapshot` reads what the fake holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fixtures.fake_github import FakeGitHub
from tests.e2e.deploy_support import APPROVERS, BUILD, REPO, env_for
from tests.e2e.resume_support import suspend, sweep
from tests.e2e.support import finish, spawn, write_build

#: where GitHub would serve the pages and the Actions runs
SERVER = "https://github.com"


@dataclass(frozen=True)
class Story:
    """The three runs' ids and the issues the story left open."""

    finished: str
    cancelled: str
    waiting: str
    approval: int  # the waiting run's approval issue
    dashboard: int


@dataclass(frozen=True)
class Snapshot:
    """What the fake GitHub holds for one repository (its control shapes, not GitHub's)."""

    repo: str
    #: the fake's own address: links to it are shown as GitHub's (``SERVER``)
    fake_url: str
    now_ms: int
    deployments: list[dict[str, Any]]
    issues: list[dict[str, Any]]
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: commit SHA -> its message's first line
    commits: dict[str, str] = field(default_factory=dict)


def actions_env(gh: FakeGitHub, run_number: int) -> dict[str, str]:
    """A zuke process's environment as an Actions job on the branch's head would have it."""
    return {**env_for(gh), "GITHUB_SERVER_URL": SERVER, "GITHUB_REPOSITORY": REPO,
            "GITHUB_RUN_ID": str(run_number)}  # fmt: skip


def _ok(proc_result: tuple[int, str]) -> str:
    code, out = proc_result
    assert code == 0, out
    return out


def _approval_issue(gh: FakeGitHub, run_id: str) -> int:
    (found,) = [i for i in gh.issues(REPO) if f"zuke-approval run={run_id} " in (i["body"] or "")]
    return int(found["number"])


def _to_approval(workdir: Path, env: dict[str, str], gh: FakeGitHub) -> tuple[str, int]:
    """Start a release (staging deploys, it waits for e2e) and pass e2e: its approval issue."""
    run_id = suspend(workdir, ["production"], env)
    _ok(finish(spawn(["resume", run_id, "--signal", "e2e-passed"], workdir, env)))
    return run_id, _approval_issue(gh, run_id)


def tell(gh: FakeGitHub, workdir: Path) -> Story:
    """Drive the story (about 5 s of ``zuke`` processes); ``gh`` has REPO and the approvers."""
    write_build(workdir, BUILD)
    gh.commit_files(REPO, "main", {"VERSION": "1.4.0\n"}, "Release 1.4.0")
    finished, number = _to_approval(workdir, actions_env(gh, 7001), gh)
    for login in APPROVERS:
        gh.comment(REPO, number, login, "/approve")
    code, summary = sweep(workdir, actions_env(gh, 7002))
    assert code == 0 and summary["counts"]["resumed"] == 1, summary

    gh.commit_files(REPO, "main", {"VERSION": "1.5.0-rc.1\n"}, "Release 1.5.0-rc.1")
    env = actions_env(gh, 7003)
    cancelled = suspend(workdir, ["production"], env)
    _ok(finish(spawn(["cancel", cancelled], workdir, env)))

    gh.commit_files(REPO, "main", {"VERSION": "1.5.0\n"}, "Release 1.5.0")
    waiting, approval = _to_approval(workdir, actions_env(gh, 7004), gh)
    gh.comment(REPO, approval, APPROVERS[0], "/approve")
    env = {**actions_env(gh, 7005), "ZUKE_GITHUB_DASHBOARD": REPO}
    code, summary = sweep(workdir, env)
    assert code == 0 and summary["counts"]["still_waiting"] == 1, summary
    (board,) = [i for i in gh.issues(REPO) if i["title"] == "zuke: releases waiting"]
    return Story(finished, cancelled, waiting, approval, int(board["number"]))


def snapshot(gh: FakeGitHub, repo: str = REPO) -> Snapshot:
    """Read the fake's state for ``repo`` (control calls: no request is counted)."""
    issues = gh.issues(repo)
    return Snapshot(
        repo=repo,
        fake_url=gh.url,
        now_ms=gh.now_ms(),
        deployments=gh.deployments(repo),
        issues=issues,
        comments={int(i["number"]): gh.comments(repo, i["number"]) for i in issues},
        commits={c["sha"]: c["message"].split("\n", 1)[0] for c in gh.log(repo, "main")},
    )
