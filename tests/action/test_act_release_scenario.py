"""The whole story under a real Actions runner (nektos/act), with the state on the fake GitHub.

1. A release workflow run starts a zuke run that suspends at a ``github_workflow``
   gate; its state is on the fake's ``zuke-state`` branch (no state directory anywhere).
2. The fake completes the e2e run the gate dispatched.
3. A separate act run of the scheduled sweep, in a fresh checkout, resumes the run
   and finishes the release.
4. Its outputs and job summary show the run.
5. A second sweep is a no-op: it checks nothing and commits nothing.

The fake serves from this process on 127.0.0.1; ``GITHUB_API_URL`` points every step at it
and it accepts the token act hands the job.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.action.act_support import EXAMPLES, SLUG, make_repo, requires_act, run_act, sweep_env
from tests.gh.branch_support import BRANCH, add_main_branch, branch_store

pytestmark = [pytest.mark.act, requires_act]

ACT_TOKEN = "ghs_act-test-token"  # what run_act passes as the GITHUB_TOKEN secret
BUILD = """
from zuke import Build, parameter, target
from zuke_gh import github_workflow, read_workflow_result


class Release(Build):
    service = parameter("the service to release").required()

    @target
    def staging(self, t):
        return t.executes(lambda: print("staging", self.service.value))

    @target
    def e2e(self, t):
        return t.depends_on(self.staging).waits_for(
            lambda s: s.on(github_workflow(lambda g: g.repo("acme/app").workflow("e2e.yml")
                                           .ref("main"))).timeout("2h")
        )

    @target
    def release(self, t):
        return t.depends_on(self.e2e).executes(self._release)

    def _release(self, ctx):
        result = read_workflow_result(ctx.state_of("e2e"))
        assert result is not None and result.passed
        print("released", self.service.value, "after", result.conclusion)
"""


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(tokens=[ACT_TOKEN], repos=[SLUG]) as fake:
        fake.add_workflow(SLUG, "e2e.yml", inputs={"zuke_marker": {"required": True}},
                          run_name="${{ inputs.zuke_marker }}", jobs=["e2e"])  # fmt: skip
        add_main_branch(fake)
        yield fake


def test_a_release_run_suspends_on_the_branch_and_a_fresh_sweep_job_finishes_it(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        build_py=BUILD,
        workflows=[EXAMPLES / "release.yml", EXAMPLES / "sweep.yml"],
    )
    env = sweep_env(api_url=gh.url)

    started = run_act(repo, "workflow_dispatch", "release.yml", env=env,
                      inputs={"service": "api"}, cache=tmp_path / "release")  # fmt: skip
    assert started.job_succeeded(), started.log  # a suspended run is not a failed job
    assert "staging api" in started.log and "released" not in started.log
    with branch_store(gh) as store:
        [summary] = store.list_runs()
        assert summary.status == "suspended"
    run_id = summary.id
    assert started.outputs()["run-id"] == run_id  # zuke's own output, which the job exposes
    assert (started.outputs()["status"], started.outputs()["gates"]) == ("suspended", "e2e")
    files = gh.files(SLUG, BRANCH)
    # the state is on the branch, nowhere else (the record's path is the store's layout)
    [path] = [p for p in files if p.startswith("runs/") and p.endswith(f"/{run_id}.json")]
    assert json.loads(files[path])["targets"]["e2e"]["status"] == "waiting"
    assert not (repo / ".zuke").exists()
    (dispatched,) = gh.dispatched(SLUG)
    assert dispatched["display_title"] == f"zuke:{run_id}:e2e"

    gh.complete_run(dispatched["id"], "success")
    swept = run_act(repo, "schedule", "sweep.yml", env=env, cache=tmp_path / "sweep")
    assert swept.job_succeeded(), swept.log
    assert "released api after success" in swept.log
    assert swept.sweep_outputs() == {
        "checked": "1",
        "resumed": "1",
        "still-waiting": "0",
        "failed": "0",
        "deferred": "0",
    }
    [row] = swept.summary_rows()
    assert (row["Run"], row["Build"], row["Gate"], row["Action"]) == (
        run_id, "Release", "e2e", "resumed"
    )  # fmt: skip
    assert row["Result"].startswith("succeeded")
    with branch_store(gh) as store:
        found = store.get_run(run_id)
        assert found is not None and found.record.status == "succeeded"
    history = [c["message"].partition("\n")[0] for c in gh.log(SLUG, BRANCH)]
    assert f"run {run_id}: suspended" in history and f"run {run_id}: succeeded" in history
    assert ACT_TOKEN not in started.log + swept.log

    commits = gh.stats()["commits"]
    again = run_act(repo, "schedule", "sweep.yml", env=env, cache=tmp_path / "again")
    assert again.job_succeeded(), again.log
    assert again.sweep_outputs()["checked"] == "0"
    assert again.sweep_outputs()["resumed"] == "0"
    assert "released" not in again.log
    assert gh.stats()["commits"] == commits  # a no-op sweep writes nothing
