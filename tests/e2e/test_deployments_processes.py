"""``zuke_gh.github_deployments`` between real ``zuke`` processes and the fake GitHub (issue
26 acceptance): a release to staging, then through an e2e gate (a signal) and a two-approver
``github_approval`` gate to production, shows at each step the deployments and statuses GitHub
would show — whichever process moved the run (the starter, ``zuke resume``, a sweep); ``zuke
cancel`` marks them inactive. Every wait is on a process exiting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.deploy_support import BUILD, REPO, deploy_github, env_for, last, shown
from tests.e2e.resume_support import fs_store, record_of, suspend, sweep
from tests.e2e.support import finish, spawn, write_build

pytestmark = pytest.mark.e2e


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with deploy_github() as fake:
        yield fake


def test_staging_then_production_through_e2e_and_two_approvals_across_processes(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    write_build(tmp_path, BUILD)
    env = env_for(gh)
    run_id = suspend(tmp_path, ["production"], env)
    assert shown(gh, run_id) == {
        "staging": ["queued", "in_progress", "success"],
        "production": ["queued", "pending"],
    }
    waiting = last(gh, run_id, "production")["description"]
    assert waiting.startswith("waiting at e2e since ")
    assert waiting.endswith(" UTC for the signal 'e2e-passed'")

    code, out = finish(spawn(["resume", run_id, "--signal", "e2e-passed"], tmp_path, env))
    assert code == 0, out
    assert shown(gh, run_id)["production"] == ["queued", "pending", "queued", "pending"]
    waiting = last(gh, run_id, "production")["description"]
    assert waiting.startswith("waiting at approve since ") and "0 of 2 approvals" in waiting
    assert len(waiting) <= 140

    code, summary = sweep(tmp_path, env)  # nothing decided yet: nothing new on GitHub
    assert code == 0
    assert shown(gh, run_id)["production"] == ["queued", "pending", "queued", "pending"]

    (issue,) = gh.issues(REPO)
    gh.comment(REPO, issue["number"], "alice", "/approve")
    gh.comment(REPO, issue["number"], "bob", "/approve")
    code, summary = sweep(tmp_path, env)
    assert code == 0, summary
    assert record_of(fs_store(tmp_path), run_id).status == "succeeded"
    assert shown(gh, run_id) == {
        "staging": ["queued", "in_progress", "success"],
        "production": ["queued", "pending", "queued", "pending", "queued", "in_progress",
                       "success"],
    }  # fmt: skip
    assert last(gh, run_id, "production")["environment_url"] == "https://app.example.com"


def test_zuke_cancel_in_another_process_marks_the_deployments_inactive(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    write_build(tmp_path, BUILD)
    env = env_for(gh)
    run_id = suspend(tmp_path, ["production"], env)
    code, out = finish(spawn(["cancel", run_id], tmp_path, env))
    assert code == 0, out
    assert shown(gh, run_id) == {
        "staging": ["queued", "in_progress", "success", "inactive"],
        "production": ["queued", "pending", "inactive"],
    }
    assert gh.token not in out
