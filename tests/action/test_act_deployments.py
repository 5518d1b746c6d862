"""Under a real Actions runner (nektos/act): the release recipe creates the staging deployment
(issue 26 §3, acceptance), within the job's permissions — the fake's token holds exactly what
``action/examples/release.yml`` grants (``contents``, ``actions``, ``deployments``: write)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.action.act_support import EXAMPLES, SLUG, make_repo, requires_act, run_act, sweep_env
from tests.gh.branch_support import add_main_branch

pytestmark = [pytest.mark.act, requires_act]

ACT_TOKEN = "ghs_act-test-token"  # what run_act passes as the GITHUB_TOKEN secret
BUILD = """
from zuke import Build, parameter, target
from zuke_gh import github_deployments, github_workflow


class Release(Build):
    service = parameter("the service to release").required()

    def reporters(self):
        return [github_deployments(lambda d: d.repo("acme/app"))]

    @target
    def staging(self, t):
        return t.environment("staging", url="https://staging.example.com").executes(
            lambda: print("staging", self.service.value))

    @target
    def e2e(self, t):
        return t.depends_on(self.staging).waits_for(
            lambda s: s.on(github_workflow(lambda g: g.repo("acme/app").workflow("e2e.yml")
                                           .ref("main"))).timeout("2h")
        )

    @target
    def release(self, t):
        return t.depends_on(self.e2e).environment("production").executes(lambda: None)
"""


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(tokens=[ACT_TOKEN], repos=[SLUG]) as fake:
        fake.add_workflow(SLUG, "e2e.yml", inputs={"zuke_marker": {"required": True}},
                          run_name="${{ inputs.zuke_marker }}", jobs=["e2e"])  # fmt: skip
        add_main_branch(fake)
        # the job's token: what release.yml's `permissions:` grant, nothing more
        fake.set_token(ACT_TOKEN, permissions={
            "contents": "write", "actions": "write", "deployments": "write",
        }, repositories=[SLUG])  # fmt: skip
        yield fake


def test_the_release_recipe_creates_the_staging_deployment_within_its_permissions(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = make_repo(tmp_path / "repo", build_py=BUILD, workflows=[EXAMPLES / "release.yml"])
    # The runner checks out a commit GitHub has; act takes GITHUB_SHA from the local checkout,
    # so the fake is told that commit is the one its main branch holds (same tree, same id).
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    main = gh.head(SLUG, "main")
    assert main is not None
    git = gh.state.repo(SLUG).git  # type: ignore[union-attr]
    git.commits[sha] = git.commits[main]
    env = sweep_env(api_url=gh.url)
    started = run_act(repo, "workflow_dispatch", "release.yml", env=env,
                      inputs={"service": "api"}, cache=tmp_path / "release")  # fmt: skip
    assert started.job_succeeded(), started.log
    assert "reporter 'github-deployments' failed" not in started.log, started.log
    shown = {d["environment"]: d for d in gh.deployments(SLUG)}
    assert [s["state"] for s in shown["staging"]["statuses"]] == [
        "queued", "in_progress", "success",
    ]  # fmt: skip
    assert [s["state"] for s in shown["production"]["statuses"]] == ["queued", "pending"]
    assert shown["staging"]["sha"] == sha
    assert shown["staging"]["payload"]["zuke"]["run"] == started.outputs()["run-id"]
    assert shown["staging"]["statuses"][-1]["environment_url"] == "https://staging.example.com"
    assert ACT_TOKEN not in started.log
